"""The ec2 provider of playbooks/reimage.yml, and the image side it needs: an image's AMIs
(`image.ec2_amis` in its store manifest) pinned by planning and handed to the playbook.

No cloud is reachable from this project's machines: the real playbook runs through
ansible-runner against a local host, and the AWS CLI it calls is a test double (below) that
answers as EC2 does for the three calls the provider makes. What this proves is the
playbook's side (validation, argv, client token, polling, verification), not EC2's.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ansible_runner
import pytest
import yaml

from fleetgate.errors import BadInput
from fleetgate.image.store import MANIFEST
from fleetgate.rollout import image_change
from fleetgate.rollout.plan import ImagePin, load_plan
from fleetgate.site import content_env
from tests.conftest import REPO
from tests.unit.test_image_change import put_image, write_plan

AMIS = {"eu-west-1": "ami-0a1b2c3d4e5f60718", "us-east-1": "ami-0123456789abcdef0"}
INSTANCE = "i-0fedcba9876543210"
OLD_ID = f"lab-cpu-1:{'1' * 64}"

# A test double of the AWS CLI (`aws ec2 ...`), standing in for EC2 because no cloud is
# reachable here. It logs every argv, keeps the instance's tags and its replacement tasks in a
# state file, and answers like EC2: one task per client token (the same token gets the same
# task back), described first in-progress, then succeeded, or failed while the marker file
# FAIL exists. On succeeded it writes the instance's fleetgate:image-id tag into the host's
# image-id file: what the AMI's boot unit does on a real instance.
FAKE_AWS = '''#!{python}
import json, sys
from pathlib import Path

LOG, STATE, FAIL, ID_FILE = (Path(p) for p in {paths!r})
argv = sys.argv[1:]
with LOG.open("a") as f:
    f.write(json.dumps(argv) + "\\n")
state = json.loads(STATE.read_text()) if STATE.exists() else {{"tags": {{}}, "tasks": {{}}}}

def opt(name):
    return argv[argv.index(name) + 1]

cmd = argv[1] if argv[:1] == ["ec2"] and len(argv) > 1 else ""
if cmd == "create-tags":
    key, value = (kv.split("=", 1)[1] for kv in opt("--tags").split(","))
    state["tags"][key] = value
    out = None
elif cmd == "create-replace-root-volume-task":
    token = opt("--client-token")
    task = state["tasks"].setdefault(token, {{
        "ReplaceRootVolumeTaskId": "replacevol-%017x" % (len(state["tasks"]) + 1),
        "InstanceId": opt("--instance-id"), "ImageId": opt("--image-id"), "polls": 0}})
    out = {{"ReplaceRootVolumeTask": {{"ReplaceRootVolumeTaskId": task["ReplaceRootVolumeTaskId"],
                                      "InstanceId": task["InstanceId"], "TaskState": "pending"}}}}
elif cmd == "describe-replace-root-volume-tasks":
    wanted = opt("--replace-root-volume-task-ids")
    [task] = [t for t in state["tasks"].values() if t["ReplaceRootVolumeTaskId"] == wanted]
    task["polls"] += 1
    done = "failed" if FAIL.exists() else "succeeded"
    task_state = "in-progress" if task["polls"] == 1 else done
    if task_state == "succeeded":
        ID_FILE.write_text(state["tags"]["fleetgate:image-id"] + "\\n")
    out = {{"ReplaceRootVolumeTasks": [{{"ReplaceRootVolumeTaskId": wanted,
                                        "TaskState": task_state}}]}}
else:
    sys.exit("aws (test double): unexpected arguments " + " ".join(argv))
STATE.write_text(json.dumps(state))
if out is not None:
    print(json.dumps(out, indent=4))
'''


class Cloud:
    """One test's EC2 stand-in: the fake CLI on PATH, its log, and the host's image-id file."""

    def __init__(self, root: Path):
        self.root = root
        self.bin = root / "bin"
        self.bin.mkdir(parents=True)
        self.log = root / "aws.log"
        self.fail_marker = root / "FAIL"
        self.id_file = root / "host" / "image-id"
        self.id_file.parent.mkdir()
        self.id_file.write_text(OLD_ID + "\n")
        self.install("aws")

    def install(self, name: str) -> Path:
        script = self.bin / name
        paths = [str(p) for p in (self.log, self.root / "aws-state.json", self.fail_marker,
                                  self.id_file)]
        script.write_text(FAKE_AWS.format(python=sys.executable, paths=paths))
        script.chmod(0o755)
        return script

    def calls(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def subcommands(self) -> list[str]:
        return [argv[1] for argv in self.calls()]


def host_vars(cloud: Cloud, **over: Any) -> dict[str, Any]:
    return {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
            "fleetgate_reimage_provider": "ec2", "fleetgate_ec2_instance_id": INSTANCE,
            "fleetgate_ec2_region": "eu-west-1", "fleetgate_image_id_file": str(cloud.id_file),
            "fleetgate_ec2_poll_s": 0, **over}


@dataclass
class Run:
    rc: int
    failed: dict[str, str]  # host -> the message of the task it failed
    changed: set[str]


def reimage(cloud: Cloud, hosts: dict[str, dict[str, Any]], extravars: dict[str, Any]) -> Run:
    """The real playbooks/reimage.yml through ansible-runner, under fleetgate's ansible.cfg,
    with the double first on PATH. Not fleetgate's own runner: it rightly refuses a local
    connection for any host but localhost, and these hosts must carry cloud names."""
    n = len(list(cloud.root.glob("run-*")))
    inv = cloud.root / f"inventory-{n}.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    run_dir = cloud.root / f"run-{n}"
    run_dir.mkdir()
    r = ansible_runner.run(
        private_data_dir=str(run_dir), inventory=str(inv),
        playbook=str(REPO / "playbooks" / "reimage.yml"), extravars=extravars,
        envvars={**content_env(), "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORKS": str(len(hosts)),
                 "PATH": f"{cloud.bin}:{Path(sys.executable).parent}:{os.environ['PATH']}"},
        quiet=True, timeout=120)
    failed = {e["event_data"]["host"]: " ".join(str(e["event_data"]["res"].get("msg")).split())
              for e in r.events if e.get("event") == "runner_on_failed"
              and not e["event_data"].get("ignore_errors")}
    return Run(int(r.rc), failed, set((r.stats or {}).get("changed", {})))


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A real image store: lab-cpu:2 published to two regions, lab-cpu:1 to none."""
    root = tmp_path / "images"
    put_image(root, "lab-cpu", 1, b"version one")
    put_image(root, "lab-cpu", 2, b"version two")
    set_amis(root / "lab-cpu-2", AMIS)
    monkeypatch.setenv("FLEETGATE_IMAGES_DIR", str(root))
    return root


def set_amis(image_dir: Path, amis: Any) -> None:
    """What a Packer amazon-ebs build records in the manifest: the AMI of each region."""
    path = image_dir / MANIFEST
    doc = json.loads(path.read_text())
    doc["image"]["ec2_amis"] = amis
    path.write_text(json.dumps(doc))


@pytest.fixture
def cloud(tmp_path: Path, store: Path) -> Cloud:
    return Cloud(tmp_path / "cloud")


@pytest.fixture
def image_vars(store: Path, tmp_path: Path) -> dict[str, Any]:
    """The vars a rollout of lab-cpu:2 gives the playbook, from planning's own pin."""
    plan = load_plan(write_plan(tmp_path))
    assert plan.change.image_pin is not None
    return image_change.reimage_vars(plan.change.image_pin.model_dump())


def token_of(host: str, image_id: str) -> str:
    return hashlib.sha256(f"{host} {image_id}".encode()).hexdigest()[:64]


# --- the image side: the AMIs an image was published as, pinned and handed over ---


def test_planning_pins_the_images_amis_and_hands_them_to_the_playbook(
        store: Path, tmp_path: Path) -> None:
    plan = load_plan(write_plan(tmp_path))
    pin = plan.change.image_pin
    assert pin is not None and pin.ec2_amis == AMIS
    sha = hashlib.sha256(b"version two").hexdigest()
    assert image_change.reimage_vars(pin.model_dump()) == {
        "fleetgate_image": "lab-cpu:2", "fleetgate_image_id": f"lab-cpu-2:{sha}",
        "fleetgate_image_ec2_amis": AMIS}
    # An image never published to EC2 pins no AMI, and its run is given none.
    lab = image_change.pin("lab-cpu:1", "lab-cpu", source="plan.yml", field="change.image")
    assert ImagePin(**lab).ec2_amis == {}
    assert "fleetgate_image_ec2_amis" not in image_change.reimage_vars(lab)


def test_the_previous_image_carries_its_amis(store: Path) -> None:
    sha = hashlib.sha256(b"version two").hexdigest()
    prev = image_change.previous_pin(f"lab-cpu-2:{sha}")
    assert prev is not None and prev["ec2_amis"] == AMIS
    # A stored image whose AMI map is malformed is nothing a rollback could re-image to.
    set_amis(store / "lab-cpu-2", {"eu-west-1": "ami-; id"})
    assert image_change.previous_pin(f"lab-cpu-2:{sha}") is None


@pytest.mark.parametrize(("amis", "needle"), [
    ({"eu west 1": "ami-0123456789abcdef0"}, "value 'eu west 1' is not allowed"),
    ({"eu-west-1; id": "ami-0123456789abcdef0"}, "is not allowed"),
    ({"eu-west-1": "ami-0123; id"}, "value 'ami-0123; id' is not allowed"),
    ({"eu-west-1": "i-0123456789abcdef0"}, "is not allowed"),
    ({"eu-west-1": 7}, "Input should be a valid string"),
    (["ami-0123456789abcdef0"], "Input should be a valid dictionary"),
])
def test_a_malformed_ami_map_in_a_stored_manifest_is_bad_input_at_planning(
        store: Path, tmp_path: Path, amis: Any, needle: str) -> None:
    set_amis(store / "lab-cpu-2", amis)
    with pytest.raises(BadInput) as exc:
        load_plan(write_plan(tmp_path))
    line = str(exc.value)
    assert "\n" not in line and needle in line, line
    assert exc.value.source == str(store / "lab-cpu-2" / MANIFEST)
    assert (exc.value.field or "").startswith("image.ec2_amis"), exc.value.field


# --- the playbook, against the test double of the AWS CLI ---


def test_an_instance_is_re_imaged_from_the_ami_of_its_region(
        cloud: Cloud, image_vars: dict[str, Any]) -> None:
    res = reimage(cloud, {"cloud-1": host_vars(cloud)}, image_vars)
    assert res.rc == 0, res.failed
    new_id = image_vars["fleetgate_image_id"]
    tag, create, *polls = cloud.calls()
    assert tag == ["ec2", "create-tags", "--region", "eu-west-1", "--resources", INSTANCE,
                   "--tags", f"Key=fleetgate:image-id,Value={new_id}"]
    assert create == ["ec2", "create-replace-root-volume-task", "--region", "eu-west-1",
                      "--instance-id", INSTANCE, "--image-id", AMIS["eu-west-1"],
                      "--delete-replaced-root-volume",
                      "--client-token", token_of("cloud-1", new_id), "--output", "json"]
    # Polled until the task ended: in-progress once, then succeeded.
    assert polls == [["ec2", "describe-replace-root-volume-tasks", "--region", "eu-west-1",
                      "--replace-root-volume-task-ids", f"replacevol-{1:017x}",
                      "--output", "json"]] * 2
    assert cloud.id_file.read_text().strip() == new_id
    assert res.changed == {"cloud-1"}


def test_a_host_that_reports_the_image_is_left_alone(
        cloud: Cloud, image_vars: dict[str, Any]) -> None:
    cloud.id_file.write_text(image_vars["fleetgate_image_id"] + "\n")
    res = reimage(cloud, {"cloud-1": host_vars(cloud)}, image_vars)
    assert res.rc == 0, res.failed
    assert cloud.calls() == []
    assert res.changed == set()


def test_a_resumed_rollout_asks_ec2_with_the_same_client_token(
        cloud: Cloud, image_vars: dict[str, Any]) -> None:
    first = reimage(cloud, {"cloud-1": host_vars(cloud)}, image_vars)
    assert first.rc == 0, first.failed
    # As if the controller died after asking EC2 and before the host reported the image.
    cloud.id_file.write_text(OLD_ID + "\n")
    again = reimage(cloud, {"cloud-1": host_vars(cloud)}, image_vars)
    assert again.rc == 0, again.failed
    creates = [argv for argv in cloud.calls() if argv[1] == "create-replace-root-volume-task"]
    tokens = [argv[argv.index("--client-token") + 1] for argv in creates]
    assert tokens == [token_of("cloud-1", image_vars["fleetgate_image_id"])] * 2
    # So EC2 answered with the first replacement, not a second one: one task was ever polled.
    polled = {argv[-3] for argv in cloud.calls()
              if argv[1] == "describe-replace-root-volume-tasks"}
    assert polled == {f"replacevol-{1:017x}"}


def test_bad_host_vars_are_refused_before_any_aws_call(
        cloud: Cloud, image_vars: dict[str, Any]) -> None:
    not_aws = cloud.install("not-aws")  # a working double by another name: must not run
    bad: dict[str, tuple[dict[str, Any], str]] = {
        "bad-instance": ({"fleetgate_ec2_instance_id": "i-123; rm -rf /"},
                         "fleetgate_ec2_instance_id i-123; rm -rf / is not an EC2 instance id"),
        "bad-region": ({"fleetgate_ec2_region": "us-east-1; id"},
                       "fleetgate_ec2_region us-east-1; id is not an AWS region"),
        "no-ami": ({"fleetgate_ec2_region": "ap-south-1"},
                   "image lab-cpu:2 has no AMI in region ap-south-1"),
        "bad-provider": ({"fleetgate_reimage_provider": "ec2; id"}, "provider ec2; id"),
        "bad-cli": ({"fleetgate_aws_cli": "/tmp/x; id"}, "fleetgate_aws_cli /tmp/x; id is not"),
        "other-cli": ({"fleetgate_aws_cli": str(not_aws)}, f"fleetgate_aws_cli {not_aws}"),
        # The lab provider keeps its own check; a lab host is one by default.
        "bad-lab-dir": ({"fleetgate_reimage_provider": "lab", "fleetgate_lab_dir": "lab; id"},
                        "(lab): fleetgate_lab_dir lab; id is not an absolute path"),
        "lab-default": ({"fleetgate_reimage_provider": None, "fleetgate_lab_id": "lab-1"},
                        "(lab): fleetgate_lab_dir (none) is not an absolute path"),
    }
    hosts = {}
    for name, (over, _) in bad.items():
        id_file = cloud.root / "host" / f"{name}-image-id"
        id_file.write_text(OLD_ID + "\n")
        hv = host_vars(cloud, fleetgate_image_id_file=str(id_file), **over)
        hosts[name] = {k: v for k, v in hv.items() if v is not None}
    res = reimage(cloud, hosts, image_vars)
    assert res.rc != 0 and set(res.failed) == set(bad), res.failed
    for name, (_, reason) in bad.items():
        assert reason in res.failed[name], (name, res.failed[name])
        assert res.failed[name].startswith(f"cannot re-image {name}"), res.failed[name]
    assert cloud.calls() == []


def test_a_failed_replacement_fails_the_host_naming_the_task_and_its_state(
        cloud: Cloud, image_vars: dict[str, Any]) -> None:
    cloud.fail_marker.touch()
    res = reimage(cloud, {"cloud-1": host_vars(cloud)}, image_vars)
    assert res.rc != 0
    assert res.failed["cloud-1"] == (f"cloud-1 (ec2): root volume replacement replacevol-{1:017x} "
                           "ended failed, not succeeded")
    assert cloud.subcommands()[-1] == "describe-replace-root-volume-tasks"
    assert cloud.id_file.read_text().strip() == OLD_ID
