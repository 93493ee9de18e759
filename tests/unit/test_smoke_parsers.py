"""Parsers against every real capture in tests/fixtures (nvidia-smi, rocm-smi, lscpu), and
against hand-written realistic outputs (tests/fixtures/synthetic/) where no capture exists:
Xid lines, dkms status, all_reduce_perf tables, amd-smi's two JSON shapes, rocminfo,
nvidia-container-cli and CDI lists, /proc/driver/nvidia/version and --query-gpu CSV."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fleetgate.smoke import parsers as p

FIX = Path(__file__).resolve().parents[1] / "fixtures"
SMI = FIX / "nvidia-smi"
SYN = FIX / "synthetic"


def smi(name: str) -> dict[str, Any]:
    return p.parse_nvidia_smi_xml((SMI / name).read_text())


# --------------------------------------------------------------------------- real captures

@pytest.mark.parametrize(("name", "schema", "driver", "cuda", "attached", "model", "pci"), [
    ("a100-sxm4-v12.xml", "v12", "535.54.03", "12.2", 4, "NVIDIA A100-SXM4-80GB", "10de:20b2"),
    ("tesla-t4.xml", "v11", "515.105.01", "11.7", 1, "Tesla T4", "10de:1eb8"),
    ("gtx-1660-ti.xml", None, "418.43", "10.1", 1, "Graphics Device", "10de:2184"),
    ("rtx-3080-v13.xml", "v13", "595.58.03", "13.2", 1, "NVIDIA GeForce RTX 3080", "10de:2216"),
    ("rtx-4000-sff-ada-v13.xml", "v13", "595.84", "13.2", 1,
     "NVIDIA RTX 4000 SFF Ada Generation", "10de:27b0"),
])
def test_nvidia_smi_identity(name: str, schema: str | None, driver: str, cuda: str,
                             attached: int, model: str, pci: str) -> None:
    d = smi(name)
    assert (d["schema"], d["driver_version"], d["cuda_version"]) == (schema, driver, cuda)
    assert d["attached_gpus"] == attached
    assert d["gpu_count"] == len(d["gpus"]) == 1  # every capture lists exactly one <gpu>
    g = d["gpus"][0]
    assert (g["name"], g["pci_id"]) == (model, pci)
    assert g["uuid"].startswith("GPU-")
    assert g["pci_bus_id"].startswith("00000000:")


def test_a100_ecc_mig_and_no_row_remapper_report() -> None:
    g = smi("a100-sxm4-v12.xml")["gpus"][0]
    assert g["ecc"]["mode_current"] is True and g["ecc"]["mode_pending"] is True
    assert g["ecc"]["volatile"] == {"sram_correctable": 0, "sram_uncorrectable": 0,
                                    "dram_correctable": 0, "dram_uncorrectable": 0}
    assert g["ecc"]["uncorrectable_volatile"] == 0 and g["ecc"]["uncorrectable_aggregate"] == 0
    assert g["mig"]["current"] is True and g["mig"]["pending"] is True
    assert [m["gpu_instance_id"] for m in g["mig"]["devices"]] == [3, 4, 5, 6]
    assert {m["sm_count"] for m in g["mig"]["devices"]} == {14}
    assert {m["memory_total_mib"] for m in g["mig"]["devices"]} == {19968}
    assert g["remapped_rows"] is None  # "N/A" with MIG enabled
    assert g["reset_required"] is False and g["drain_and_reset_recommended"] is False
    assert g["clock_events"]["source_tag"] == "clocks_event_reasons"
    assert g["clock_events"]["active"] == []
    assert g["memory_total_mib"] == 81920 and g["power_limit_w"] == 500.0


def test_t4_schema_v11_throttle_reasons_retired_pages_and_narrow_link() -> None:
    g = smi("tesla-t4.xml")["gpus"][0]
    assert g["clock_events"]["source_tag"] == "clocks_throttle_reasons"  # renamed in 535
    assert set(g["clock_events"]["reasons"]) >= {"gpu_idle", "hw_slowdown", "sw_power_cap"}
    assert g["ecc"]["mode_current"] is True and g["ecc"]["uncorrectable_volatile"] == 0
    assert g["retired_pages"] == {"single_bit": 0, "double_bit": 0, "pending": False}
    assert g["mig"]["current"] is None  # N/A: no MIG on Turing
    assert (g["pcie"]["width_current"], g["pcie"]["width_max"]) == (8, 16)
    assert g["power_draw_w"] == 26.78


def test_gtx_1660_without_dtd_and_without_ecc() -> None:
    d = smi("gtx-1660-ti.xml")
    g = d["gpus"][0]
    assert g["ecc"]["mode_current"] is None and g["ecc"]["uncorrectable_volatile"] is None
    assert g["clock_events"]["active"] == ["gpu_idle"]
    assert g["retired_pages"]["pending"] is None


@pytest.mark.parametrize("name", ["rtx-3080-v13.xml", "rtx-4000-sff-ada-v13.xml"])
def test_v13_split_sram_counters_and_new_fields(name: str) -> None:
    g = smi(name)["gpus"][0]
    assert g["ecc"]["channel_repair_pending"] is False
    assert g["ecc"]["tpc_repair_pending"] is False
    assert g["recovery_action"] is None  # "None"
    assert g["clock_events"]["source_tag"] == "clocks_event_reasons"


def test_v13_ada_remapped_rows_and_ecc_disabled() -> None:
    g = smi("rtx-4000-sff-ada-v13.xml")["gpus"][0]
    assert g["ecc"]["mode_current"] is False
    assert g["remapped_rows"] == {"correctable": 0, "uncorrectable": 0, "pending": False,
                                  "failure": False, "histogram": {
                                      "max": 96, "high": 0, "partial": 0, "low": 0, "none": 0}}
    assert g["clock_events"]["active"] == ["gpu_idle"]
    assert g["persistence_mode"] is True


def test_v13_sram_uncorrectable_is_parity_plus_secded() -> None:
    text = (SMI / "rtx-3080-v13.xml").read_text()
    text = text.replace("<sram_uncorrectable_parity>N/A</sram_uncorrectable_parity>",
                        "<sram_uncorrectable_parity>2</sram_uncorrectable_parity>", 1)
    text = text.replace("<sram_uncorrectable_secded>N/A</sram_uncorrectable_secded>",
                        "<sram_uncorrectable_secded>1</sram_uncorrectable_secded>", 1)
    g = p.parse_nvidia_smi_xml(text)["gpus"][0]
    assert g["ecc"]["volatile"]["sram_uncorrectable"] == 3
    assert g["ecc"]["uncorrectable_volatile"] == 3


def test_pre_ampere_single_double_bit_schema() -> None:
    # Schema <= v10 layout (synthetic: no such capture here), read from the T4 capture.
    text = (SMI / "tesla-t4.xml").read_text()
    start = text.index("<ecc_errors>")
    end = text.index("</ecc_errors>") + len("</ecc_errors>")
    old = ("<ecc_errors><volatile><single_bit><device_memory>0</device_memory><total>5</total>"
           "</single_bit><double_bit><device_memory>1</device_memory><total>1</total>"
           "</double_bit></volatile><aggregate><single_bit><total>7</total></single_bit>"
           "<double_bit><total>2</total></double_bit></aggregate></ecc_errors>")
    g = p.parse_nvidia_smi_xml(text[:start] + old + text[end:])["gpus"][0]
    assert g["ecc"]["volatile"]["dram_correctable"] == 5
    assert g["ecc"]["uncorrectable_volatile"] == 1 and g["ecc"]["uncorrectable_aggregate"] == 2


@pytest.mark.parametrize(("name", "count", "driver", "model", "pci"), [
    ("mi100_rocm602.json", 4, "6.3.6", "Arcturus GL-XL [Instinct MI100]", "1002:738c"),
    ("rx6700xt_rocm612.json", 1, "6.3.6", "Navi 22 [Radeon RX 6700/6700 XT / 6800M]",
     "1002:73df"),
    ("vega-20-WKS-GL-XE.json", 1, "5.9.17", "Radeon Instinct MI50 32GB", "1002:66a1"),
])
def test_rocm_smi_real_captures(name: str, count: int, driver: str, model: str,
                                pci: str) -> None:
    d = p.parse_rocm_smi_json((FIX / "rocm-smi" / name).read_text())
    assert (d["gpu_count"], d["driver_version"]) == (count, driver)
    assert {g["name"] for g in d["gpus"]} == {model}
    assert {g["pci_id"] for g in d["gpus"]} == {pci}
    assert [g["index"] for g in d["gpus"]] == list(range(count))
    assert all(g["pci_bus"] and g["vbios_version"] for g in d["gpus"])


def test_rocm_smi_mi100_details() -> None:
    d = p.parse_rocm_smi_json((FIX / "rocm-smi" / "mi100_rocm602.json").read_text())
    g = d["gpus"][0]
    assert g["pci_bus"] == "0000:83:00.0" and g["vram_total_bytes"] == 34342961152
    assert g["pcie_replay_count"] == 0 and g["power_max_w"] == 290.0
    assert len({x["unique_id"] for x in d["gpus"]}) == 4


@pytest.mark.parametrize("name", ["lscpu-amd-epyc-kvm.json", "lscpu-amd-epyc-kvm.txt"])
def test_lscpu_real_capture_json_and_text(name: str) -> None:
    d = p.parse_lscpu((FIX / "cpu" / name).read_text())
    assert (d["architecture"], d["cpus"], d["model_name"]) == ("x86_64", 2, "AMD EPYC")
    assert d["sockets"] == 1 and d["numa_nodes"] == 1 and d["hypervisor"] == "KVM"
    assert {"avx2", "avx512f"} <= set(d["simd"])


def test_cpuinfo_of_this_machine() -> None:
    d = p.parse_cpuinfo(Path("/proc/cpuinfo").read_text())
    assert d["processors"] >= 1 and sum(d["models"].values()) == d["processors"]


# --------------------------------------------------------------------------- synthetic

def test_kernel_log_xids_with_fatal_table() -> None:
    d = p.parse_kernel_log((SYN / "dmesg-xid.txt").read_text())
    assert [x["xid"] for x in d["xids"]] == [13, 48, 79]
    assert d["fatal_xids"] == [48, 79]
    by = {x["xid"]: x for x in d["xids"]}
    assert by[79]["pci"] == "0000:3b:00" and by[79]["message"] == "GPU has fallen off the bus."
    assert by[79]["severity"] == "fatal" and by[13]["severity"] == "app"
    assert by[48]["pid"] == "1234" and by[13]["pid"] == "<unknown>"
    assert d["fatal_events"] == ["machine-check"]
    assert 79 in p.FATAL_XIDS and 13 not in p.FATAL_XIDS


def test_kernel_log_clean() -> None:
    d = p.parse_kernel_log("[    0.000000] Linux version 6.1.0-55-amd64\n")
    assert d["xid_count"] == 0 and d["fatal_xids"] == [] and d["fatal_events"] == []


def test_nvidia_module_version_and_flavour() -> None:
    open_ = p.parse_nvidia_version((SYN / "nvidia-version-open.txt").read_text())
    prop = p.parse_nvidia_version((SYN / "nvidia-version-proprietary.txt").read_text())
    assert open_["version"] == "580.95.05" and open_["flavour"] == "open"
    assert prop["version"] == "535.261.03" and prop["flavour"] == "proprietary"
    assert prop["gcc"] and prop["gcc"].startswith("gcc version 12.2.0")


def test_query_gpu_csv() -> None:
    rows = p.parse_nvidia_smi_csv((SYN / "nvidia-smi-query-gpu.csv").read_text())
    assert [r["index"] for r in rows] == [0, 1]
    assert rows[0]["pci_id"] == "10de:2335" and rows[0]["name"] == "NVIDIA H200"
    assert rows[0]["ecc.mode.current"] is True and rows[0]["mig.mode.current"] is False
    assert rows[1]["mig.mode.current"] is None  # [N/A]


def test_dkms_status_both_formats() -> None:
    three = p.parse_dkms_status((SYN / "dkms-status.txt").read_text())
    assert [(e["name"], e["version"], e["kernel"], e["state"]) for e in three] == [
        ("nvidia", "580.95.05", "6.1.0-55-amd64", "installed"),
        ("nvidia", "580.95.05", "6.1.0-57-amd64", "built"),
        ("vpoll", "0.1", "6.1.0-55-cloud-amd64", "installed"),
        ("fgbroken", "1.0", None, "added")]
    assert three[2]["warnings"] == ["WARNING! Diff between built and installed module!"]
    two = p.parse_dkms_status((SYN / "dkms-status-2x.txt").read_text())
    assert two[0]["name"] == "nvidia-current" and two[0]["version"] == "535.261.03"
    assert two[1]["warnings"] == ["original_module exists"]
    assert p.parse_dkms_status("") == []


def test_all_reduce_perf_uses_the_table_not_the_average() -> None:
    d = p.parse_all_reduce_perf((SYN / "all_reduce_perf-h100x8.txt").read_text())
    assert d["ranks"] == 8 and len(d["rows"]) == 4
    assert d["largest_size_bytes"] == 17179869184
    assert d["busbw_gbps"] == 439.73 and d["algbw_gbps"] == 251.28
    assert d["avg_busbw_reported_gbps"] == 329.435  # reported, never used as the figure
    assert d["wrong"] == 0 and d["checked"] is True
    for row in d["rows"]:  # busbw = algbw * 2(n-1)/n, as nccl-tests defines it
        half = row["in_place"]
        assert half["busbw_gbps"] == pytest.approx(half["algbw_gbps"] * 2 * 7 / 8, rel=1e-3)


def test_all_reduce_perf_wrong_results_and_unchecked_runs() -> None:
    d = p.parse_all_reduce_perf((SYN / "all_reduce_perf-wrong.txt").read_text())
    assert d["wrong"] == 4096 and d["ranks"] == 2
    unchecked = ("  1048576  262144  float  sum  -1  30.1  34.84  60.96  N/A  29.8  35.19  "
                 "61.58  N/A\n")
    u = p.parse_all_reduce_perf(unchecked)
    assert u["wrong"] is None and u["checked"] is False


def test_amd_smi_list_shape() -> None:
    d = p.parse_amd_smi_json((SYN / "amd-smi-static-list.json").read_text())
    assert d["gpu_count"] == 2 and d["driver_version"] == "6.12.12"
    g = d["gpus"][0]
    assert (g["name"], g["pci_id"], g["pci_bus"], g["gfx_version"]) == (
        "AMD Instinct MI300X", "1002:74a1", "0000:0c:00.0", "gfx942")


def test_amd_smi_gpu_data_shape_with_value_unit_counters() -> None:
    text = "WARNING: amd-smi is running as root\n" + (
        SYN / "amd-smi-metric-ecc-gpu_data.json").read_text()
    d = p.parse_amd_smi_json(text)
    assert [g["ecc"] for g in d["gpus"]] == [
        {"correctable": 0, "uncorrectable": 0, "deferred": 0},
        {"correctable": 12, "uncorrectable": 2, "deferred": 0}]


def test_rocminfo_gpu_agents() -> None:
    d = p.parse_rocminfo((SYN / "rocminfo-mi300x.txt").read_text())
    assert (d["agent_count"], d["gpu_agent_count"]) == (3, 2)
    assert {a["marketing_name"] for a in d["gpu_agents"]} == {"AMD Instinct MI300X"}


def test_container_runtime_device_lists() -> None:
    cli = p.parse_nvidia_container_cli_info((SYN / "nvidia-container-cli-info.txt").read_text())
    assert (cli["nvrm_version"], cli["device_count"]) == ("580.95.05", 2)
    assert cli["devices"][1]["uuid"] == "GPU-1e5b3d2f-9b68-4e6e-ab4f-2a3c4d5e6f70"
    cdi = p.parse_cdi_list((SYN / "nvidia-ctk-cdi-list.txt").read_text())
    assert cdi["gpu_count"] == 2 and len(cdi["devices"]) == 5  # two by index, two by UUID, all


# --------------------------------------------------------------------------- bad input

@pytest.mark.parametrize(("kind", "text", "fragment"), [
    ("nvidia-smi-xml", "<html></html>", "not <nvidia_smi_log>"),
    ("nvidia-smi-xml", "not xml at all", "not XML"),
    ("nvidia-smi-xml", '<!DOCTYPE x [<!ENTITY a "aaaa">]><nvidia_smi_log/>', "entities"),
    ("nvidia-smi-csv", "", "empty"),
    ("nvidia-smi-csv", "a, b\n1, 2\n", "neither index nor uuid"),
    ("nvidia-smi-csv", "index, uuid\n0\n", "1 fields"),
    ("nvidia-version", "hello", "NVRM version"),
    ("rocm-smi", "[]", "object keyed by card"),
    ("rocm-smi", '{"system": {}}', "no cardN"),
    ("amd-smi", '{"foo": 1}', "neither a list"),
    ("amd-smi", "no json here", "no JSON document"),
    ("rocminfo", "nothing", "Agent N"),
    ("lscpu", "foo: bar\n", "Architecture"),
    ("cpuinfo", "", "processor"),
    ("dkms-status", "this is not dkms\n", "unrecognised dkms status line"),
    ("all-reduce-perf", "# only comments\n", "no all_reduce_perf result rows"),
])
def test_bad_input_is_one_line_parse_error(kind: str, text: str, fragment: str) -> None:
    with pytest.raises(p.ParseError) as err:
        p.parse(kind, text)
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_unknown_kind() -> None:
    with pytest.raises(p.ParseError, match="unknown kind"):
        p.parse("nvidia-smi-yaml", "")
