"""Kernel security update on a real lab VM, end to end (playbooks through fleetgate's runner).

One VM of class lab-vm, started from the session's lab-vm golden image (built by Packer with
the same roles apply-class runs; tests/integration/conftest.py), boots the pinned 6.1.0-55
kernel under qemu. In order:
- it booted the image's own kernel, and the image brought the class's DKMS module (vpoll)
  built for the pin, with the manifest the build recorded;
- a target given both ways (from the class and as extra vars) is refused before any change;
- kernel-update reboots into 57 with vpoll rebuilt and loaded, taking its target from lab-vm
  version 2 as the example rollout does;
- rollback.yml brings it back to 55 and class version 1 (57 stays installed, not default);
- a third-party DKMS module that builds for 55 but not for 57 then makes kernel-update refuse
  to reboot: fleetgate's own pre-reboot gate fails, 57 is removed again, the host keeps 55 as
  its default boot with its apt pin and holds untouched, and the reason names the module.
Every kernel the host is said to run is proven by `uname -r` after a real reboot; the refused
update is proven by the boot links the next boot would follow, and by the absence of a boot.
The broken module comes last so that its kernel-update finds 57 already unpacked: under TCG
an install of a kernel with its headers costs minutes, and the gate under test is the same
whether the package came now or earlier. (When Debian's own DKMS hook fails a fresh install
instead, the same rescue block runs; that path is not exercised here.)
"""

from __future__ import annotations

import json
import subprocess
import tarfile
from collections.abc import Iterator
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetgate.image.manifest import manifest_digest, node_part
from fleetgate.image.naming import image_name
from fleetgate.image.store import image_id
from fleetgate.lab.fleet import wait_for_ssh
from fleetgate.lab.keys import ssh_argv
from fleetgate.lab.paths import LabPaths
from fleetgate.lab.state import load_state
from fleetgate.spec.loader import load_class
from tests.conftest import REPO, fleetgate
from tests.integration.conftest import GoldenImages, LabFactory

pytestmark = [pytest.mark.lab, pytest.mark.slow]

PIN = load_class(REPO / "inventory" / "classes" / "lab-vm.yml")
# The change: lab-vm version 2 of examples/kernel-update, the one place the new kernel is pinned.
NEW_CLASS_DIR = REPO / "examples" / "kernel-update" / "classes"
NEW_CLASS = load_class(NEW_CLASS_DIR / "lab-vm.yml")
NEW = NEW_CLASS.kernel.abi
OLD = PIN.kernel.abi
MODULE = PIN.dkms[0].name
BROKEN = REPO / "tests" / "fixtures" / "dkms" / "fgbroken-1.0"


class Vm:
    def __init__(self, root: Path):
        self.paths = LabPaths(root)
        self.env = {"FLEETGATE_LAB_DIR": str(root), "FLEETGATE_STATE_DIR": str(root.parent)}

    @property
    def host(self) -> Any:
        state = load_state(self.paths.state)
        assert state is not None
        return state.hosts[0]

    def ssh(self, command: str, *, stdin: bytes | None = None, check: bool = True) -> str:
        proc = subprocess.run(ssh_argv(self.paths, self.host, command), input=stdin or b"",
                              capture_output=True, timeout=600, check=False)
        if check and proc.returncode != 0:
            pytest.fail(f"{command!r} -> {proc.returncode}: {proc.stderr.decode()}")
        return proc.stdout.decode().strip()

    def play(self, playbook: str, *extra: str,
             classes: Path | None = None) -> tuple[int, dict[str, Any]]:
        args = ["fleet", "play", playbook, "-i", str(self.paths.inventory), "--json"]
        for kv in extra:
            args += ["-e", kv]
        env = {**self.env, "FLEETGATE_CLASSES_DIR": str(classes)} if classes else self.env
        proc = fleetgate(*args, env=env, timeout=1800)
        return proc.returncode, json.loads(proc.stdout)["hosts"][self.host.name]

    def boots(self) -> list[dict[str, Any]]:
        log = self.paths.host_dir(self.host.name) / "boots.jsonl"
        return [e for e in map(json.loads, log.read_text().splitlines()) if e["event"] == "boot"]

    def reboot(self) -> None:
        before = len(self.boots())
        self.ssh("systemctl reboot", check=False)
        wait_for_ssh(self.paths, self.host, 600)
        assert len(self.boots()) == before + 1


@pytest.fixture(scope="module")
def vm(golden: GoldenImages, lab_up: LabFactory) -> Iterator[Vm]:
    # Starting from the image, not applying the class under TCG, saves minutes; what
    # apply-class does is proven by the image build (test_image.py) and Molecule.
    with lab_up("kupdate", vms=1, images=(golden.build("lab-vm"),), golden=golden,
                handle=Vm) as vm:
        assert vm.ssh("uname -r") == OLD
        yield vm


def _update(vm: Vm, *extra: str) -> tuple[int, dict[str, Any]]:
    """kernel-update as the example rollout runs it: the target taken from the new class."""
    return vm.play("kernel-update", "kernel_update_from_class=true", *extra,
                   classes=NEW_CLASS_DIR)


def test_golden_image_host_boots_its_kernel_and_loads_the_class_dkms_module(
        vm: Vm, golden: GoldenImages) -> None:
    """The lab-vm image's own host (test_image.py asserts on the same build): the VM booted
    the kernel its /boot holds, through the supervisor, with the class's module built for it
    and the manifest the image recorded."""
    name = image_name(PIN.name, PIN.version)
    assert vm.host.node_class == PIN.name and vm.host.image.startswith(f"{name}@")
    assert vm.boots()[0]["kernel"] == f"vmlinuz-{OLD}"
    assert f"{MODULE}/{PIN.dkms[0].version}, {OLD}, x86_64: installed" in vm.ssh("dkms status")
    vm.ssh(f"modprobe {MODULE}")
    assert MODULE in vm.ssh("lsmod").split()
    built = golden.manifests[name]
    assert vm.ssh(f"modinfo -F version {MODULE}") == built["verified"]["modinfo"][MODULE]
    manifest = json.loads(vm.ssh("cat /etc/fleetgate/manifest.json"))
    assert manifest == node_part(built) == json.loads(
        (golden.root / name / "image-manifest.json").read_text())
    assert manifest["class_version"] == PIN.version and manifest["drift"] == []
    # First boot made the machine its own: a new machine-id, the lab's host key in use.
    assert len(vm.ssh("cat /etc/machine-id")) == 32
    # The lab disk masks housekeeping that would race the updates below for CPU and the dpkg
    # lock, and lets dpkg skip its per-file syncs (lab/vm_hosts.py); the image is unchanged.
    assert vm.ssh("systemctl is-enabled apt-daily.timer e2scrub_reap.service || true").split(
        ) == ["masked", "masked"]
    assert "force-unsafe-io" in vm.ssh("cat /etc/dpkg/dpkg.cfg.d/fleetgate-lab").split()


def _pinned(vm: Vm) -> tuple[str, str]:
    """The packages and the version kernel_pin's apt preference allows."""
    pref = dict(line.split(": ", 1) for line in vm.ssh(
        "cat /etc/apt/preferences.d/fleetgate-kernel.pref").splitlines()
        if ": " in line and not line.startswith("#"))
    return pref["Package"], pref["Pin"].removeprefix("version ")


def test_kernel_update_refuses_a_target_given_twice(vm: Vm) -> None:
    rc, result = _update(vm, f"target_kernel_abi={NEW}",
                         f"target_kernel_package_version={NEW_CLASS.kernel.package_version}")
    assert rc == 1 and "either kernel_update_from_class or target_kernel_abi" in (
        result["message"]), result
    assert vm.ssh(f"dpkg-query -W -f='${{Status}}' linux-image-{NEW} || true") in (
        "", "unknown ok not-installed", "deinstall ok config-files")


def test_kernel_update_reboots_into_the_new_kernel(vm: Vm) -> None:
    assert NEW_CLASS.version > PIN.version and NEW != OLD
    rc, result = _update(vm)
    assert rc == 0, result
    assert vm.ssh("uname -r") == NEW
    assert vm.boots()[-1]["kernel"] == f"vmlinuz-{NEW}"
    assert f"{MODULE}/{PIN.dkms[0].version}, {NEW}, x86_64: installed" in vm.ssh("dkms status")
    assert MODULE in vm.ssh("lsmod").split()
    manifest = json.loads(vm.ssh("cat /etc/fleetgate/manifest.json"))
    assert manifest["verified"]["kernel"]["running"] == NEW
    assert manifest["expected"]["kernel"]["abi"] == NEW
    assert manifest["class_version"] == NEW_CLASS.version
    assert json.loads(vm.ssh("cat /etc/fleetgate/kernel.json"))["previous"] == OLD
    # Pinned and held only once DKMS had built for it (kernel_pin's `pin` entry point).
    assert _pinned(vm) == (f"linux-image-{NEW} linux-headers-{NEW}",
                           NEW_CLASS.kernel.package_version)
    assert {f"linux-image-{NEW}", f"linux-headers-{NEW}"} <= set(
        vm.ssh("apt-mark showhold").split())
    # Lab disks carry MODULES=dep (lab/vm_hosts.py), so the initramfs the update built holds
    # this VM's root-device modules, not Debian's "most" set of hundreds, and it booted.
    listed = vm.ssh(f"lsinitramfs /boot/initrd.img-{NEW}").split()
    modules = [p for p in listed if p.endswith(".ko")]
    assert any(p.endswith("/virtio_blk.ko") for p in modules), modules
    assert len(modules) < 40, len(modules)


def test_rollback_returns_to_the_previous_kernel(vm: Vm) -> None:
    rc, result = vm.play("rollback")
    assert rc == 0, result
    assert vm.ssh("uname -r") == OLD
    assert vm.boots()[-1]["kernel"] == f"vmlinuz-{OLD}"
    manifest = json.loads(vm.ssh("cat /etc/fleetgate/manifest.json"))
    assert manifest["verified"]["kernel"]["running"] == OLD
    assert manifest["class_version"] == PIN.version


def test_broken_dkms_module_blocks_the_reboot(vm: Vm) -> None:
    buf = BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(BROKEN, arcname=BROKEN.name)
    vm.ssh("tar -C /usr/src -xf -", stdin=buf.getvalue())
    vm.ssh(f"dkms add -m fgbroken -v 1.0 && dkms install -m fgbroken -v 1.0 -k {OLD}")
    boots_before = len(vm.boots())
    pinned_before = _pinned(vm)
    held_before = vm.ssh("apt-mark showhold")

    rc, result = _update(vm)

    assert rc == 1
    assert result["outcome"] == "failed"
    assert "pre-reboot gate failed" in result["message"]
    assert "fgbroken/1.0 failed to build for kernel " + NEW in result["message"]
    failure = json.loads(vm.ssh("cat /etc/fleetgate/last-failure.json"))
    assert failure["kept"] == OLD and "fgbroken" in failure["reason"]
    assert len(vm.boots()) == boots_before, "the host must not have rebooted"
    # The lab VM boots whatever /vmlinuz names (lab/vm_supervisor.py reads the link from the
    # disk before each boot), and the rollback test above proved a real boot through that
    # link; so the old kernel stays the default boot. A further reboot here would cost two
    # minutes of the suite's slowest lane and prove nothing new.
    assert vm.ssh("readlink /vmlinuz") == f"boot/vmlinuz-{OLD}"
    assert vm.ssh("uname -r") == OLD
    assert vm.ssh(f"dpkg-query -W -f='${{Status}}' linux-image-{NEW} || true") in (
        "", "unknown ok not-installed", "deinstall ok config-files")
    # The new kernel was staged unpinned, so the old kernel's pin and holds were never touched.
    assert pinned_before == _pinned(vm) == (f"linux-image-{OLD} linux-headers-{OLD}",
                                            PIN.kernel.package_version)
    # (57, still installed and held after the rollback above, went with its purge.)
    new_pkgs = {f"linux-image-{NEW}", f"linux-headers-{NEW}"}
    assert set(vm.ssh("apt-mark showhold").split()) == set(held_before.split()) - new_pkgs
    assert {f"linux-image-{OLD}", f"linux-headers-{OLD}"} <= set(held_before.split())


def test_the_vm_is_re_imaged_to_a_new_image_and_boots_its_kernel(vm: Vm,
                                                                  golden: GoldenImages) -> None:
    """An image rollout on the VM (issue 16's VM path): lab-vm version 2, Packer's image of
    examples/kernel-update's class with the new kernel pinned, replaces the VM's disk (the lab
    provider makes a new one from the image's rootfs) and the VM boots it. Last in this file:
    the new disk discards whatever the tests above left on the host."""
    ref = golden.build("lab-vm", classes=NEW_CLASS_DIR)
    name = image_name(NEW_CLASS.name, NEW_CLASS.version)
    want_id = image_id(name, golden.manifests[name]["image"]["artifact_sha256"])
    plan = vm.paths.root.parent / "vm-reimage.plan.yml"
    plan.write_text(yaml.safe_dump({
        "name": "vm-reimage",
        "targets": {"inventory": str(vm.paths.inventory), "class": "lab-vm"},
        "change": {"image": ref}, "on_failure": "halt",
        "waves": {"steps": ["100%"], "diversity": []},
        "budgets": {"per_wave": {"max_failed": 0}, "total": {"max_failed": 0}},
        "gates": {"checks": ["discovery"]}}, sort_keys=False))
    boots_before = len(vm.boots())
    proc = fleetgate("rollout", "start", str(plan), "--id", "vm-reimage-1", "--json",
                     env=vm.env, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    s = json.loads(proc.stdout)
    assert s["hosts"][vm.host.name]["state"] == "healthy", s["hosts"][vm.host.name]
    # It boots the image's kernel, reached through the lab's unchanged known_hosts.
    assert vm.ssh("uname -r") == NEW
    assert vm.boots()[-1]["kernel"] == f"vmlinuz-{NEW}" and len(vm.boots()) > boots_before
    assert vm.ssh("cat /etc/fleetgate/image-id") == want_id
    manifest = json.loads(vm.ssh("cat /etc/fleetgate/manifest.json"))
    assert manifest_digest(manifest) == manifest_digest(node_part(golden.manifests[name]))
    assert manifest["class_version"] == NEW_CLASS.version
    assert vm.ssh("test -e /usr/src/fgbroken-1.0 && echo left || echo gone") == "gone"
    log = vm.paths.host_dir(vm.host.name) / "reimages.jsonl"
    made = [json.loads(x) for x in log.read_text().splitlines()]
    assert [m["image_id"] for m in made][-1:] == [want_id] and len(made) == 1
