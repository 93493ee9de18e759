"""Fleet drift on recorded manifests: the lab-cpu manifest node_manifest wrote on a lab host
after apply-class, changed field by field the way a hand edit changes a live host."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from fleetgate.spec.loader import resolve_class
from fleetgate.triage.drift import (
    HostState,
    class_hardware,
    host_drift,
    mixed_drift,
)
from fleetgate.triage.evidence import load_collection
from fleetgate.triage.fleetstate import pinned_packages
from fleetgate.triage.identity import Device, devices

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "fixtures"
MANIFEST: dict[str, Any] = json.loads((FIX / "triage" / "lab-cpu-manifest.json").read_text())
LAB_CPU = resolve_class("lab-cpu")[1]
H200 = resolve_class("nvidia-h200-580")[1]


def state(live: dict[str, Any] | None = None, recorded: dict[str, Any] | None = None,
          **kw: Any) -> HostState:
    live = copy.deepcopy(MANIFEST) if live is None else live
    recorded = copy.deepcopy(MANIFEST) if recorded is None else recorded
    return HostState(host=kw.pop("host", "lab-c01"), class_name=kw.pop("class_name", "lab-cpu"),
                     outcome=kw.pop("outcome", "ok"), live=live, recorded=recorded, **kw)


def kinds(d: Any) -> list[str]:
    return [x.kind for x in d.drift]


def test_a_host_that_matches_its_manifest_and_class_is_clean() -> None:
    d = host_drift(state(), LAB_CPU)
    assert (d.status, d.drift) == ("clean", [])


def test_running_kernel_of_a_container_is_not_drift() -> None:
    live = copy.deepcopy(MANIFEST)
    live["verified"]["kernel"]["running"] = "6.19.0-other"
    live["fingerprint"]["kernel"] = "6.19.0-other"
    assert host_drift(state(live=live), LAB_CPU).status == "clean"


def test_no_manifest_is_drift() -> None:
    s = state()
    s.recorded = None
    d = host_drift(s, LAB_CPU)
    assert d.status == "drift" and kinds(d) == ["no-manifest"]
    assert "never built from an image or applied" in d.reason


def test_unreadable_manifest_is_drift() -> None:
    s = state(recorded_error="not JSON (JSONDecodeError)")
    s.recorded = None
    assert kinds(host_drift(s, LAB_CPU)) == ["no-manifest"]


def test_class_drift_from_node_manifest_verify() -> None:
    live = copy.deepcopy(MANIFEST)
    live["verified"]["kernel"]["default_boot"] = "6.1.0-57-cloud-amd64"
    live["drift"] = [{"field": "verified.kernel.default_boot",
                      "expected": "6.1.0-55-cloud-amd64", "actual": "6.1.0-57-cloud-amd64"}]
    d = host_drift(state(live=live), LAB_CPU)
    assert kinds(d) == ["version", "version"]
    assert d.drift[0].message == ("verified.kernel.default_boot: class pins "
                                  "'6.1.0-55-cloud-amd64', host has '6.1.0-57-cloud-amd64'")
    assert d.drift[1].field == "verified.kernel.default_boot"  # and against the manifest


def test_pinned_package_version_changed_since_the_manifest() -> None:
    recorded = copy.deepcopy(MANIFEST)
    recorded["verified"]["packages"] = {"containerd": "1.7.28-1"}
    live = copy.deepcopy(recorded)
    live["verified"]["packages"] = {"containerd": "1.7.29-1"}
    live["package_list_sha256"] = "0" * 64
    d = host_drift(state(live=live, recorded=recorded), LAB_CPU)
    assert kinds(d) == ["version", "package-list"]
    assert (d.drift[0].field, d.drift[0].expected, d.drift[0].actual) == (
        "verified.packages.containerd", "1.7.28-1", "1.7.29-1")


def test_file_of_a_pinned_package_edited_by_hand() -> None:
    d = host_drift(state(dpkg_verify="??5??????   /boot/config-6.1.0-55-cloud-amd64\n"),
                   LAB_CPU)
    assert kinds(d) == ["modified-package"]
    assert d.reason == ("/boot/config-6.1.0-55-cloud-amd64 of a pinned package is changed by "
                        "hand (dpkg --verify)")


def test_manifest_of_another_class_and_recorded_drift() -> None:
    recorded = copy.deepcopy(MANIFEST)
    recorded["class"] = "lab-vm"
    recorded["drift"] = [{"field": "verified.kernel.package_version", "expected": "x",
                          "actual": None}]
    d = host_drift(state(recorded=recorded), LAB_CPU)
    assert kinds(d)[:2] == ["manifest-class", "manifest-drift"]


def test_manifest_of_an_older_class_version() -> None:
    recorded = copy.deepcopy(MANIFEST)
    recorded["class_version"] = LAB_CPU.version + 1
    d = host_drift(state(recorded=recorded), LAB_CPU)
    assert [(x.kind, x.field) for x in d.drift] == [("manifest-class", "class_version")]
    recorded["class_version"] = LAB_CPU.version
    assert host_drift(state(recorded=recorded), LAB_CPU).status == "clean"


def test_host_without_class() -> None:
    d = host_drift(state(class_name=None, live=None), None)
    assert kinds(d) == ["no-class"]


def test_unreachable_host_is_inconclusive_not_clean() -> None:
    s = HostState("lab-c02", "lab-cpu", "unreachable", "ssh: connect to host port 1")
    d = host_drift(s, LAB_CPU)
    assert d.status == "inconclusive" and "unreachable" in d.reason


def h200(vbios: str = "96.00.AF.00.01", pci: str = "10de:2335", cc: str = "9.0") -> Device:
    return Device("NVIDIA H200", pci, cc, vbios, "580.95.05")


def test_gpu_hardware_against_the_class() -> None:
    gpus = [h200()] * 7 + [h200(pci="10de:2330")]
    d = host_drift(state(devices=gpus), H200)
    hw = [x for x in d.drift if x.kind == "hardware"]
    assert [x.field for x in hw] == ["accelerator.pci_ids"]
    assert hw[0].actual == "10de:2330"
    assert [x.field for x in host_drift(state(devices=[h200()] * 6), H200).drift
            if x.kind == "hardware"] == ["accelerator.count"]


def test_mixed_vbios_inside_a_class_is_flagged_same_hardware_is_not() -> None:
    same = [state(host=f"gpu{i}", class_name="nvidia-h200-580", devices=[h200()] * 8)
            for i in range(3)]
    (hw,) = class_hardware(same)
    assert hw.hosts == ["gpu0", "gpu1", "gpu2"] and not hw.mixed and mixed_drift(hw) == []
    odd = state(host="gpu3", class_name="nvidia-h200-580",
                devices=[h200()] * 7 + [h200(vbios="96.00.B0.00.02")])
    (hw,) = class_hardware([*same, odd])
    assert hw.mixed
    (d,) = mixed_drift(hw)
    assert d.kind == "mixed-hardware" and "96.00.B0.00.02 on gpu3" in d.message


def test_identity_from_nvidia_smi_query_and_amd_smi() -> None:
    def collection(**cmds: str) -> Any:
        return load_collection(json.dumps({
            "schema": "fleetgate.triage.collect/v1", "mode": "identity", "duration_s": 1,
            "timeout_s": 10, "facts": {}, "env": {}, "files": {},
            "commands": {k: {"argv": ["x"], "status": "ok", "rc": 0, "stdout": v}
                         for k, v in cmds.items()}}))

    nv = devices("nvidia", collection(nvidia_smi_query=(
        FIX / "synthetic" / "nvidia-smi-query-gpu.csv").read_text()), None)
    assert nv == [Device("NVIDIA H200", "10de:2335", None, "96.00.AF.00.01", "580.95.05")] * 2
    amd = devices("amd", collection(amd_smi_static=(
        FIX / "synthetic" / "amd-smi-static-list.json").read_text()), None)
    assert {d.hardware() for d in amd} == {
        ("AMD Instinct MI300X", "1002:74a1", "gfx942", "022.040.003.041.000001")}
    cpu = devices("cpu", None, MANIFEST["fingerprint"])
    assert cpu == [Device("AMD EPYC", None, None, None, None)]
    assert devices("nvidia", None, None) == []


def test_pinned_packages_of_a_class() -> None:
    assert pinned_packages(LAB_CPU) == ["linux-image-6.1.0-55-cloud-amd64"]
    assert pinned_packages(H200) == sorted([
        "linux-image-6.1.0-55-amd64", "linux-headers-6.1.0-55-amd64", "nvidia-open",
        "nvidia-driver-cuda", "nvidia-kernel-open-dkms", "containerd",
        "nvidia-container-toolkit"])
