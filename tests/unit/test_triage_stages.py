"""The walk's stage logic on evidence built from recorded outputs: which stage explains the
problem, what it says, and what it leaves to later stages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fleetgate.triage import evidence
from fleetgate.triage.comms import select
from fleetgate.triage.decisions import DECISIONS
from fleetgate.triage.diagnose import DiagnoseRun, Target, evaluate, replay
from fleetgate.triage.model import Walk
from fleetgate.triage.walk import uncollected

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "triage"
IDLE_STAT = "cpu  1000 0 1000 8000 0 0 0 0 0 0\n"
LATER_STAT = "cpu  1020 0 1020 8160 0 0 0 0 0 0\n"  # 10% busy, no iowait
NO_NVIDIA = ("nvidia_smi_list", "nvidia_smi_query", "nvidia_smi_dmon", "nvidia_smi_topo")


def read(name: str) -> str:
    return (FIX / name).read_text()


def cmd(stdout: str = "", status: str = "ok", stderr: str = "") -> dict[str, Any]:
    return {"argv": ["x"], "status": status, "rc": 0 if status == "ok" else None,
            "stdout": stdout, "stderr": stderr, "duration_s": 0.1}


def doc(commands: dict[str, dict[str, Any]], files: dict[str, str | None] | None = None,
        env: dict[str, str] | None = None) -> evidence.Collection:
    """A collector document: every tool missing unless given, an idle CPU, one NIC."""
    all_cmds = {k: cmd(status="missing") for k in evidence.PARSERS}
    link = read("article-ip-s-link-eth0.txt")
    all_cmds.update(ip_link_0=cmd(link), ip_link_1=cmd(link))
    all_cmds.update(commands)
    all_files: dict[str, str | None] = {"proc_stat_0": IDLE_STAT, "proc_stat_1": LATER_STAT,
                                        "pci_devices": "", "etc_environment": ""}
    all_files.update(files or {})
    return evidence.load_collection(json.dumps({
        "schema": evidence.SCHEMA, "mode": "diagnose", "started_at": 0, "duration_s": 7.0,
        "timeout_s": 10.0, "facts": {"cpu_count": 2, "cpus_allowed": 2}, "env": env or {},
        "commands": all_cmds,
        "files": {k: {"path": f"/{k}", "text": v, "error": None if v is not None else "ENOENT"}
                  for k, v in all_files.items()}}))


def nvidia(**over: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A healthy, busy two-GPU NVIDIA host as the article's tasks 1 and 5 show it."""
    busy_dmon = ("# gpu pwr gtemp mtemp sm mem enc dec mclk pclk rxpci txpci fb bar1\n"
                 "# Idx W C C % % % % MHz MHz MB/s MB/s MB MB\n"
                 "0 600 70 - 97 55 0 0 2619 1980 900 300 70000 5\n"
                 "1 610 71 - 95 53 0 0 2619 1980 880 290 70000 5\n")
    base = {"nvidia_smi_list": cmd(read("article-nvidia-smi-L.txt")),
            "nvidia_smi_dmon": cmd(busy_dmon),
            "nvidia_smi_topo": cmd(read("article-nvidia-smi-topo-m.txt")),
            "dmesg": cmd("[    4.2] NVRM: loading NVIDIA UNIX Open Kernel Module\n")}
    base.update(over)
    return base


def walk_of(c: evidence.Collection, backend: str = "nvidia", gpus: int = 2) -> Walk:
    return evaluate("h1", c, Target(backend, gpus))


def statuses(w: Walk) -> list[str]:
    return [s.status for s in w.stages]


def test_healthy_busy_nvidia_host_is_clean() -> None:
    w = walk_of(doc(nvidia()))
    assert w.verdict == "clean" and statuses(w) == ["ok", "ok", "ok", "ok"]
    assert w.stages[0].summary.startswith("2 of 2 GPU(s) visible")
    assert DiagnoseRun(None, [w]).exit_code == 0


def test_article_xid79_stops_the_walk_at_stage_1_with_quarantine() -> None:
    w = walk_of(doc(nvidia(dmesg=cmd(read("article-dmesg-xid79.txt")))))
    assert w.verdict == "problem" and w.stopped_at == "device"
    assert statuses(w) == ["problem", "skipped", "skipped", "skipped"]
    dev = w.stages[0]
    assert dev.findings[0].kind == "kernel-gpu-error"
    assert "Xid 79 (GPU has fallen off the bus) on 0000:41:00" in dev.summary
    assert dev.decision == DECISIONS["kernel-gpu-error"] and "Quarantine" in dev.decision
    assert "stage 1" in w.stages[3].summary
    assert DiagnoseRun(None, [w]).exit_code == 1


def test_missing_gpus_against_the_class_count() -> None:
    w = walk_of(doc(nvidia()), gpus=8)
    assert w.stopped_at == "device"
    assert w.stages[0].summary == "2 of 8 GPUs visible to nvidia-smi"
    assert "fix the driver / kernel / hardware" in (w.stages[0].decision or "")


def test_gpu_on_the_bus_that_the_driver_does_not_list() -> None:
    pci = ("0000:41:00.0 0x10de 0x20b0 0x030200 0\n0000:42:00.0 0x10de 0x20b0 0x030200 0\n"
           "0000:43:00.0 0x10de 0x20b0 0x030200 0\n")
    w = walk_of(doc(nvidia(), files={"pci_devices": pci}))
    assert w.stopped_at == "device"
    assert w.stages[0].summary == "3 nvidia GPU(s) on the PCI bus but nvidia-smi lists 2"


def test_nvidia_smi_missing_on_an_nvidia_class_is_a_device_problem() -> None:
    w = walk_of(doc(nvidia(nvidia_smi_list=cmd(status="missing"))))
    assert w.stopped_at == "device" and "not installed" in w.stages[0].summary


def test_hung_nvidia_smi_is_inconclusive_and_the_walk_goes_on() -> None:
    w = walk_of(doc(nvidia(nvidia_smi_list=cmd(status="timeout"),
                           nvidia_smi_dmon=cmd(status="skipped"))))
    assert statuses(w)[:2] == ["inconclusive", "inconclusive"]
    assert "no answer in 10s" in w.stages[0].summary
    assert w.stages[2].status == "ok", "a stage that cannot measure does not stop the walk"
    assert w.verdict == "inconclusive" and DiagnoseRun(None, [w]).exit_code == 4


def test_article_dmon_low_sm_explains_at_stage_2() -> None:
    w = walk_of(doc(nvidia(nvidia_smi_dmon=cmd(read("article-nvidia-smi-dmon.txt")))))
    assert w.stopped_at == "utilisation"
    f = w.stages[1].findings[0]
    assert f.kind == "low-sm" and f.message.startswith("GPU0 SM 18% (memory 12%)")
    assert "do not buy more GPUs" in (w.stages[1].decision or "")
    assert statuses(w) == ["ok", "problem", "skipped", "skipped"]


def test_memory_bound_variant() -> None:
    dmon = "# gpu sm mem fb\n# Idx % % MB\n0 10 85 60000\n0 12 83 60000\n"
    w = walk_of(doc(nvidia(nvidia_smi_dmon=cmd(dmon))), gpus=2)
    assert w.stages[1].findings[0].kind == "memory-bound"
    assert w.stages[1].decision == DECISIONS["memory-bound"]


def test_idle_gpus_are_not_under_utilised() -> None:
    dmon = "# gpu sm mem fb\n# Idx % % MB\n0 0 0 3\n1 0 0 3\n"
    w = walk_of(doc(nvidia(nvidia_smi_dmon=cmd(dmon))))
    assert w.stages[1].status == "ok" and "idle" in w.stages[1].summary
    assert w.verdict == "clean"


def test_resident_model_with_sm_zero_is_under_utilised() -> None:
    dmon = "# gpu sm mem fb\n# Idx % % MB\n0 0 0 60000\n"
    w = walk_of(doc(nvidia(nvidia_smi_dmon=cmd(dmon))))
    assert w.stopped_at == "utilisation"


def test_article_iostat_saturated_disk_explains_at_stage_3() -> None:
    w = walk_of(doc(nvidia(iostat=cmd(read("article-iostat-xz.txt")))))
    assert w.stopped_at == "feeding"
    f = w.stages[2].findings[0]
    assert f.kind == "disk-saturated"
    assert f.message == "nvme0n1 98% busy, await 6.2 ms, iowait 9.4%"
    assert "staging / caching" in (w.stages[2].decision or "")


def test_high_iowait_without_iostat() -> None:
    files = {"proc_stat_1": "cpu  1010 0 1010 8050 130 0 0 0 0 0\n"}  # 65% iowait
    w = walk_of(doc(nvidia(), files=files))
    assert w.stopped_at == "feeding" and w.stages[2].findings[0].kind == "iowait"
    assert "iostat: missing (sysstat is not installed)" in w.stages[2].notes
    assert w.stages[2].tools["iostat"] == "missing"


def test_a_busy_cpu_alone_is_context_not_a_problem() -> None:
    files = {"proc_stat_1": "cpu  1190 0 1000 8010 0 0 0 0 0 0\n"}  # 95% busy
    w = walk_of(doc(nvidia(), files=files))
    assert w.verdict == "clean"
    assert any("95% busy" in n for n in w.stages[2].notes)


def test_cgroup_quota_below_one_cpu_explains_at_stage_3() -> None:
    files = {"cgroup1_cfs_quota_us": "5000\n", "cgroup1_cfs_period_us": "100000\n",
             "cgroup1_cpu_stat_0": "nr_periods 0\nnr_throttled 0\nthrottled_time 0\n",
             "cgroup1_cpu_stat_1": "nr_periods 0\nnr_throttled 0\nthrottled_time 0\n"}
    w = walk_of(doc(nvidia(), files=files))
    assert w.stopped_at == "feeding"
    assert w.stages[2].summary == "CPU capped at 0.05 of 2 CPUs by the cgroup quota"
    assert w.stages[2].decision == DECISIONS["cpu-throttled"]


def test_generous_quota_is_fine_but_heavy_throttling_is_not() -> None:
    quota = {"cgroup2_cpu_max": "150000 100000\n"}
    calm = {**quota, "cgroup2_cpu_stat_0": "nr_periods 0\nnr_throttled 0\nthrottled_usec 0\n",
            "cgroup2_cpu_stat_1": "nr_periods 50\nnr_throttled 1\nthrottled_usec 10\n"}
    assert walk_of(doc(nvidia(), files=calm)).verdict == "clean"
    hot = {**calm, "cgroup2_cpu_stat_1": "nr_periods 50\nnr_throttled 30\nthrottled_usec 900\n"}
    w = walk_of(doc(nvidia(), files=hot))
    assert w.stopped_at == "feeding" and "throttled in 30 of 50 periods" in w.stages[2].summary


def test_gpus_on_two_numa_nodes_are_a_note() -> None:
    w = walk_of(doc(nvidia(nvidia_smi_topo=cmd(read("synthetic-topo-m-4gpu-2numa.txt")))))
    assert w.verdict == "clean"
    assert any("different NUMA nodes" in n and "0, 1" in n for n in w.stages[2].notes)


def test_article_drop_count_alone_is_a_note_growth_is_a_problem() -> None:
    w = walk_of(doc(nvidia()))
    assert w.stages[3].status == "ok"
    assert any("12 RX dropped since boot (of 8123456 packets)" in n for n in w.stages[3].notes)
    grown = read("article-ip-s-link-eth0.txt").replace("8123456 0 12", "8123999 0 40")
    w = walk_of(doc(nvidia(ip_link_1=cmd(grown))))
    assert w.stopped_at == "comms"
    assert w.stages[3].summary == "eth0: RX dropped +28 during the 1.0s sample"
    assert "MTU" in (w.stages[3].decision or "")


def test_article_nccl_env_on_eth0_is_fine() -> None:
    w = walk_of(doc(nvidia(), files={"etc_environment": read("article-nccl-env.txt")}))
    assert w.stages[3].status == "ok"
    assert "NCCL environment: NCCL_DEBUG=INFO, NCCL_SOCKET_IFNAME=eth0" in w.stages[3].notes


def test_nccl_ifname_naming_no_interface_explains_at_stage_4() -> None:
    w = walk_of(doc(nvidia(), env={"NCCL_SOCKET_IFNAME": "ib9"},
                    files={"etc_environment": "NCCL_SOCKET_IFNAME=eth0\n"}))
    assert w.stopped_at == "comms"
    assert w.stages[3].summary == ("NCCL_SOCKET_IFNAME=ib9 (from environment) matches no "
                                   "interface here (have: eth0)")
    assert w.stages[3].decision == DECISIONS["nccl-nic"]


def test_nccl_ib_hca_without_rdma_devices() -> None:
    env = {"NCCL_IB_HCA": "mlx5_0"}
    w = walk_of(doc(nvidia(), env=env, files={"infiniband": None}))
    assert w.stopped_at == "comms" and "no RDMA device" in w.stages[3].summary
    ok = walk_of(doc(nvidia(), env=env, files={"infiniband": "mlx5_0\nmlx5_1\n"}))
    assert ok.stages[3].status == "ok"
    off = walk_of(doc(nvidia(), env={**env, "NCCL_IB_DISABLE": "1"}))
    assert off.stages[3].status == "ok"


def test_nccl_interface_matching_rules() -> None:
    names = ["eth0", "eth1", "ib0", "lo", "docker0"]
    assert select("eth", names) == ["eth0", "eth1"]
    assert select("=eth", names) == []
    assert select("=eth1,ib0", names) == ["eth1", "ib0"]
    assert select("^eth,lo,docker", names) == ["ib0"]
    assert select("^=eth0", names) == ["eth1", "ib0", "lo", "docker0"]
    assert select("mlx5_0:1", ["mlx5_0", "mlx5_1"]) == ["mlx5_0"]


def test_no_ip_tool_makes_comms_inconclusive() -> None:
    w = walk_of(doc(nvidia(ip_link_0=cmd(status="missing"), ip_link_1=cmd(status="missing"))))
    assert w.stages[3].status == "inconclusive" and w.verdict == "inconclusive"


def test_cpu_host_without_gpu_tools() -> None:
    c = doc({"dmesg": cmd(status="failed",
                          stderr="dmesg: read kernel buffer failed: Operation not permitted"),
             "journalctl_k": cmd("-- No entries --\n")})
    w = walk_of(c, backend="cpu", gpus=0)
    assert statuses(w) == ["n/a", "n/a", "ok", "ok"] and w.verdict == "clean"
    assert w.stages[0].summary == "no GPU tools (cpu backend)"
    assert w.stages[1].summary == "no GPU to sample (cpu backend)"
    assert w.stages[0].tools["nvidia-smi -L"] == "missing"
    assert any("kernel log unreadable" in n for n in w.stages[0].notes)


def test_hung_tools_on_a_cpu_host_are_named() -> None:
    c = doc({"nvidia_smi_list": cmd(status="timeout"), "lscpu": cmd(status="timeout")})
    w = walk_of(c, backend="cpu", gpus=0)
    assert w.stages[0].summary == "GPU tools present on a cpu-class host"
    assert "nvidia-smi -L: timeout (no answer in 10s)" in w.stages[0].notes
    assert "lscpu: timeout (no answer in 10s)" in w.stages[2].notes


def test_backend_auto_reads_the_tools() -> None:
    w = evaluate("h1", doc(nvidia()), Target("auto", None))
    assert w.backend == "nvidia" and w.stages[0].summary.startswith("2 of 2")
    cpu = evaluate("h1", doc({}), Target("auto", None))
    assert cpu.backend == "cpu" and cpu.stages[0].status == "n/a"


def test_an_uncollected_host_is_inconclusive_everywhere() -> None:
    w = uncollected("h1", "cpu", "unreachable: ssh: connect to host 127.0.0.1 port 1")
    assert w.verdict == "inconclusive" and set(statuses(w)) == {"inconclusive"}
    assert DiagnoseRun(None, [w]).exit_code == 4
    assert DiagnoseRun(None, [w, walk_of(doc(nvidia(), files={"proc_stat_1": (
        "cpu  1010 0 1010 8050 130 0 0 0 0 0\n")}))]).exit_code == 1


def test_replay_of_real_lab_collections() -> None:
    # Saved by `fleetgate diagnose` from a lab-cpu container: healthy (on a busy machine),
    # under `lab fault throttle-cpu`, under `lab fault nccl-bad-nic`.
    healthy = replay(FIX / "lab-saved-healthy.json").walks[0]
    assert healthy.verdict == "clean" and healthy.backend == "cpu"
    throttled = replay(FIX / "lab-saved-throttle-cpu.json").walks[0]
    assert throttled.stopped_at == "feeding"
    assert throttled.stages[2].summary.startswith("CPU capped at 0.05 of 2 CPUs")
    nccl = replay(FIX / "lab-saved-nccl-bad-nic.json").walks[0]
    assert nccl.stopped_at == "comms"
    assert "NCCL_SOCKET_IFNAME=ib9 (from /etc/environment)" in nccl.stages[3].summary
