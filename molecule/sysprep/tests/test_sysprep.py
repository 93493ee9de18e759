"""sysprep on a real lab host: pins kept from unattended-upgrades, the host generalised."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from testinfra.host import Host

from fleetgate.spec.schema import ENGINE_PACKAGES, NodeClass

APT_CONF = "/etc/apt/apt.conf.d/51fleetgate-unattended-upgrades"
UNIT = "/etc/systemd/system/fleetgate-ssh-host-keys.service"


def class_pins(nc: NodeClass) -> list[str]:
    """Every package the class pins, named independently of the role."""
    pins = [f"linux-image-{nc.kernel.abi}", f"linux-headers-{nc.kernel.abi}"]
    pins += list(nc.driver.packages) + [m.package for m in nc.dkms]
    if nc.runtime.engine != "none":
        pins.append(ENGINE_PACKAGES[nc.runtime.engine])
    if nc.runtime.gpu_toolkit != "none":
        pins.append(nc.runtime.gpu_toolkit)
    return pins


def blacklist(host: Host) -> list[str]:
    """Package-Blacklist as apt (and so unattended-upgrades) reads it from all its files."""
    dump = host.check_output("apt-config dump Unattended-Upgrade::Package-Blacklist")
    return re.findall(r'^Unattended-Upgrade::Package-Blacklist:: "(.*)";$', dump, re.M)


def blacklisted(patterns: list[str], package: str) -> bool:
    # unattended-upgrades matches each entry with re.match against the package name.
    return any(re.match(p, package) for p in patterns)


def test_blacklist_file(host: Host) -> None:
    f = host.file(APT_CONF)
    assert (f.user, f.group, f.mode) == ("root", "root", 0o644)


def test_every_pin_is_blacklisted(host: Host, node_class: NodeClass) -> None:
    patterns = blacklist(host)
    assert patterns
    for package in class_pins(node_class):
        assert blacklisted(patterns, package), package


def test_blacklist_is_escaped_and_anchored(host: Host, node_class: NodeClass) -> None:
    patterns = blacklist(host)
    for package in class_pins(node_class):
        # '.' and '+' are literal, and no longer name slips through.
        for near_miss in {package.replace(".", "X"), package.replace("+", "X"),
                          package + "-extra", "x" + package} - {package}:
            assert not blacklisted(patterns, near_miss), near_miss
    # The packages a host may upgrade freely stay off the list.
    for package in ("openssh-server", "python3", "linux-base", "libc6"):
        assert not blacklisted(patterns, package), package


def test_machine_ids_are_cleared(host: Host) -> None:
    machine_id = host.file("/etc/machine-id")
    assert machine_id.is_file and machine_id.size == 0
    assert not host.file("/var/lib/dbus/machine-id").exists


def test_ssh_host_keys_kept_when_asked(host: Host) -> None:
    # The scenario converges with sysprep_remove_ssh_host_keys: false (see converge.yml).
    assert host.file("/etc/ssh/ssh_host_ed25519_key").exists


def test_first_boot_unit_installed_and_enabled(host: Host) -> None:
    unit = host.file(UNIT)
    assert (unit.user, unit.mode) == ("root", 0o644)
    text = unit.content_string
    assert re.search(r"^ExecStart=/usr/bin/ssh-keygen -A$", text, re.M)
    assert re.search(r"^Before=.*\bssh\.service\b", text, re.M)
    assert re.search(r"^WantedBy=multi-user\.target$", text, re.M)
    link = host.file("/etc/systemd/system/multi-user.target.wants/fleetgate-ssh-host-keys.service")
    assert link.is_symlink and link.linked_to == UNIT


def test_first_boot_command_makes_host_keys(host: Host) -> None:
    exec_start = re.search(r"^ExecStart=(.*)$", host.file(UNIT).content_string, re.M)
    assert exec_start
    root = host.check_output("mktemp -d")
    try:
        host.check_output("mkdir -p %s/etc/ssh", root)
        host.check_output(f"{exec_start.group(1)} -f %s", root)
        made = host.check_output("ls %s/etc/ssh", root).split()
        assert {"ssh_host_rsa_key", "ssh_host_ecdsa_key", "ssh_host_ed25519_key"} <= set(made)
    finally:
        host.run("rm -rf %s", root)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_first_boot_unit_is_valid_systemd(host: Host, tmp_path: Path) -> None:
    unit = tmp_path / "fleetgate-ssh-host-keys.service"
    unit.write_text(host.file(UNIT).content_string)
    proc = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)],
                          capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "fleetgate-ssh-host-keys.service" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("path", [
    "/var/log/fleetgate-sysprep.log", "/var/log/fleetgate-app/app.log",
    "/var/log/wtmp", "/var/log/btmp", "/var/log/lastlog",
])
def test_logs_emptied_in_place(host: Host, path: str) -> None:
    f = host.file(path)
    assert f.is_file and f.size == 0
    assert f.mode == 0o640  # emptied, not replaced by a file of another mode


def test_no_log_left_with_content(host: Host) -> None:
    left = host.check_output(
        r"find /var/log -type f \( -name '*.log' -o -name wtmp -o -name btmp"
        r" -o -name lastlog \) -size +0c")
    assert left == ""


@pytest.mark.parametrize("path", [
    "/var/log/fleetgate-sysprep.log.1", "/var/log/fleetgate-app/app.log.2.gz",
    "/var/cache/apt/archives/fleetgate-sysprep_1.0_all.deb",
    "/var/cache/apt/archives/partial/fleetgate-partial_1.0_all.deb",
])
def test_rotated_logs_and_cached_debs_removed(host: Host, path: str) -> None:
    assert not host.file(path).exists


def test_nothing_else_removed(host: Host) -> None:
    assert host.file("/var/log/fleetgate-app/keep.txt").size > 0
    assert host.file("/var/cache/apt/archives").is_directory
    assert host.check_output(r"find /var/log /var/cache/apt/archives -type f \( -name '*.gz'"
                             r" -o -name '*.[0-9]' -o -name '*.deb' \)") == ""
