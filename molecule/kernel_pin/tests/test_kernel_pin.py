"""kernel_pin on a real lab host: exact version installed, pinned, held, default boot."""

from __future__ import annotations

import json

from testinfra.host import Host

from fleetgate.spec.schema import NodeClass


def test_pinned_kernel_installed_at_exact_version(host: Host, node_class: NodeClass) -> None:
    pkg = host.package(f"linux-image-{node_class.kernel.abi}")
    assert pkg.is_installed
    assert pkg.version == node_class.kernel.package_version


def test_pinned_kernel_is_held_and_preferred(host: Host, node_class: NodeClass) -> None:
    abi = node_class.kernel.abi
    status = host.check_output("dpkg-query -W -f='${Status}' linux-image-%s", abi)
    assert status.split()[0] == "hold"
    pref = host.file("/etc/apt/preferences.d/fleetgate-kernel.pref").content_string
    assert f"Pin: version {node_class.kernel.package_version}" in pref
    policy = host.check_output("apt-cache policy linux-image-%s", abi)
    # apt reports the pinned candidate with the priority the preference file gave it.
    assert f"{node_class.kernel.package_version} 1001" in policy, policy


def test_pinned_kernel_is_default_boot(host: Host, node_class: NodeClass) -> None:
    abi = node_class.kernel.abi
    assert host.file("/vmlinuz").linked_to == f"/boot/vmlinuz-{abi}"
    assert host.file("/initrd.img").linked_to == f"/boot/initrd.img-{abi}"
    assert host.file(f"/boot/initrd.img-{abi}").size > 1_000_000


def test_state_recorded_for_rollback(host: Host, node_class: NodeClass) -> None:
    state = json.loads(host.file("/etc/fleetgate/kernel.json").content_string)
    assert state["pinned"] == node_class.kernel.abi


def test_no_other_kernel_abi_installed(host: Host, node_class: NodeClass) -> None:
    abi_number = node_class.kernel.abi.rsplit("-", 2)[0]  # 6.1.0-55-cloud-amd64 -> 6.1.0-55
    images = host.check_output("dpkg-query -W -f='${Package}\\n' 'linux-image-[0-9]*'").split()
    assert images, "no kernel image installed"
    assert all(f"-{abi_number}-" in f"-{p.removeprefix('linux-image-')}" for p in images), images
