"""Node-class schema and loader: the shipped classes validate, versions reach Ansible and Packer
unchanged, and the loader's one-line error contract holds for inputs the corpus cannot express."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from fleetgate.errors import BadInput, field_path, validation_error
from fleetgate.spec.derive import derive
from fleetgate.spec.loader import load_all, load_class
from fleetgate.spec.schema import ENGINE_PACKAGES, NodeClass

REPO = Path(__file__).resolve().parents[2]
CLASSES = REPO / "inventory" / "classes"
SHIPPED = sorted(CLASSES.glob("*.yml"))


def raw(name: str) -> dict[str, Any]:
    data = yaml.safe_load((CLASSES / f"{name}.yml").read_text())
    assert isinstance(data, dict)
    return data


def reject(data: dict[str, Any]) -> BadInput:
    """Validate a dict that must fail and return the loader's BadInput for it."""
    with pytest.raises(ValidationError) as info:
        NodeClass.model_validate(data)
    return validation_error(info.value, Path("x.yml"))


def test_inventory_ships_classes() -> None:
    assert len(SHIPPED) >= 5
    assert {p.stem for p in SHIPPED} >= {"lab-cpu", "lab-vm", "nvidia-h100-535",
                                        "nvidia-h200-580", "amd-mi300x-rocm"}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_class_validates(path: Path) -> None:
    nc = load_class(path)
    assert nc.name == path.stem


def test_load_all_shipped() -> None:
    loaded = load_all([CLASSES])
    assert sorted(loaded) == sorted(p.stem for p in SHIPPED)


def test_cli_validates_shipped_classes() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "fleetgate.cli.main", "spec", "validate", str(CLASSES)],
        capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert f"{len(SHIPPED)} class(es) valid" in proc.stdout
    assert proc.stderr == ""


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_derive_carries_pins_unchanged(path: Path) -> None:
    nc = load_class(path)
    data = yaml.safe_load(path.read_text())
    ansible = derive(nc, "ansible")
    packer = derive(nc, "packer")

    # Byte-for-byte the strings from the class file.
    assert ansible["fleetgate_kernel_abi"] == data["kernel"]["abi"] == nc.kernel.abi
    assert packer["kernel_abi"] == data["kernel"]["abi"]
    assert ansible["fleetgate_kernel_package_version"] == data["kernel"]["package_version"]
    assert packer["kernel_package_version"] == data["kernel"]["package_version"]
    assert ansible["fleetgate_driver_version"] == data["driver"].get("version")
    assert packer["driver_version"] == (data["driver"].get("version") or "")
    assert ansible["fleetgate_driver_branch"] == data["driver"].get("branch")
    assert ansible["fleetgate_dkms_modules"] == [
        {"name": m["name"], "version": m["version"], "package": m["package"]}
        for m in data.get("dkms", [])
    ]
    # The engine's Debian package comes from the one map, for every class.
    assert ansible["fleetgate_engine_packages"] == ENGINE_PACKAGES
    if nc.runtime.engine != "none":
        assert ansible["fleetgate_engine_packages"][nc.runtime.engine]
    # No version written twice: Packer hands Ansible exactly the Ansible set.
    assert json.loads(packer["ansible_extra_vars_json"]) == ansible
    # Both are plain JSON (what `fleetgate spec vars` prints).
    json.dumps(ansible)
    json.dumps(packer)


def test_cuda_float_is_rejected_not_coerced() -> None:
    data = raw("nvidia-h100-535")
    data["userland"]["cuda"] = 12.10  # YAML `cuda: 12.10` is the float 12.1
    err = reject(data)
    assert err.field == "userland.cuda"
    assert "got float (quote version strings in YAML)" in err.reason


def test_count_string_is_rejected_not_coerced() -> None:
    data = raw("nvidia-h100-535")
    data["accelerator"]["count"] = "8"
    assert reject(data).field == "accelerator.count"


@pytest.mark.parametrize("version", ["12", "9", "24.04", "1.2.3"])
def test_os_version_accepts(version: str) -> None:
    data = raw("lab-cpu")
    data["os"]["version"] = version
    assert NodeClass.model_validate(data).os.version == version


@pytest.mark.parametrize("version", ["123", "1.2.3.4", "twelve", "12\n", "", 12, 24.04])
def test_os_version_rejects_with_plain_field_path(version: object) -> None:
    data = raw("lab-cpu")
    data["os"]["version"] = version
    err = reject(data)
    assert err.field == "os.version"  # not os.version.constrained-str
    assert "more)" not in err.reason


@pytest.mark.parametrize(("path", "value"), [
    ("kernel.abi", "6.1.0-55-amd64;reboot"),
    ("kernel.abi", "6.1.0-55-amd64 "),
    ("kernel.abi", "$(uname -r)"),
    ("kernel.package_version", "6.1.192-1|sh"),
    ("driver.version", "535.261.03-1 && curl x"),
    ("driver.version", "-535"),
    ("driver.packages", ["nvidia-driver", "nvidia-smi>x"]),
    ("driver.packages", ["--force-yes"]),
    ("driver.source.url", "http://deb.debian.org/debian?x=1"),
    ("driver.source.url", "http://deb.debian.org/debian#frag"),
    ("driver.source.url", "ftp://deb.debian.org/debian"),
    ("driver.source.url", "http://user@deb.debian.org/debian"),
    ("driver.source.suite", "bookworm main"),
    ("driver.source.components", ["main", "contrib;id"]),
    ("dkms", [{"name": "../nvidia", "version": "1", "package": "nvidia-kernel-dkms"}]),
    ("runtime.version", "1.6.20 ; id"),
    ("accelerator.model", "H100\nrm -rf /"),
    ("accelerator.compute_capability", "9.0a"),
    ("name", "Nvidia-H100"),
])
def test_metacharacters_rejected(path: str, value: object) -> None:
    data = raw("nvidia-h100-535")
    *parents, leaf = path.split(".")
    target = data
    for key in parents:
        target = target[key]
    target[leaf] = value
    err = reject(data)
    assert err.field is not None and err.field.startswith(path)
    assert "\n" not in err.one_line()


@pytest.mark.parametrize(("loc", "expected"), [
    ((), "(top level)"),
    (("kernel", "abi"), "kernel.abi"),
    (("dkms", 0, "name"), "dkms[0].name"),
    (("driver", "packages", 2), "driver.packages[2]"),
    (("evil\nkey",), "'evil\\nkey'"),
    (("kernel", "x y\tz"), "kernel.'x y\\tz'"),
])
def test_field_path(loc: tuple[int | str, ...], expected: str) -> None:
    assert field_path(loc) == expected


def test_unknown_key_is_one_line_even_with_control_characters(tmp_path: Path) -> None:
    data = raw("lab-cpu")
    data["name"] = "odd-keys"
    data["kernel"]["a\u2028b\rc"] = 1
    f = tmp_path / "odd-keys.yml"
    f.write_text(yaml.safe_dump(data))
    with pytest.raises(BadInput) as info:
        load_class(f)
    line = info.value.one_line()
    assert len(line.splitlines()) == 1
    assert "unknown key" in line


def test_model_copy_keeps_shipped_class_frozen() -> None:
    nc = load_class(CLASSES / "nvidia-h100-535.yml")
    with pytest.raises(ValidationError):
        nc.name = "other"  # type: ignore[misc]
    copied = nc.model_copy(update={"description": "changed"})
    assert copied.description == "changed" and nc.description != "changed"


def test_vendor_none_class_has_no_driver_pins() -> None:
    nc = load_class(CLASSES / "lab-cpu.yml")
    ansible = derive(nc, "ansible")
    assert ansible["fleetgate_driver_version"] is None
    assert derive(nc, "packer")["driver_version"] == ""


def test_nvidia_driver_needs_every_pin() -> None:
    base = raw("nvidia-h100-535")
    for key in ("branch", "version", "flavour"):
        data = copy.deepcopy(base)
        del data["driver"][key]
        err = reject(data)
        assert err.field == "driver"
        assert key in err.reason
