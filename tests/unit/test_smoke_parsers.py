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


# --------------------------------------------------------------------------- impossible values
# Each case is a real capture (or the synthetic table) changed in exactly one reading.

def _a100_with(old: str, new: str, *, after: str = "") -> str:
    text = (SMI / "a100-sxm4-v12.xml").read_text()
    start = text.index(after) if after else 0
    at = text.index(old, start)
    return text[:at] + new + text[at + len(old):]


def test_real_captures_pass_the_value_checks() -> None:
    for f in sorted(SMI.glob("*.xml")):
        assert p.check_values(smi(f.name)) is not None
    a100 = smi("a100-sxm4-v12.xml")["gpus"][0]
    assert (a100["memory_used_mib"], a100["memory_total_mib"]) == (50, 81920)


def test_negative_sram_count_cannot_cancel_a_dram_error() -> None:
    # sram -1 and dram +1 would sum to 0 uncorrectable errors: a broken GPU reading as clean
    text = _a100_with("<sram_uncorrectable>0</sram_uncorrectable>",
                      "<sram_uncorrectable>-1</sram_uncorrectable>", after="<ecc_errors>")
    text = text.replace("<dram_uncorrectable>0</dram_uncorrectable>",
                        "<dram_uncorrectable>1</dram_uncorrectable>", 1)
    with pytest.raises(p.ParseError, match=r"^gpus\[0\]\.ecc\.volatile\.sram_uncorrectable: -1 "
                                           r"is negative"):
        p.parse_nvidia_smi_xml(text)


def test_negative_gpu_level_ecc_count_is_refused_naming_the_field() -> None:
    text = _a100_with("<dram_correctable>0</dram_correctable>",
                      "<dram_correctable>-3</dram_correctable>", after="<ecc_errors>")
    with pytest.raises(p.ParseError, match=r"^gpus\[0\]\.ecc\.volatile\.dram_correctable: -3 "
                                           r"is negative"):
        p.parse_nvidia_smi_xml(text)


@pytest.mark.parametrize(("temp", "ok"), [("27 C", True), ("-20 C", True), ("400 C", False),
                                          ("-300 C", False)])
def test_temperature_within_what_a_sensor_reads(temp: str, ok: bool) -> None:
    text = _a100_with("<gpu_temp>27 C</gpu_temp>", f"<gpu_temp>{temp}</gpu_temp>")
    if ok:
        assert p.parse_nvidia_smi_xml(text)["gpus"][0]["temperature_c"] == int(temp.split()[0])
    else:
        with pytest.raises(p.ParseError, match=r"gpus\[0\]\.temperature_c: .* C is outside"):
            p.parse_nvidia_smi_xml(text)


def test_memory_used_above_total_is_refused() -> None:
    text = _a100_with("<used>50 MiB</used>", "<used>90000 MiB</used>")
    with pytest.raises(p.ParseError, match=r"gpus\[0\]\.memory_used_mib: 90000 is more than "
                                           r"memory_total_mib 81920"):
        p.parse_nvidia_smi_xml(text)


def test_negative_power_draw_is_refused() -> None:
    g = smi("tesla-t4.xml")["gpus"][0]
    assert g["power_draw_w"] == 26.78
    text = (SMI / "tesla-t4.xml").read_text().replace("26.78 W", "-26.78 W", 1)
    with pytest.raises(p.ParseError, match=r"power_draw_w: -26.78 is negative"):
        p.parse_nvidia_smi_xml(text)


ROCM = FIX / "rocm-smi"


def _mi100(**changes: Any) -> str:
    import json

    doc = json.loads((ROCM / "mi100_rocm602.json").read_text())
    doc["card0"].update(changes)
    return json.dumps(doc)


def test_rocm_smi_capture_passes_and_reads_vram_used() -> None:
    g = p.parse_rocm_smi_json(_mi100())["gpus"][0]
    assert (g["vram_used_bytes"], g["vram_total_bytes"]) == (6750208, 34342961152)


@pytest.mark.parametrize(("key", "value", "fragment"), [
    ("Temperature (Sensor junction) (C)", "-500.0", "temperature_junction_c: -500.0 C"),
    ("PCIe Replay Count", "-1", "pcie_replay_count: -1 is negative"),
    ("Average Graphics Package Power (W)", "-36.0", "power_average_w: -36.0 is negative"),
    ("VRAM Total Used Memory (B)", "34342961153", "vram_used_bytes: 34342961153 is more than"),
])
def test_rocm_smi_impossible_reading(key: str, value: str, fragment: str) -> None:
    with pytest.raises(p.ParseError) as err:
        p.parse_rocm_smi_json(_mi100(**{key: value}))
    assert fragment in str(err.value) and str(err.value).startswith("gpus[0].")


@pytest.mark.parametrize(("kind", "literal"), [
    ("rocm-smi", "NaN"), ("rocm-smi", "Infinity"), ("rocm-smi", "-Infinity"),
    ("rocm-smi", "1e999"), ("amd-smi", "NaN"), ("lscpu", "NaN"),
])
def test_json_nan_and_infinity_are_not_json(kind: str, literal: str) -> None:
    docs = {"rocm-smi": '{"card0": {"PCIe Replay Count": %s}}',
            "amd-smi": '[{"gpu": 0, "ecc": {"total_correctable_count": %s}}]',
            "lscpu": '{"lscpu": [{"field": "CPU(s):", "data": %s}]}'}
    with pytest.raises(p.ParseError, match="invalid JSON") as err:
        p.parse(kind, docs[kind] % literal)
    assert "\n" not in str(err.value)


def test_amd_smi_negative_ecc_count_is_refused() -> None:
    text = '[{"gpu": 0, "ecc": {"total_correctable_count": 0, "total_uncorrectable_count": -2}}]'
    with pytest.raises(p.ParseError, match=r"gpus\[0\]\.ecc\.uncorrectable: -2 is negative"):
        p.parse_amd_smi_json(text)


@pytest.mark.parametrize("kind", ["rocm-smi", "amd-smi", "lscpu"])
def test_deeply_nested_json_is_a_parse_error_not_a_recursion_error(kind: str) -> None:
    for depth in (100_000, 65):
        with pytest.raises(p.ParseError, match="nested"):
            nested = "[" * depth + "]" * depth
            p.parse(kind, nested if kind != "lscpu" else '{"lscpu": ' + nested + "}")


def test_json_depth_limit_boundary() -> None:
    assert p.loads_json("[" * 64 + "]" * 64, "x") is not None
    with pytest.raises(p.ParseError, match="deeper than 64"):
        p.loads_json("[" * 65 + "]" * 65, "x")


def _perf(old: str, new: str) -> str:
    text = (SYN / "all_reduce_perf-h100x8.txt").read_text()
    assert old in text
    return text.replace(old, new, 1)


@pytest.mark.parametrize(("new", "fragment"), [
    ("68421.1  251.09     nan", "busbw_gbps: nan is not a finite number"),
    ("68421.1  251.09     inf", "busbw_gbps: inf is not a finite number"),
    ("68421.1  251.09 -439.41", "busbw_gbps: -439.41 is negative"),
    ("-68421.1  251.09  439.41", "time_us: -68421.1 is negative"),
])
def test_all_reduce_perf_impossible_row(new: str, fragment: str) -> None:
    with pytest.raises(p.ParseError) as err:
        p.parse_all_reduce_perf(_perf("68421.1  251.09  439.41", new))
    assert str(err.value).startswith("rows[3].out_of_place.") and fragment in str(err.value)


def test_all_reduce_perf_unreadable_average_is_not_a_traceback() -> None:
    d = p.parse_all_reduce_perf(_perf("Avg bus bandwidth    : 329.435",
                                      "Avg bus bandwidth    : ."))
    assert d["avg_busbw_reported_gbps"] is None and d["busbw_gbps"] == 439.73


def test_check_values_rules() -> None:
    huge = 10**400  # too large for a float: still a (possible) count, not an OverflowError
    assert p.check_values({"temperature_c": -20, "big": huge}) == {"temperature_c": -20,
                                                                     "big": huge}
    assert p.check_values({"util": 100.0, "x": [0, 1.5]}, percent=frozenset({"util"}))
    with pytest.raises(p.ParseError, match=r"^util: 100.5% is not a percentage"):
        p.check_values({"util": 100.5}, percent=frozenset({"util"}))
    with pytest.raises(p.ParseError, match=r"^x\[1\]: -1 is negative"):
        p.check_values({"x": [0, -1]})
    with pytest.raises(p.ParseError, match=r"^a\.b: nan is not a finite number"):
        p.check_values({"a": {"b": float("nan")}})
    assert p.check_values({"flag": True, "name": "-1"}) == {"flag": True, "name": "-1"}
    signed = frozenset({"checksum"})
    doc = {"checksum": -0.25, "per_device": [{"checksum": -0.5}]}
    assert p.check_values(doc, signed=signed) == doc
    with pytest.raises(p.ParseError, match=r"^per_device\[0\]\.checksum_scale: -1 is negative"):
        p.check_values({"per_device": [{"checksum_scale": -1}]}, signed=signed)
    with pytest.raises(p.ParseError, match=r"^checksum: inf is not a finite number"):
        p.check_values({"checksum": float("inf")}, signed=signed)
