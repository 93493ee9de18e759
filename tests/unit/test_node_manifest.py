"""node_manifest's module (fleetgate_manifest) without a host: its drift logic, its
DOCUMENTATION against its argument_spec, and its fingerprint read through the one identity
function that `fleet drift` uses too. Molecule (molecule/node_manifest) runs it on a real host."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from fleetgate.smoke import parsers
from fleetgate.triage import identity
from fleetgate.triage.evidence import load_collection
from tests.unit.ansible_modules import ansible_module

m = ansible_module("roles/node_manifest/library/fleetgate_manifest.py")

ABI = "6.1.0-55-cloud-amd64"
PINS = {"nvidia-driver": "535.261.03-1", "containerd": "1.6.20~ds1-1+b1"}


def expected(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "kernel": {"abi": ABI, "package_version": "6.1.192-1"},
        "dkms": [{"name": "vpoll", "version": "0.1"}],
        "userland": {"blas": None},
    }
    doc.update(over)
    return doc


def verified(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "kernel": {"abi": ABI, "package_version": "6.1.192-1", "default_boot": ABI,
                   "running": ABI, "previous": None},
        "packages": dict(PINS),
        "dkms": [{"name": "vpoll", "version": "0.1", "kernel": ABI, "arch": "x86_64",
                  "status": "installed"}],
        "userland": {"blas": "openblas"},
    }
    doc.update(over)
    return doc


def drift(exp: dict[str, Any], ver: dict[str, Any], *, check_running: bool = True,
          pins: dict[str, str | None] | None = None) -> dict[str, tuple[Any, Any]]:
    got = m.compute_drift(exp, ver, PINS if pins is None else pins, check_running)
    assert len({d["field"] for d in got}) == len(got), got  # one entry per field
    return {d["field"]: (d["expected"], d["actual"]) for d in got}


def test_host_matching_its_class_has_no_drift() -> None:
    assert drift(expected(), verified()) == {}


def test_kernel_fields_drift_and_running_only_when_checked() -> None:
    ver = verified()
    ver["kernel"].update(package_version="6.1.190-1", default_boot="6.1.0-54-cloud-amd64",
                         running="6.1.0-54-cloud-amd64")
    assert drift(expected(), ver) == {
        "verified.kernel.package_version": ("6.1.192-1", "6.1.190-1"),
        "verified.kernel.default_boot": (ABI, "6.1.0-54-cloud-amd64"),
        "verified.kernel.running": (ABI, "6.1.0-54-cloud-amd64"),
    }
    assert "verified.kernel.running" not in drift(expected(), ver, check_running=False)


def test_package_pins_missing_or_at_another_version() -> None:
    ver = verified(packages={"nvidia-driver": "535.247.01-1", "containerd": None})
    assert drift(expected(), ver) == {
        "verified.packages.nvidia-driver": ("535.261.03-1", "535.247.01-1"),
        "verified.packages.containerd": ("1.6.20~ds1-1+b1", None),
    }


@pytest.mark.parametrize(("entries", "actual"), [
    ([], None),
    # built for another kernel only: nothing for the pinned one
    ([{"name": "vpoll", "version": "0.1", "kernel": "6.1.0-54-cloud-amd64", "arch": "x86_64",
       "status": "installed"}], None),
    ([{"name": "vpoll", "version": "0.1", "kernel": ABI, "arch": "x86_64", "status": "built"}],
     {"name": "vpoll", "version": "0.1", "kernel": ABI, "status": "built"}),
    ([{"name": "vpoll", "version": "0.0.9", "kernel": ABI, "arch": "x86_64",
       "status": "installed"}],
     {"name": "vpoll", "version": "0.0.9", "kernel": ABI, "status": "installed"}),
])
def test_dkms_module_not_installed_for_the_pinned_kernel(entries: list[dict[str, Any]],
                                                         actual: Any) -> None:
    want = {"name": "vpoll", "version": "0.1", "kernel": ABI, "status": "installed"}
    assert drift(expected(), verified(dkms=entries)) == {"verified.dkms.vpoll": (want, actual)}


def test_dkms_installed_beside_another_version_is_clean() -> None:
    ver = verified()
    ver["dkms"].insert(0, {"name": "vpoll", "version": "0.0.9", "kernel": ABI, "arch": "x86_64",
                           "status": "built"})
    assert drift(expected(), ver) == {}


def test_blas_is_checked_only_when_the_class_pins_one() -> None:
    ver = verified(userland={"blas": "reference"})
    assert drift(expected(), ver) == {}
    assert drift(expected(userland={"blas": "openblas"}), ver) == {
        "verified.userland.blas": ("openblas", "reference")}


def test_runtime_pins_name_the_engine_package() -> None:
    runtime = {"engine": "docker", "version": "20.10.24", "gpu_toolkit":
               "nvidia-container-toolkit", "gpu_toolkit_version": "1.17.8-1"}
    assert m.runtime_packages(runtime, {"docker": "docker.io"}) == {
        "docker.io": "20.10.24", "nvidia-container-toolkit": "1.17.8-1"}
    assert m.runtime_packages({"engine": "none", "gpu_toolkit": "none"}, {}) == {}


def test_summary_and_unchanged_content_ignore_only_updated_at() -> None:
    d = m.compute_drift(expected(), verified(packages={**PINS, "containerd": None}), PINS, True)
    assert m.summarize(d) == ('verified.packages.containerd (expected "1.6.20~ds1-1+b1", '
                              "actual null)")
    # the file on the host (as JSON gives it back) against the manifest just built
    on_host = {"schema": 1, "drift": d, "pci_ids": ["10de:2335"], "updated_at": "then"}
    built = {**copy.deepcopy(on_host), "pci_ids": ("10de:2335",), "updated_at": None}
    assert m.same_content(on_host, built)
    assert not m.same_content(on_host, {**built, "drift": []})
    assert not m.same_content(None, built)


# ------------------------------------------------------------------ DOCUMENTATION

def _spec_from_doc(options: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out = {}
    for name, o in options.items():
        entry = {k: o[k] for k in ("type", "required", "default", "choices", "elements")
                 if k in o}
        if "suboptions" in o:
            entry["options"] = _spec_from_doc(o["suboptions"])
        out[name] = entry
    return out


def _normal(spec: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for name, o in spec.items():
        entry = {k: v for k, v in o.items() if k != "options" and not (
            k == "required" and v is False)}
        if "options" in o:
            entry["options"] = _normal(o["options"])
        out[name] = entry
    return out


def test_documentation_lists_every_option_as_the_code_takes_it() -> None:
    doc = yaml.safe_load(m.DOCUMENTATION)
    assert _normal(_spec_from_doc(doc["options"])) == _normal(m.ARGUMENT_SPEC)
    assert all(o.get("description") for o in doc["options"].values())


# ------------------------------------------------------------------ identity

H100_CSV = """index, name, pci.bus_id, pci.device_id, compute_cap, driver_version, vbios_version
0, NVIDIA H100 80GB HBM3, 00000000:19:00.0, 0x233010DE, 9.0, 535.261.03, 96.00.74.00.0D
1, NVIDIA H100 80GB HBM3, 00000000:3B:00.0, 0x233010DE, 9.0, 535.261.03, 96.00.74.00.0D
"""


def test_fingerprint_and_fleet_identity_read_devices_alike() -> None:
    fields = m._devices("nvidia-smi-csv", H100_CSV)
    assert fields == {"device_model": "NVIDIA H100 80GB HBM3", "pci_ids": ["10de:2330"],
                      "compute_capability": "9.0", "driver": "535.261.03"}
    coll = load_collection(
        '{"schema": "fleetgate.triage.collect/v1", "mode": "identity", "started_at": 0,'
        ' "duration_s": 1, "timeout_s": 10, "facts": {}, "env": {}, "files": {},'
        ' "commands": {"nvidia_smi_query": {"argv": ["nvidia-smi"], "status": "ok", "rc": 0,'
        f' "stdout": {__import__("json").dumps(H100_CSV)}, "stderr": "", "duration_s": 0.1}}}}}}')
    devs = identity.devices("nvidia", coll, None)
    assert [d.to_dict() for d in devs] == parsers.gpu_identities("nvidia-smi-csv", H100_CSV)
    assert {d.pci_id for d in devs} == set(fields["pci_ids"])
    assert devs[0].vbios == "96.00.74.00.0D"
    # the collector and the manifest ask nvidia-smi the same question
    assert parsers.NVIDIA_IDENTITY_QUERY.split("=", 1)[1].split(",") == [
        "index", "name", "pci.bus_id", "pci.device_id", "compute_cap", "driver_version",
        "vbios_version"]


def test_fingerprint_fields_join_distinct_values_and_skip_unknown() -> None:
    devs = [{"model": "A", "pci_id": "1002:74a1", "compute_capability": None, "vbios": None,
             "driver": "6.8.5"},
            {"model": "B", "pci_id": None, "compute_capability": None, "vbios": None,
             "driver": "6.8.5"}]
    assert parsers.fingerprint_fields(devs) == {
        "device_model": "A,B", "pci_ids": ["1002:74a1"], "compute_capability": None,
        "driver": "6.8.5"}


def test_unreadable_tool_output_leaves_the_fingerprint_fields_unset() -> None:
    assert m._devices("nvidia-smi-csv", "NVIDIA-SMI has failed\n") is None
    assert m._devices("amd-smi", None) is None
    assert m._devices("rocm-smi", "{}") is None
