"""The engine/compile cache key: stable, and different whenever generated code may differ."""

from __future__ import annotations

import pytest

from fleetgate.errors import BadInput
from fleetgate.spec.loader import resolve_class
from fleetgate.triage.cachekey import cache_key, parse_engines, runtime_of
from fleetgate.triage.identity import Device

H200 = Device("NVIDIA H200", "10de:2335", "9.0", "96.00.AF.00.01", "580.95.05")


def test_key_is_stable_and_pinned() -> None:
    a = cache_key("nvidia", H200, "cuda=13.0", {"tensorrt": "10.3"})
    b = cache_key("nvidia", H200, "cuda=13.0", {"tensorrt": "10.3"})
    assert a == b
    # Pinned: a change of scheme must be deliberate (bump SCHEME), never an accident.
    assert a.key == "fg1-b4f08a951bcaba5ef7ed"
    assert a.components == {"scheme": 1, "backend": "nvidia", "device_model": "NVIDIA H200",
                            "pci_id": "10de:2335", "compute_capability": "9.0",
                            "driver": "580.95.05", "runtime": "cuda=13.0",
                            "engines": {"tensorrt": "10.3"}}


def test_vbios_does_not_change_the_key_but_everything_else_does() -> None:
    base = cache_key("nvidia", H200, "cuda=13.0", {"torch": "2.4.1", "triton": "3.0.0"})
    other_vbios = Device(H200.model, H200.pci_id, H200.compute_capability, "96.00.B0.00.02",
                         H200.driver)
    assert cache_key("nvidia", other_vbios, "cuda=13.0",
                     {"triton": "3.0.0", "torch": "2.4.1"}).key == base.key
    variants = [
        cache_key("nvidia", Device("NVIDIA H100", "10de:2330", "9.0", None, "580.95.05"),
                  "cuda=13.0", {"torch": "2.4.1", "triton": "3.0.0"}),
        cache_key("nvidia", Device(H200.model, H200.pci_id, "9.0", None, "580.82.07"),
                  "cuda=13.0", {"torch": "2.4.1", "triton": "3.0.0"}),
        cache_key("nvidia", H200, "cuda=12.8", {"torch": "2.4.1", "triton": "3.0.0"}),
        cache_key("nvidia", H200, "cuda=13.0", {"torch": "2.5.0", "triton": "3.0.0"}),
        cache_key("nvidia", H200, "cuda=13.0", {"torch": "2.4.1"}),
    ]
    assert len({v.key for v in variants} | {base.key}) == len(variants) + 1


@pytest.mark.parametrize("pairs", [[], ["tensorrt"], ["tensorrt=10.3;rm -rf /"], ["=10.3"],
                                   ["TensorRT 10=1"], ["trt=1", "trt=2"]])
def test_bad_engine_values(pairs: list[str]) -> None:
    with pytest.raises(BadInput) as exc:
        parse_engines(pairs)
    assert exc.value.source == "--engine" and exc.value.exit_code == 2


def test_engine_names_are_case_folded() -> None:
    assert parse_engines(["TensorRT=10.3.0.26", "torch=2.4.1+cu124"]) == {
        "tensorrt": "10.3.0.26", "torch": "2.4.1+cu124"}


def test_runtime_from_class_or_option() -> None:
    h200 = resolve_class("nvidia-h200-580")[1]
    lab = resolve_class("lab-cpu")[1]
    assert runtime_of(h200, None) == "cuda=13.0"
    assert runtime_of(h200, "cuda=12.4") == "cuda=12.4"
    assert runtime_of(lab, None) == "none"
    with pytest.raises(BadInput):
        runtime_of(h200, "cuda=12.4; reboot")
