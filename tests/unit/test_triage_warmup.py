"""`preflight warmup` logic that needs no host: the declared stack, which hosts are warmed,
and how per-host results become a per-class verdict."""

from __future__ import annotations

import pytest

from fleetgate.errors import BadInput
from fleetgate.preflight.warmup import ClassWarmup, HostWarmup, choose_hosts, parse_stack


def test_stack_names_are_validated_and_deduplicated() -> None:
    assert parse_stack([]) is None
    assert parse_stack(["torch", "transformers,safetensors", "torch"]) == [
        "torch", "transformers", "safetensors"]
    assert parse_stack(["torch.cuda"]) == ["torch.cuda"]
    for bad in (["os;rm -rf /"], ["-c"], ["a b"], [""], ["torch,"]):
        with pytest.raises(BadInput) as exc:
            parse_stack(bad)
        assert exc.value.source == "--import"
    with pytest.raises(BadInput, match="at most"):
        parse_stack([f"m{i}" for i in range(33)])


HOSTVARS = {"lab-c03": {"fleetgate_class": "lab-cpu"}, "lab-c01": {"fleetgate_class": "lab-cpu"},
            "lab-v01": {"fleetgate_class": "lab-vm"}, "bare": {}}


def test_one_host_per_class_by_name_or_all() -> None:
    one = choose_hosts(HOSTVARS, None, every=False)
    assert {n: hosts for n, (_, hosts) in one.items()} == {"lab-cpu": ["lab-c01"],
                                                           "lab-vm": ["lab-v01"]}
    every = choose_hosts(HOSTVARS, "lab-cpu", every=True)
    assert {n: hosts for n, (_, hosts) in every.items()} == {"lab-cpu": ["lab-c01", "lab-c03"]}
    assert choose_hosts(HOSTVARS, "nvidia-h200-580", every=False) == {}


def test_host_names_that_would_be_patterns_are_refused() -> None:
    with pytest.raises(BadInput):
        choose_hosts({"web*": {"fleetgate_class": "lab-cpu"}}, None, every=False)


def _host(name: str, ok: bool = True, status: str = "pass", cold: float = 0.5) -> HostWarmup:
    imports = [{"module": "numpy", "ok": True, "seconds": 0.1}]
    if not ok:
        imports.append({"module": "torch", "ok": False, "seconds": 0.0,
                        "error": "OSError: libcudart.so.12: cannot open shared object file"})
    return HostWarmup(name, imports=imports, import_s=0.1,
                      warmup={"status": status, "metrics": {"cold_start_s": cold}})


def test_class_outcome_and_cold_start() -> None:
    c = ClassWarmup("lab-cpu", "cpu", ["numpy"], [_host("a", cold=0.5), _host("b", cold=1.25)])
    assert c.outcome == "pass" and c.cold_start_s == 1.35  # slowest host, import included
    failed_import = ClassWarmup("x", "cpu", ["numpy", "torch"], [_host("a", ok=False)])
    assert failed_import.outcome == "fail"
    assert failed_import.to_dict()["hosts"][0]["outcome"] == "fail"
    unreachable = HostWarmup("c", import_error="unreachable: ssh: connect to host")
    unclear = ClassWarmup("y", "cpu", ["numpy"], [_host("a"), unreachable])
    assert unclear.outcome == "inconclusive"
    slow = ClassWarmup("z", "cpu", ["numpy"], [_host("a", status="fail")])
    assert slow.outcome == "fail"
    no_probe = ClassWarmup("w", "cpu", ["numpy"], [HostWarmup("a", import_s=0.0)])
    assert no_probe.outcome == "inconclusive" and no_probe.cold_start_s is None
