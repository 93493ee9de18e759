"""kernel_pin's read-only module (roles/kernel_pin/library/fleetgate_kernel_state.py): its
dpkg reader against a scripted dpkg-query, and the whole module run by Ansible itself on
this machine. On a lab VM, through kernel-update and rollback: test_kernel_update.py."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.unit.ansible_modules import ansible_module

LIBRARY = REPO / "roles" / "kernel_pin" / "library"
mod = ansible_module("roles/kernel_pin/library/fleetgate_kernel_state.py")
ANSIBLE = Path(os.environ.get("VIRTUAL_ENV", REPO / ".venv")) / "bin" / "ansible"


def test_only_installed_kernel_packages_are_reported(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "dpkg-query"
    # rc 1 as dpkg-query gives when a pattern matches nothing: the rest is still read.
    fake.write_text("#!/bin/sh\n"
                    "printf 'linux-image-6.1.0-55-cloud-amd64\\t6.1.192-1\\tinstalled\\n'\n"
                    "printf 'linux-image-6.1.0-57-cloud-amd64\\t6.1.192-3\\tconfig-files\\n'\n"
                    "printf 'linux-image-cloud-amd64\\t6.1.192-1\\tinstalled\\n'\n"
                    "printf 'garbage line\\n'\n"
                    "exit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert mod.dpkg_installed(list(mod.PATTERNS)) == {
        "linux-image-6.1.0-55-cloud-amd64": "6.1.192-1", "linux-image-cloud-amd64": "6.1.192-1"}


def test_a_link_is_reported_as_its_target_file_name(tmp_path: Path) -> None:
    (tmp_path / "vmlinuz").symlink_to("boot/vmlinuz-6.1.0-55-cloud-amd64")
    (tmp_path / "plain").write_text("")
    assert mod.link_target(str(tmp_path / "vmlinuz")) == "vmlinuz-6.1.0-55-cloud-amd64"
    assert mod.link_target(str(tmp_path / "plain")) is None
    assert mod.link_target(str(tmp_path / "missing")) is None


def _run(*args: str) -> tuple[str, dict[str, object]]:
    """One ad-hoc run on localhost; `-o` prints `localhost | STATUS => {json result}`."""
    env = {**os.environ, "ANSIBLE_LIBRARY": str(LIBRARY),
           "ANSIBLE_MODULE_UTILS": str(REPO / "plugins" / "module_utils")}
    proc = subprocess.run([str(ANSIBLE), "localhost", "-c", "local", "-o", "-m",
                           "fleetgate_kernel_state", "-a", " ".join(args)], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    line = next(x for x in proc.stdout.splitlines() if x.startswith("localhost |"))
    status, _, doc = line.removeprefix("localhost | ").partition(" => ")
    result: dict[str, object] = json.loads(doc)
    return status, result


def test_the_module_run_by_ansible_reads_this_machine(tmp_path: Path) -> None:
    (tmp_path / "grub").mkdir()
    (tmp_path / "grub" / "grub.cfg").write_text("")
    (tmp_path / "vmlinuz-6.1.0-99-test").write_text("")
    status, got = _run("abi=6.1.0-99-test", f"boot_dir={tmp_path}")
    assert status == "SUCCESS", got
    state = got["kernel_state"]
    assert isinstance(state, dict) and got["changed"] is False
    assert state["running"] == os.uname().release
    assert state["grub"] is True
    assert state["boot_files"] == {"vmlinuz": True, "initrd.img": False}
    assert set(state["links"]) == {"/vmlinuz", "/vmlinuz.old", "/initrd.img", "/initrd.img.old"}
    # The same answer dpkg itself gives for the kernel packages of this machine.
    listed = subprocess.run(["dpkg-query", "-W", "-f", "${Package}\t${db:Status-Status}\n",
                             "linux-image-*", "linux-headers-*"], capture_output=True,
                            text=True, check=False).stdout.splitlines()
    assert set(state["packages"]) == {
        line.split("\t")[0] for line in listed if line.endswith("\tinstalled")}


def test_an_abi_that_is_not_one_is_refused_before_any_command() -> None:
    status, got = _run("abi='6.1.0-55;reboot'")
    assert status == "FAILED!" and "not a kernel ABI" in str(got["msg"])
