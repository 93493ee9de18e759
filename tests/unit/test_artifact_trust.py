"""Plan artifacts an attacker edited between review and start: each edit, even with a
recomputed hash and a MAC made with the real key, is refused before anything runs, as one
line naming the field. SSH signatures (real ssh-keygen) let CI vouch for an artifact any
controller may start, and approvals carry a verified signer instead of $USER.

A small site of its own (one class, one playbook, a static inventory Ansible never contacts)
is planned once through the real CLI; every tamper starts from that artifact."""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import shutil
import stat
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetgate.errors import BadInput
from fleetgate.rollout import artifact as artifacts
from fleetgate.rollout import artifact_mac, signing
from fleetgate.rollout.journal import Journal
from fleetgate.site import load_site
from tests.conftest import REPO, fleetgate
from tests.fixtures.rollout.journal_builder import RID, WAVES, artifact

INVENTORY: dict[str, Any] = {"all": {
    "vars": {"ansible_host": "127.0.0.1", "ansible_port": 1},  # never contacted
    "hosts": {f"h{i}": {"fleetgate_class": "lab-cpu", "rack": f"r{i % 2}", "zone": "z"}
              for i in range(1, 5)},
    "children": {"pool_canary": {"hosts": {"h1": None}},
                 "pool_wave1": {"hosts": {"h2": None, "h3": None, "h4": None}}}}}
PLAN: dict[str, Any] = {
    "name": "trust",
    "targets": {"inventory": "inventory/inv.yml", "class": "lab-cpu"},
    "change": {"playbook": "playbooks/change.yml"},
    "waves": {"pools": ["pool_canary", "pool_wave1"]},
    "budgets": {"per_wave": {"max_failed": 1}},
}
SECURITY = {"require_signed_artifacts": True, "require_signed_approvals": True,
            "allowed_signers": "keys/allowed_signers"}


def make_site(root: Path, security: dict[str, Any] | None = None) -> Path:
    for sub in ("classes", "playbooks", "inventory", "keys"):
        (root / sub).mkdir(parents=True)
    shutil.copyfile(REPO / "inventory" / "classes" / "lab-cpu.yml",
                    root / "classes" / "lab-cpu.yml")
    (root / "playbooks" / "change.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks: [{ansible.builtin.ping: {}}]\n")
    (root / "inventory" / "inv.yml").write_text(yaml.safe_dump(INVENTORY))
    (root / "plan.yml").write_text(yaml.safe_dump(PLAN))
    site: dict[str, Any] = {"fleetgate": 1, "classes": "classes", "playbooks": ["playbooks"],
                            "state": ".fleetgate"}
    if security:
        site["security"] = security
    (root / "fleetgate.yml").write_text(yaml.safe_dump(site))
    return root


def env_of(site: Path, state: Path | None = None) -> dict[str, str]:
    return {"FLEETGATE_SITE": str(site), "FLEETGATE_STATE_DIR": str(state or site / ".fleetgate"),
            "FLEETGATE_CLASSES_DIR": str(site / "classes")}


def plan_artifact(site: Path) -> Path:
    out = site / "trust.json"
    proc = fleetgate("rollout", "plan", str(site / "plan.yml"), "--out", str(out),
                     env=env_of(site), cwd=site)
    assert proc.returncode == 0, proc.stderr
    return out


def keygen(path: Path, comment: str) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f",
                    str(path)], check=True, capture_output=True, stdin=subprocess.DEVNULL)
    return path


def fingerprint_of(key: Path) -> str:
    out = subprocess.run(["ssh-keygen", "-lf", f"{key}.pub"], check=True, capture_output=True,
                         text=True, stdin=subprocess.DEVNULL).stdout
    return out.split()[1]


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A site without signatures and the artifact planned in it."""
    site = make_site(tmp_path_factory.mktemp("plain") / "site")
    return site, plan_artifact(site)


@pytest.fixture
def in_site(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Run in-process code in a site (and a state dir), as the CLI would."""
    def enter(site: Path, state: Path | None = None) -> None:
        for k, v in env_of(site, state).items():
            monkeypatch.setenv(k, v)
    return enter


def tampered(path: Path, edit: Callable[[dict[str, Any]], object], name: str = "t.json"
             ) -> Path:
    """The artifact edited, its hash recomputed and MACed with the state dir's real key:
    what an attacker with that key could write. Only the checks stand in the way."""
    doc = json.loads(path.read_text())
    edit(doc)
    body = {k: v for k, v in doc.items() if k not in ("mac", "hash")}
    doc = {**body, "hash": "0" * 16}
    doc["mac"] = artifact_mac.mac(doc)
    out = path.with_name(name)
    out.write_text(json.dumps(doc, indent=2))
    return out


def set_plan(**over: Any) -> Callable[[dict[str, Any]], None]:
    return lambda d: d["plan"].update(over)


def set_change(**over: Any) -> Callable[[dict[str, Any]], None]:
    return lambda d: d["plan"]["change"].update(over)


def add_host_outside_inventory(d: dict[str, Any]) -> None:
    d["hosts"]["h9"] = d["hosts"]["h4"]
    d["waves"][1].append("h9")
    d["hosts_fingerprint"] = artifacts.fingerprint(d["hosts"])


TAMPERS: list[tuple[str, Callable[[dict[str, Any]], object], str, str]] = [
    ("playbook climbing out", set_change(playbook="../../../tmp/evil.yml"),
     "plan.change.playbook", "without '..'"),
    ("playbook absolute", set_change(playbook="/tmp/evil.yml"), "plan.change.playbook",
     "relative path"),
    ("playbook outside the playbook dirs", set_change(playbook="inventory/inv.yml"),
     "plan.change.playbook", "playbook directories"),
    ("drain playbook", set_plan(drain={"drain_playbook": "/tmp/evil.yml",
                                       "undrain_playbook": "playbooks/undrain.yml"}),
     "plan.drain.drain_playbook", "relative path"),
    ("undrain playbook", set_plan(drain={"drain_playbook": "playbooks/drain.yml",
                                         "undrain_playbook": "../evil.yml"}),
     "plan.drain.undrain_playbook", "without '..'"),
    ("rollback playbook", set_plan(rollback={"playbook": "../../evil.yml"}),
     "plan.rollback.playbook", "without '..'"),
    ("classes outside", set_change(classes="/etc"), "plan.change.classes", "relative path"),
    ("classes climbing out", set_change(classes="classes/../../x"), "plan.change.classes",
     "without '..'"),
    ("invalid plan", set_plan(concurrency="5"), "plan.concurrency", "valid integer"),
    ("unknown plan key", set_plan(run_first="id"), "plan.run_first", "unknown key"),
    ("no waves", lambda d: d.update(waves=[]), "waves", "at least one wave"),
    ("empty wave", lambda d: d["waves"].append([]), "waves[2]", "empty"),
    ("host in no wave", lambda d: d["waves"][1].remove("h4"), "hosts", "in no wave: h4"),
    ("host in two waves", lambda d: d["waves"][0].append("h2"), "waves[1]",
     "h2 is in waves 1 and 2"),
    ("wave host not in hosts", lambda d: d["waves"][1].append("h7"), "waves[1]",
     "h7 is in wave 2 but not among"),
    ("host not in the inventory", add_host_outside_inventory, "hosts", "gone: h9"),
    ("hosts edited, fingerprint kept", lambda d: d["hosts"]["h1"]["domains"].update(rack="r9"),
     "hosts_fingerprint", "does not match"),
    ("waves reordered", lambda d: d.update(waves=[d["waves"][1], d["waves"][0]]), "waves",
     "not what the plan gives"),
    ("limits raised", lambda d: d["limits"].update(total=99), "limits",
     "not what the plan gives"),
    ("budget text edited", lambda d: d["budgets"].update(total="tolerates all"), "budgets",
     "not what the plan gives"),
    ("missing plan", lambda d: d.pop("plan"), "plan", "required field is missing"),
    ("missing limits", lambda d: d.pop("limits"), "limits", "required field is missing"),
    ("missing inventory", lambda d: d.pop("inventory"), "inventory", "required"),
    ("waves not a list", lambda d: d.update(waves="h1,h2"), "waves", "valid list"),
    ("hosts a list", lambda d: d.update(hosts=["h1"]), "hosts", "valid dictionary"),
    ("limit a string", lambda d: d["limits"].update(total="1"), "limits.total",
     "valid integer"),
    ("unknown top-level key", lambda d: d.update(run="id"), "run", "unknown key"),
    ("inventory elsewhere", lambda d: d.update(inventory="relative/inv.yml"), "inventory",
     "no such inventory"),
]


@pytest.mark.parametrize(("what", "edit", "field", "needle"), TAMPERS,
                         ids=[t[0] for t in TAMPERS])
def test_every_tamper_is_refused_naming_the_field(
        plain: tuple[Path, Path], in_site: Callable[..., None], what: str,
        edit: Callable[[dict[str, Any]], object], field: str, needle: str) -> None:
    site, art = plain
    in_site(site)
    bad = tampered(art, edit)
    with pytest.raises(BadInput) as exc:
        artifacts.load(bad)
    assert exc.value.field == field, (what, exc.value.one_line())
    assert needle in exc.value.reason, (what, exc.value.one_line())
    assert "\n" not in exc.value.one_line()


def test_a_tampered_artifact_through_start_exits_2_and_nothing_runs(
        plain: tuple[Path, Path], in_site: Callable[..., None], tmp_path: Path) -> None:
    site, art = plain
    in_site(site)
    bad = tampered(art, set_change(playbook="/tmp/evil.yml"), "cli.json")
    state = tmp_path / "state"
    shutil.copytree(site / ".fleetgate" / "keys", state / "keys")  # the same key
    proc = fleetgate("rollout", "start", str(bad), env=env_of(site, state), cwd=site)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (f"fleetgate: {bad}: plan.change.playbook: '/tmp/evil.yml' "
                                   "must be a relative path without '..'")
    assert not (state / "rollouts" / "journal.db").exists() or not Journal(
        state / "rollouts" / "journal.db").rollouts()


def test_duplicate_key_is_refused_naming_the_key(
        plain: tuple[Path, Path], in_site: Callable[..., None]) -> None:
    site, art = plain
    in_site(site)
    doc = json.loads(art.read_text())
    # What a JSON parser would take (the last value), MACed, with the reviewed value first.
    doc["plan"]["change"]["playbook"] = "/tmp/evil.yml"
    doc["mac"] = artifact_mac.mac({k: v for k, v in doc.items() if k != "mac"})
    text = json.dumps(doc, indent=2).replace(
        '"playbook": "/tmp/evil.yml"',
        '"playbook": "playbooks/change.yml", "playbook": "/tmp/evil.yml"')
    bad = art.with_name("dup.json")
    bad.write_text(text)
    assert json.loads(text)["plan"]["change"]["playbook"] == "/tmp/evil.yml"
    with pytest.raises(BadInput) as exc:
        artifacts.load(bad)
    assert exc.value.field == "playbook" and "duplicate key" in exc.value.reason


def test_a_recomputed_hash_without_the_key_is_refused(
        plain: tuple[Path, Path], in_site: Callable[..., None], tmp_path: Path) -> None:
    site, art = plain
    in_site(site)
    doc = json.loads(art.read_text())
    doc["limits"]["total"] = 3
    body = {k: v for k, v in doc.items() if k not in ("hash", "mac")}
    # The old, unkeyed scheme: anyone can recompute it.
    doc["hash"] = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]
    for name, d in (("rehashed.json", doc), ("no-mac.json", {
            k: v for k, v in doc.items() if k != "mac"})):
        bad = art.with_name(name)
        bad.write_text(json.dumps(d))
        with pytest.raises(BadInput) as exc:
            artifacts.load(bad)
        assert exc.value.field == "mac" and "edited after planning" in exc.value.reason
    # The untouched artifact on another state dir (another key, or none yet) is refused too.
    in_site(site, tmp_path / "other-state")
    with pytest.raises(BadInput) as exc:
        artifacts.load(art)
    assert exc.value.field == "mac" and "another state dir's key" in exc.value.reason
    assert not (tmp_path / "other-state" / "keys").exists()  # refusing makes no key


def test_the_key_is_private_and_never_printed(plain: tuple[Path, Path],
                                              in_site: Callable[..., None]) -> None:
    site, art = plain
    in_site(site)
    assert artifacts.load(art)[1] == "planned with this state dir's key"  # untouched: fine
    key = site / ".fleetgate" / "keys" / "artifact.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    secret = key.read_bytes()
    assert len(secret) == 32
    doc = json.loads(art.read_text())
    assert len(doc["mac"]) == 64 and secret.hex() not in art.read_text()
    proc = fleetgate("rollout", "plan", str(site / "plan.yml"), "--out",
                     str(site / "again.json"), "-o", "json", env=env_of(site), cwd=site)
    assert proc.returncode == 0, proc.stderr
    assert secret.hex() not in proc.stdout + proc.stderr
    assert key.read_bytes() == secret  # planned again with the same key


def test_a_key_others_can_read_is_refused(tmp_path: Path,
                                          in_site: Callable[..., None]) -> None:
    site = make_site(tmp_path / "site")
    in_site(site)
    doc = artifacts.build(site / "plan.yml", None)
    key = site / ".fleetgate" / "keys" / "artifact.key"
    key.chmod(0o644)
    path = artifacts.write(doc, site / "a.json")
    with pytest.raises(BadInput) as exc:
        artifacts.load(path)
    assert "readable by others" in exc.value.reason


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_key_that_is_not_a_regular_file_is_refused_without_blocking(
        tmp_path: Path, in_site: Callable[..., None], kind: str) -> None:
    site = make_site(tmp_path / "site")
    in_site(site)
    doc = artifacts.build(site / "plan.yml", None)
    path = artifacts.write(doc, site / "a.json")
    key = site / ".fleetgate" / "keys" / "artifact.key"
    key.unlink()
    if kind == "fifo":
        os.mkfifo(key, 0o600)  # opened without O_NONBLOCK, this read would never return
    else:
        key.mkdir(mode=0o700)
    with pytest.raises(BadInput) as exc:
        artifacts.load(path)
    what = "a FIFO" if kind == "fifo" else "a directory"
    assert exc.value.reason == f"the artifact key is {what}, not a regular file"


def test_a_number_out_of_float_range_is_bad_input_not_an_internal_error(
        plain: tuple[Path, Path], tmp_path: Path) -> None:
    _, path = plain
    text = path.read_text()
    assert '"concurrency": ' in text
    huge = tmp_path / "huge.json"
    huge.write_text(text.replace('"concurrency": ', '"concurrency": 1e999, "x": ', 1))
    with pytest.raises(BadInput) as exc:
        artifacts.load(huge)
    assert "1e999 is out of range for a number" in exc.value.reason


# ------------------------------------------------------------------------------ signatures

class Signed:
    def __init__(self, root: Path):
        self.keys = root / "ssh"
        self.keys.mkdir()
        self.ci = keygen(self.keys / "ci", "ci")
        self.other = keygen(self.keys / "other", "other")
        self.site = make_site(root / "site", SECURITY)
        (self.site / "keys" / "allowed_signers").write_text(
            f'ci@example namespaces="fleetgate-plan,fleetgate-approve" '
            f"{(self.keys / 'ci.pub').read_text()}")
        self.art = plan_artifact(self.site)

    def cli(self, *args: str, state: Path | None = None) -> subprocess.CompletedProcess[str]:
        return fleetgate(*args, env=env_of(self.site, state), cwd=self.site)


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> Signed:
    return Signed(tmp_path_factory.mktemp("signed"))


@pytest.fixture
def clean_sig(signed: Signed) -> Iterator[Path]:
    sig = signing.signature_path(signed.art)
    sig.unlink(missing_ok=True)
    yield sig
    sig.unlink(missing_ok=True)


def test_unsigned_artifact_and_plan_yaml_are_refused_where_signatures_are_required(
        signed: Signed, clean_sig: Path) -> None:
    p = signed.cli("rollout", "start", str(signed.art))
    assert p.returncode == 2 and "unsigned, and this site starts only signed" in p.stderr, (
        p.stderr)
    assert len(p.stderr.strip().splitlines()) == 1
    p = signed.cli("rollout", "start", str(signed.site / "plan.yml"))
    assert p.returncode == 2 and "starts only signed artifacts" in p.stderr, p.stderr
    assert not (signed.site / ".fleetgate" / "rollouts" / "journal.db").exists()


def test_signed_by_the_allowed_key_starts_anywhere_and_the_other_key_is_refused(
        signed: Signed, clean_sig: Path, in_site: Callable[..., None], tmp_path: Path) -> None:
    # Another key: nothing written.
    p = signed.cli("rollout", "sign", str(signed.art), "--key", str(signed.other))
    assert p.returncode == 2 and "not in" in p.stderr and "allowed_signers" in p.stderr
    assert not clean_sig.exists()

    p = signed.cli("rollout", "sign", str(signed.art), "--key", str(signed.ci), "-o", "json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["signer"] == "ci@example" and out["fingerprint"] == fingerprint_of(signed.ci)
    assert clean_sig.read_text().startswith("-----BEGIN SSH SIGNATURE-----")
    # On another controller: its state dir has another key, or none; the signature counts.
    in_site(signed.site, tmp_path / "another-controller")
    doc, trust = artifacts.load(signed.art)
    assert trust == f"signed by ci@example ({fingerprint_of(signed.ci)})"
    assert doc["waves"] == [["h1"], ["h2", "h3", "h4"]]

    # A signature the other key made (with ssh-keygen itself) is refused.
    clean_sig.unlink()
    subprocess.run(["ssh-keygen", "-Y", "sign", "-n", "fleetgate-plan", "-f",
                    str(signed.other), str(signed.art)], check=True, capture_output=True,
                   stdin=subprocess.DEVNULL)
    p = signed.cli("rollout", "start", str(signed.art))
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip().endswith("signed by a key that is not in "
                                     f"{signed.site / 'keys' / 'allowed_signers'}")


def test_a_signed_artifact_edited_afterwards_is_refused(
        signed: Signed, clean_sig: Path, in_site: Callable[..., None]) -> None:
    p = signed.cli("rollout", "sign", str(signed.art), "--key", str(signed.ci))
    assert p.returncode == 0, p.stderr
    in_site(signed.site)
    bad = tampered(signed.art, lambda d: d["limits"].update(total=3), "edited.json")
    shutil.copyfile(clean_sig, signing.signature_path(bad))
    with pytest.raises(BadInput) as exc:
        artifacts.load(bad)
    assert exc.value.field == "signature" and "does not verify" in exc.value.reason
    # Nor does an approval's signature pass for an artifact's (its own namespace).
    sig = signing.sign(bad.read_bytes(), signed.ci, signing.APPROVAL_NAMESPACE)
    signing.signature_path(bad).write_text(sig)
    with pytest.raises(BadInput) as exc:
        artifacts.load(bad)
    assert exc.value.field == "signature"


# ------------------------------------------------------------------------------- approvals

def journal_with_rollout(state: Path) -> Journal:
    j = Journal(state / "rollouts" / "journal.db")
    if j.rollout(RID) is None:
        j.create_rollout(RID, "driver-575", "/srv/inventory.yml", artifact(), WAVES)
    return j


def test_signed_approval_records_the_signer_and_its_fingerprint(signed: Signed) -> None:
    j = journal_with_rollout(signed.site / ".fleetgate")
    approve = ("rollout", "approve", RID, "--wave", "2", "--reason", "CHG-1234 canary clean")
    p = signed.cli(*approve)
    assert p.returncode == 2 and "only signed approvals" in p.stderr, p.stderr
    p = signed.cli(*approve, "--sign-key", str(signed.other))
    assert p.returncode == 2 and "not in" in p.stderr, p.stderr
    assert j.requests(RID, "approve") == []

    p = signed.cli(*approve, "--sign-key", str(signed.ci))
    assert p.returncode == 0, p.stderr
    fp = fingerprint_of(signed.ci)
    [req] = j.requests(RID, "approve")
    assert req["by"] == f"ci@example ({fp})" and req["wave"] == 2
    # The journal keeps what re-verifies it, independently of fleetgate.
    [ev] = [e for e in j.events(RID) if e["kind"] == "approve"]
    proof = ev["data"]["proof"]
    assert proof["fingerprint"] == fp
    message = signing.approval_message(RID, 2, "CHG-1234 canary clean", proof["signed_at"])
    sig = signed.site / "approval.sig"
    sig.write_text(proof["signature"])
    check = subprocess.run(["ssh-keygen", "-Y", "verify", "-f",
                            str(signed.site / "keys" / "allowed_signers"), "-I", "ci@example",
                            "-n", "fleetgate-approve", "-s", str(sig)], input=message,
                           capture_output=True, check=False)
    assert check.returncode == 0, check.stderr
    forged = signing.approval_message(RID, 3, "CHG-1234 canary clean", proof["signed_at"])
    assert subprocess.run(["ssh-keygen", "-Y", "verify", "-f",
                           str(signed.site / "keys" / "allowed_signers"), "-I", "ci@example",
                           "-n", "fleetgate-approve", "-s", str(sig)], input=forged,
                          capture_output=True, check=False).returncode != 0
    # What the controller re-checks before a wave opens (engine._approved): the recorded
    # approval verifies; one written into the journal by hand, or with its reason edited, not.
    signers = signed.site / "keys" / "allowed_signers"
    assert signing.recorded_approval(RID, 2, ev["data"], signers).principal == "ci@example"
    with pytest.raises(BadInput, match="no signature"):
        signing.recorded_approval(RID, 2, {"reason": "CHG-1234 canary clean"}, signers)
    with pytest.raises(BadInput):
        signing.recorded_approval(RID, 2, {**ev["data"], "reason": "edited"}, signers)
    with pytest.raises(BadInput):
        signing.recorded_approval(RID, 3, ev["data"], signers)


def test_unsigned_approval_names_the_account_not_user_and_says_unverified(
        plain: tuple[Path, Path]) -> None:
    site, _ = plain
    j = journal_with_rollout(site / ".fleetgate")
    p = fleetgate("rollout", "approve", RID, "--wave", "2", "--reason", "fine",
                  env={**env_of(site), "USER": "mallory"}, cwd=site)
    assert p.returncode == 0, p.stderr
    by = j.requests(RID, "approve")[-1]["by"]
    assert by == f"{pwd.getpwuid(os.getuid()).pw_name}@{os.uname().nodename} (unverified)"
    # Signing needs an allowed_signers to check against; this site has none.
    p = fleetgate("rollout", "approve", RID, "--wave", "2", "--reason", "fine", "--sign-key",
                  str(site / "plan.yml"), env=env_of(site), cwd=site)
    assert p.returncode == 2 and "allowed_signers" in p.stderr, p.stderr


@pytest.mark.parametrize(("security", "field"), [
    ({"require_signed_artifacts": True}, "security"),
    ({"allowed_signers": "../outside"}, "security.allowed_signers"),
    ({"require_signed_approvals": "yes", "allowed_signers": "k"},
     "security.require_signed_approvals"),
])
def test_bad_security_settings_are_one_line(tmp_path: Path, security: dict[str, Any],
                                            field: str) -> None:
    site = make_site(tmp_path / "site", security)
    with pytest.raises(BadInput) as exc:
        load_site(site)
    assert exc.value.field == field, exc.value.one_line()


def test_allowed_signers_leading_out_of_the_site_is_refused(tmp_path: Path) -> None:
    site = make_site(tmp_path / "site", {"allowed_signers": "keys/link"})
    (site / "keys" / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(BadInput) as exc:
        _ = load_site(site).allowed_signers
    assert exc.value.field == "security.allowed_signers" and "outside the site" in str(exc.value)
