"""`fleetgate smoke parse` and the bad-input paths of `fleetgate smoke run` (no hosts needed):
one line on stderr, exit 2, nothing run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO, fleetgate

FIX = REPO / "tests" / "fixtures"


@pytest.mark.parametrize(("kind", "path", "key"), [
    ("nvidia-smi-xml", FIX / "nvidia-smi" / "a100-sxm4-v12.xml", "gpus"),
    ("rocm-smi", FIX / "rocm-smi" / "mi100_rocm602.json", "gpus"),
    ("lscpu", FIX / "cpu" / "lscpu-amd-epyc-kvm.json", "cpus"),
    ("all-reduce-perf", FIX / "synthetic" / "all_reduce_perf-h100x8.txt", "busbw_gbps"),
    ("kernel-log", FIX / "synthetic" / "dmesg-xid.txt", "fatal_xids"),
])
def test_parse_prints_normalized_json(kind: str, path: Path, key: str) -> None:
    proc = fleetgate("smoke", "parse", kind, str(path))
    assert proc.returncode == 0, proc.stderr
    assert key in json.loads(proc.stdout)


def test_parse_a_probe_output(tmp_path: Path) -> None:
    good = tmp_path / "probe.json"
    good.write_text(json.dumps({"probe": "gemm", "backend": "cpu", "status": "ok",
                                "metrics": {"tflops": 0.003}, "duration_s": 1.2}))
    proc = fleetgate("smoke", "parse", "probe", str(good))
    assert proc.returncode == 0 and json.loads(proc.stdout)["metrics"]["tflops"] == 0.003


@pytest.mark.parametrize(("args", "fragment"), [
    (["nvidia-smi-yaml", "x"], "unknown kind"),
    (["nvidia-smi-xml", "/no/such/file.xml"], "no such file"),
    (["nvidia-smi-xml", str(FIX / "rocm-smi" / "mi100_rocm602.json")], "not XML"),
    (["rocm-smi", str(FIX / "nvidia-smi" / "tesla-t4.xml")], "no JSON document"),
    (["nvidia-smi-xml", str(FIX)], "is a directory"),
])
def test_parse_bad_input_is_one_line_exit_2(args: list[str], fragment: str) -> None:
    proc = fleetgate("smoke", "parse", *args)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and fragment in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(("text", "fragment"), [
    ("", "empty"),
    ('{"probe": "gemm"} trailing', "not one JSON object"),
    ('{"probe": "gemm"}\n{"probe": "gemm"}\n', "not one JSON object"),
    ("[1, 2]", "not a list"),
    ('{"probe": "gpu-burn", "backend": "cpu", "status": "ok", "duration_s": 1}', "probe"),
    ('{"probe": "gemm", "backend": "cpu", "status": "great", "duration_s": 1}', "status"),
    ('{"probe": "gemm", "backend": "cpu", "status": "ok"}', "duration_s"),
])
def test_malformed_probe_output_is_one_line_exit_2(tmp_path: Path, text: str,
                                                   fragment: str) -> None:
    f = tmp_path / "out.json"
    f.write_text(text)
    proc = fleetgate("smoke", "parse", "probe", str(f))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert fragment in proc.stderr, proc.stderr


def test_run_rejects_bad_input_before_running(tmp_path: Path) -> None:
    inv = tmp_path / "inv.yml"
    inv.write_text("all:\n  hosts:\n    h1: {fleetgate_class: lab-cpu}\n")
    cases = [
        (["--only", "gemm,burn"], "unknown check burn"),
        (["--class", "no-such-class"], "unknown class"),
        (["--limit", "h1;reboot"], "host pattern"),
        (["--limit", "nomatch"], "no hosts match"),
        (["--execution-node", "h1"], "h1 is not in inventory group fleetgate_execution_nodes"),
    ]
    for extra, fragment in cases:
        proc = fleetgate("smoke", "run", "-i", str(inv), *extra,
                         env={"FLEETGATE_STATE_DIR": str(tmp_path)})
        assert proc.returncode == 2, (extra, proc.stderr)
        assert proc.stderr.count("\n") == 1 and fragment in proc.stderr, proc.stderr
    bad = tmp_path / "broken.yml"
    bad.write_text("all: [unclosed\n")
    proc = fleetgate("smoke", "run", "-i", str(bad))
    assert proc.returncode == 2 and str(bad) in proc.stderr
    assert not (tmp_path / "runs").exists(), "nothing ran"


@pytest.mark.parametrize(("n", "forks", "sizes"), [
    (6, 8, [1, 1, 1, 1, 1, 1]), (6, 1, [6]), (7, 3, [3, 2, 2]), (20, 4, [5, 5, 5, 5])])
def test_smoke_deals_hosts_into_at_most_forks_processes(n: int, forks: int,
                                                        sizes: list[int]) -> None:
    from fleetgate.smoke.runner import _groups

    hosts = [f"h{i:02d}" for i in range(n)]
    groups = _groups(hosts, forks)
    assert [len(g) for g in groups] == sizes
    assert [h for g in groups for h in g] == hosts, "every host once, in order"


def test_a_planned_host_gone_from_the_inventory_is_not_run_not_an_error(tmp_path: Path) -> None:
    from fleetgate.smoke.runner import run_smoke

    inv = tmp_path / "hosts.yml"
    inv.write_text("all:\n  hosts:\n    h1: {ansible_host: 127.0.0.1, ansible_port: 1}\n")
    run = run_smoke(inv, hosts=["h1", "h9"], only="discovery", runs_base=tmp_path)
    got = {r.host: (r.status, r.probe_status, r.reason) for r in run.results}
    assert got["h1"] == ("inconclusive", "not-run", "host has no fleetgate_class")
    assert got["h9"][:2] == ("inconclusive", "not-run") and "not in the inventory" in got["h9"][2]
    assert run.hosts == ["h1", "h9"] and run.limit == "h1,h9"
