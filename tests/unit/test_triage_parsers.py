"""Triage parsers against recorded outputs: the examples quoted in the seed article, real
captures from the lab's Debian 12 hosts, and the synthetic files named in
tests/fixtures/triage/README.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetgate.triage import parsers
from fleetgate.triage.drift import parse_dpkg_verify

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "triage"


def read(name: str) -> str:
    return (FIX / name).read_text()


def test_article_dmon_means_per_gpu_and_missing_values() -> None:
    d = parsers.parse_dmon(read("article-nvidia-smi-dmon.txt"))
    assert d["columns"][:5] == ["pwr", "gtemp", "mtemp", "sm", "mem"]
    assert d["units"]["sm"] == "%" and d["units"]["pclk"] == "MHz"
    assert len(d["samples"]) == 2 and d["samples"][0]["mtemp"] is None  # "-" in the capture
    gpu0 = d["per_gpu"][0]
    assert (gpu0["sm"], gpu0["mem"], gpu0["rxpci"], gpu0["samples"]) == (18.5, 12.5, 115.0, 2.0)


def test_dmon_rejects_rows_that_do_not_match_the_header() -> None:
    with pytest.raises(parsers.ParseError, match="fields"):
        parsers.parse_dmon("# gpu pwr sm\n# Idx W %\n0 215\n")
    with pytest.raises(parsers.ParseError, match="header"):
        parsers.parse_dmon("0 215 18\n")


def test_article_topo_m_single_spaced() -> None:
    t = parsers.parse_topo(read("article-nvidia-smi-topo-m.txt"))
    assert t["gpus"] == ["GPU0", "GPU1"]
    assert t["links"] == {"GPU0-GPU1": "NV1"}
    assert t["cpu_affinity"] == {"GPU0": "0-31", "GPU1": "0-31"}
    assert t["numa_affinity"] == {"GPU0": "0", "GPU1": "0"}


def test_tabbed_topo_m_with_ansi_header_nic_rows_and_legend() -> None:
    t = parsers.parse_topo(read("synthetic-topo-m-4gpu-2numa.txt"))
    assert t["gpus"] == ["GPU0", "GPU1", "GPU2", "GPU3"] and t["nics"] == ["NIC0"]
    assert t["links"]["GPU0-GPU3"] == "SYS" and t["links"]["GPU2-GPU3"] == "NV18"
    assert t["numa_affinity"] == {"GPU0": "0", "GPU1": "0", "GPU2": "1", "GPU3": "1"}
    assert t["cpu_affinity"]["GPU2"] == "48-95,144-191"


def test_topo_rejects_other_text() -> None:
    with pytest.raises(parsers.ParseError):
        parsers.parse_topo("Device r/s w/s\nvda 1 2\n")


def test_article_iostat_single_report_is_the_live_sample() -> None:
    io = parsers.parse_iostat(read("article-iostat-xz.txt"))
    assert io["reports"] == 1 and io["since_boot"] is None
    live = io["live"][0]
    assert live["cpu"]["iowait"] == 9.44
    assert live["devices"]["nvme0n1"]["util"] == 98.0
    assert live["devices"]["nvme0n1"]["r_await"] == 6.2


def test_lab_iostat_interval_reports_skip_the_since_boot_one() -> None:
    io = parsers.parse_iostat(read("lab-iostat-xz-1-3.txt"))  # sysstat 12.6.1, Debian 12
    assert io["reports"] == 3 and len(io["live"]) == 2
    assert "vda" in io["since_boot"]["devices"]
    assert io["since_boot"]["devices"]["vda"]["util"] == 2.68
    assert [r["devices"] for r in io["live"]] == [{}, {}]  # -z hides idle devices


def test_iostat_rejects_mismatched_rows() -> None:
    with pytest.raises(parsers.ParseError):
        parsers.parse_iostat("Device r/s w/s\nvda 1\n")
    with pytest.raises(parsers.ParseError):
        parsers.parse_iostat("hello\n")


@pytest.mark.parametrize("name", ["lab-mpstat-1-1.txt", "lab-mpstat-P-ALL.txt"])
def test_lab_mpstat_all_row(name: str) -> None:
    m = parsers.parse_mpstat(read(name))
    assert m["idle"] == 99.5 and m["iowait"] == 0.0 and "usr" in m


def test_mpstat_without_all_row() -> None:
    with pytest.raises(parsers.ParseError, match="all"):
        parsers.parse_mpstat("Linux 6.1 (h)\n")


def test_article_ip_s_link_counters() -> None:
    links = parsers.parse_ip_link(read("article-ip-s-link-eth0.txt"))
    eth0 = links["eth0"]
    assert eth0["state"] == "UP" and eth0["mtu"] == 1500
    assert eth0["rx"] == {"bytes": 9876543210, "packets": 8123456, "errors": 0, "dropped": 12,
                          "missed": 0, "mcast": 12345}
    assert eth0["tx"]["carrier"] == 0


def test_lab_ip_s_link_veth_name_is_cut_at_the_at_sign() -> None:
    links = parsers.parse_ip_link(read("lab-ip-s-link.txt"))
    assert set(links) == {"lo", "eth0"}
    assert "LOOPBACK" in links["lo"]["flags"] and links["eth0"]["rx"]["packets"] > 0


def test_ip_link_rejects_other_text() -> None:
    with pytest.raises(parsers.ParseError):
        parsers.parse_ip_link("RX: bytes\n1\n")


def test_article_dmesg_xid79_and_bus_drop_lines() -> None:
    k = parsers.parse_kernel_events(read("article-dmesg-xid79.txt"))
    assert k["fatal_xids"] == [79]
    assert k["xids"][0]["pci"] == "0000:41:00"
    assert k["bus_drops"] == []  # the one bus-drop line is the Xid itself
    bare = parsers.parse_kernel_events("[1.0] NVRM: GPU 0000:3b:00.0: GPU has fallen off the "
                                       "bus.\n")
    assert bare["xid_count"] == 0 and len(bare["bus_drops"]) == 1


def test_article_nvidia_smi_list() -> None:
    gpus = parsers.parse_nvidia_smi_list(read("article-nvidia-smi-L.txt"))
    assert [g["index"] for g in gpus] == [0, 1]
    assert gpus[0]["name"] == "NVIDIA A100-SXM4-40GB" and gpus[1]["uuid"] == "GPU-8f19..."
    assert parsers.parse_nvidia_smi_list("") == []
    with pytest.raises(parsers.ParseError):
        parsers.parse_nvidia_smi_list("No devices were found\n")


def test_article_nccl_env_and_env_file_syntax() -> None:
    assert parsers.parse_env_file(read("article-nccl-env.txt")) == {
        "NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "eth0"}
    text = '# comment\nexport A="x y"\nB=\'z\'\nnot a line\nC = 1\n'
    assert parsers.parse_env_file(text) == {"A": "x y", "B": "z", "C": "1"}


def test_proc_stat_usage_between_snapshots() -> None:
    b = parsers.parse_proc_stat("cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3 4 5\n")
    a = parsers.parse_proc_stat("cpu  150 0 150 900 200 0 0 0 0 0\n")
    u = parsers.cpu_usage(b, a)
    assert u is not None
    assert (u["busy"], u["iowait"], u["idle"]) == (25.0, 25.0, 50.0)
    assert parsers.cpu_usage(a, a) is None
    with pytest.raises(parsers.ParseError):
        parsers.parse_proc_stat("intr 1 2 3\n")


def test_cgroup_v1_quota_and_throttling_as_the_lab_fault_leaves_them() -> None:
    # Read in a lab container under `lab fault HOST throttle-cpu` (podman update --cpus 0.05).
    cg = parsers.parse_cgroup_cpu(
        cfs_quota_us="5000\n", cfs_period_us="100000\n",
        stat_before="nr_periods 7\nnr_throttled 6\nthrottled_time 370283228\n",
        stat_after="nr_periods 27\nnr_throttled 25\nthrottled_time 1370283228\n")
    assert cg["cgroup"] == 1 and cg["quota_cpus"] == 0.05
    assert cg["throttle"] == {"periods": 20, "throttled": 19, "throttled_s": 1.0, "ratio": 0.95}
    assert parsers.parse_cgroup_cpu(cfs_quota_us="-1", cfs_period_us="100000")["quota_cpus"] \
        is None


def test_cgroup_v2_cpu_max() -> None:
    assert parsers.parse_cgroup_cpu(cpu_max="max 100000\n")["quota_cpus"] is None
    cg = parsers.parse_cgroup_cpu(cpu_max="150000 100000\n",
                                  stat_before="nr_periods 1\nnr_throttled 0\nthrottled_usec 0\n",
                                  stat_after="nr_periods 11\nnr_throttled 5\n"
                                             "throttled_usec 250000\n")
    assert cg["cgroup"] == 2 and cg["quota_cpus"] == 1.5
    assert cg["throttle"]["throttled_s"] == 0.25 and cg["throttle"]["ratio"] == 0.5
    with pytest.raises(parsers.ParseError):
        parsers.parse_cgroup_cpu(cpu_max="lots\n")


def test_pci_listing_keeps_gpus_and_accelerators() -> None:
    text = ("0000:00:00.0 0x8086 0x0d57 0x060000 -1\n"
            "0000:41:00.0 0x10de 0x2335 0x030200 0\n"
            "0000:c1:00.0 0x1002 0x74a1 0x120000 1\n"
            "0000:05:00.0 0x10de 0x1aef 0x040300 0\n")  # an NVIDIA audio function: not a GPU
    gpus = parsers.parse_pci_devices(text)
    assert [(g["vendor"], g["pci_id"], g["numa_node"]) for g in gpus] == [
        ("nvidia", "10de:2335", 0), ("amd", "1002:74a1", 1)]
    with pytest.raises(parsers.ParseError):
        parsers.parse_pci_devices("0000:41:00.0 0x10de\n")


def test_amd_metric_usage_synthetic() -> None:
    m = parsers.parse_amd_metric_usage(read("synthetic-amd-smi-metric-usage.json"))
    assert m == {0: {"sm": 97.0, "mem": 41.0}, 1: {"sm": 12.0, "mem": 70.0}}
    with pytest.raises(parsers.ParseError):
        parsers.parse_amd_metric_usage("[]")


def test_dpkg_verify_lines() -> None:
    # The first line is what `dpkg --verify` printed in a lab host after `lab fault drift-package`.
    text = ("??5??????   /boot/config-6.1.0-55-cloud-amd64\n"
            "??5?????? c /etc/nvidia/nvidia-drm-outputclass.conf\n"
            "missing     /usr/lib/modules/6.1.0-55-amd64/updates/dkms/nvidia.ko\n"
            "dpkg: warning: something else\n")
    got = parse_dpkg_verify(text)
    assert [(g["path"], g["conffile"], g["missing"], g["checksum_changed"]) for g in got] == [
        ("/boot/config-6.1.0-55-cloud-amd64", False, False, True),
        ("/etc/nvidia/nvidia-drm-outputclass.conf", True, False, True),
        ("/usr/lib/modules/6.1.0-55-amd64/updates/dkms/nvidia.ko", False, True, False)]


# --- impossible values: each case is a recorded output changed in exactly one reading --------

def _dmon(old: str, new: str) -> str:
    text = read("article-nvidia-smi-dmon.txt")
    assert old in text
    return text.replace(old, new, 1)


@pytest.mark.parametrize(("old", "new", "fragment"), [
    ("0 215 62 - 18", "0 nan 62 - 18", "samples[0].pwr: nan is not a finite number"),
    ("0 215 62 - 18", "0 inf 62 - 18", "samples[0].pwr: inf is not a finite number"),
    ("0 215 62 - 18", "0 -215 62 - 18", "samples[0].pwr: -215.0 is negative"),
    ("0 215 62 - 18", "0 215 62 - 180", "samples[0].sm: 180.0% is not a percentage"),
    ("0 215 62 - 18", "0 215 620 - 18", "samples[0].gtemp: 620.0 C is outside"),
    ("120 30 40 1\n0 220", "-120 30 40 1\n0 220", "samples[0].rxpci: -120.0 is negative"),
])
def test_dmon_impossible_reading_names_the_field(old: str, new: str, fragment: str) -> None:
    with pytest.raises(parsers.ParseError) as err:
        parsers.parse_dmon(_dmon(old, new))
    assert str(err.value).startswith(fragment)


@pytest.mark.parametrize("index", ["nan", "-1", "1.5"])
def test_dmon_gpu_index_must_be_an_index(index: str) -> None:
    with pytest.raises(parsers.ParseError, match="without a GPU index"):
        parsers.parse_dmon(_dmon("0 215 62 - 18", f"{index} 215 62 - 18"))


def test_dmon_units_line_decides_percent_columns() -> None:
    # fb in MB is not a share: 80000 passes; as a % column the same number would not
    text = "# gpu pwr fb\n# Idx W MB\n0 300 80000\n"
    assert parsers.parse_dmon(text)["per_gpu"][0]["fb"] == 80000.0
    with pytest.raises(parsers.ParseError, match=r"fb: 80000.0% is not a percentage"):
        parsers.parse_dmon("# gpu pwr fb\n# Idx W %\n0 300 80000\n")


@pytest.mark.parametrize(("value", "fragment"), [
    ("NaN", "invalid JSON"), ("Infinity", "invalid JSON"), ("1e999", "invalid JSON"),
    ("150", "gpus[0].sm: 150.0% is not a percentage"), ("-3", "gpus[0].sm: -3.0%"),
])
def test_amd_metric_usage_impossible(value: str, fragment: str) -> None:
    text = read("synthetic-amd-smi-metric-usage.json").replace(
        '"gfx_activity": {"value": 97', f'"gfx_activity": {{"value": {value}', 1)
    with pytest.raises(parsers.ParseError) as err:
        parsers.parse_amd_metric_usage(text)
    assert fragment in str(err.value)


def test_amd_metric_usage_deep_json_is_a_parse_error() -> None:
    with pytest.raises(parsers.ParseError, match="nested"):
        parsers.parse_amd_metric_usage("[" * 100_000 + "]" * 100_000)


@pytest.mark.parametrize(("old", "new", "fragment"), [
    ("3.50 98.0", "3.50 198.0", "util: 198.0% is not a percentage"),
    ("nvme0n1 420.0", "nvme0n1 -420.0", "r_per_s: -420.0 is negative"),
    ("nvme0n1 420.0", "nvme0n1 nan", "r_per_s: nan is not a finite number"),
    ("18.21 0.00", "118.21 0.00", "cpu.user: 118.21% is not a percentage"),
])
def test_iostat_impossible_reading(old: str, new: str, fragment: str) -> None:
    text = read("article-iostat-xz.txt")
    assert old in text
    with pytest.raises(parsers.ParseError) as err:
        parsers.parse_iostat(text.replace(old, new, 1))
    assert str(err.value).startswith("reports[0].") and fragment in str(err.value)


def test_mpstat_idle_above_100_is_refused() -> None:
    text = read("lab-mpstat-1-1.txt").replace("99.50", "199.50")
    with pytest.raises(parsers.ParseError, match=r"^idle: 199.5% is not a percentage"):
        parsers.parse_mpstat(text)
