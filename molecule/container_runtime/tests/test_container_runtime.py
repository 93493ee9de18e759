"""container_runtime on a real lab host: the class's engine at its exact version, pinned, held."""

from __future__ import annotations

from testinfra.host import Host

from fleetgate.spec.schema import ENGINE_PACKAGES, NodeClass


def engine_package(nc: NodeClass) -> str:
    return ENGINE_PACKAGES[nc.runtime.engine]


def test_host_runs_a_class_with_an_engine(node_class: NodeClass) -> None:
    # The scenario runs its lab host as this class; without it the rest would test nothing.
    assert node_class.runtime.engine == "containerd"
    assert node_class.runtime.version


def test_engine_installed_at_exact_version(host: Host, node_class: NodeClass) -> None:
    pkg = host.package(engine_package(node_class))
    assert pkg.is_installed
    assert pkg.version == node_class.runtime.version


def test_engine_is_held(host: Host, node_class: NodeClass) -> None:
    status = host.check_output("dpkg-query -W -f='${Status}' %s", engine_package(node_class))
    assert status.split()[0] == "hold", status


def test_engine_is_preferred(host: Host, node_class: NodeClass) -> None:
    pref = host.file("/etc/apt/preferences.d/fleetgate-container-runtime.pref").content_string
    assert f"Package: {engine_package(node_class)}\n" in pref
    assert f"Pin: version {node_class.runtime.version}" in pref
    policy = host.check_output("apt-cache policy %s", engine_package(node_class))
    # The class pins an older security update than the archive's candidate: the pin wins.
    assert f"Candidate: {node_class.runtime.version}" in policy, policy
    assert f"{node_class.runtime.version} 1001" in policy, policy


def test_toolkit_left_alone_when_switched_off(host: Host) -> None:
    # converge.yml turns the unreachable toolkit off: no vendor source, no CDI unit.
    assert not host.file(
        "/etc/apt/sources.list.d/fleetgate-nvidia-container-toolkit.sources").exists
    assert not host.file("/etc/systemd/system/fleetgate-nvidia-cdi.service").exists
