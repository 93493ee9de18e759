"""node_manifest in write mode on a real lab host, right after kernel_pin."""

from __future__ import annotations

import json
import re
from typing import Any

from testinfra.host import Host

from fleetgate.spec.schema import NodeClass

MANIFEST = "/etc/fleetgate/manifest.json"


def test_manifest_is_a_root_owned_file(host: Host) -> None:
    f = host.file(MANIFEST)
    assert f.is_file
    assert (f.user, f.group, f.mode) == ("root", "root", 0o644)


def test_manifest_names_the_class(manifest: dict[str, Any], node_class: NodeClass) -> None:
    assert manifest["schema"] == 1
    assert manifest["class"] == node_class.name


def test_expected_is_the_class(manifest: dict[str, Any], node_class: NodeClass) -> None:
    expected = manifest["expected"]
    assert expected["kernel"] == {"abi": node_class.kernel.abi,
                                  "package_version": node_class.kernel.package_version}
    assert expected["driver"]["vendor"] == node_class.driver.vendor
    assert expected["driver"]["packages"] == list(node_class.driver.packages)
    assert expected["dkms"] == [{"name": m.name, "version": m.version} for m in node_class.dkms]
    assert expected["runtime"] == node_class.runtime.model_dump()
    assert expected["accelerator"] == node_class.accelerator.model_dump()


def test_verified_kernel_is_the_pin(host: Host, manifest: dict[str, Any],
                                    node_class: NodeClass) -> None:
    kernel = manifest["verified"]["kernel"]
    assert kernel["abi"] == node_class.kernel.abi
    assert kernel["package_version"] == node_class.kernel.package_version
    assert kernel["package_version"] == host.package(f"linux-image-{node_class.kernel.abi}").version
    assert kernel["default_boot"] == node_class.kernel.abi
    assert host.file("/vmlinuz").linked_to == f"/boot/vmlinuz-{kernel['default_boot']}"
    assert kernel["running"] == host.check_output("uname -r")
    state = json.loads(host.file("/etc/fleetgate/kernel.json").content_string)
    assert kernel["previous"] == state["previous"]


def test_verified_packages_and_dkms(host: Host, manifest: dict[str, Any], node_class: NodeClass,
                                   pinned_packages: dict[str, str | None]) -> None:
    verified = manifest["verified"]
    assert set(verified["packages"]) == set(pinned_packages)
    for pkg, version in verified["packages"].items():
        p = host.package(pkg)
        assert version == (p.version if p.is_installed else None), pkg
    if not host.exists("dkms"):
        assert verified["dkms"] == []
    assert set(verified["modinfo"]) == {m.name for m in node_class.dkms}


def test_no_drift(manifest: dict[str, Any]) -> None:
    # The lab host is a container: its running kernel is the machine's, so it is not checked.
    assert manifest["drift"] == []


def test_package_list_hash_matches_dpkg(host: Host, manifest: dict[str, Any]) -> None:
    digest = manifest["package_list_sha256"]
    assert re.fullmatch(r"[0-9a-f]{64}", digest)
    on_host = host.check_output(
        "dpkg-query -W -f '${Package}=${Version}\\n' | LC_ALL=C sort | sha256sum")
    assert digest == on_host.split()[0]


def test_fingerprint(host: Host, manifest: dict[str, Any], node_class: NodeClass) -> None:
    fp = manifest["fingerprint"]
    assert set(fp) == {"backend", "device_model", "pci_ids", "compute_capability", "driver",
                       "runtime", "kernel", "cpu_model"}
    assert fp["backend"] == node_class.accelerator.backend
    assert fp["kernel"] == host.check_output("uname -r")
    cpu = host.check_output("sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo | head -n1")
    assert fp["cpu_model"] == " ".join(cpu.split())
    if node_class.accelerator.backend == "cpu":
        assert fp["device_model"] == fp["cpu_model"]
    if node_class.runtime.engine == "none":
        assert fp["runtime"] is None


def test_updated_at_is_utc_iso(manifest: dict[str, Any]) -> None:
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", manifest["updated_at"])
