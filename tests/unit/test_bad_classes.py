"""The malformed-class corpus: every file in tests/fixtures/bad_classes must be rejected with
exactly the error its first line announces, as one `FILE: FIELD: REASON` line, both in-process
and through the real CLI (exit 2, one stderr line, never a traceback).

Header format, first line of each file:  # expect: <field path> :: <substring of the reason>
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fleetgate.errors import BadInput
from fleetgate.spec.loader import load_all, load_class, read_yaml

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
BAD_DIR = FIXTURES / "bad_classes"
BAD_FILES = sorted(p for p in BAD_DIR.iterdir() if p.suffix in (".yml", ".yaml"))
DUP_A = FIXTURES / "dup_classes" / "a"
DUP_B = FIXTURES / "dup_classes" / "b"

EXPECT_RE = re.compile(r"^# expect: (?P<field>.+?) :: (?P<reason>.+)$")


def expectation(path: Path) -> tuple[str, str]:
    first = path.read_text(encoding="utf-8").split("\n", 1)[0]
    m = EXPECT_RE.match(first)
    assert m, f"{path.name}: first line must be '# expect: FIELD :: REASON', got {first!r}"
    return m["field"], m["reason"]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fleetgate.cli.main", "spec", "validate", *args],
        capture_output=True, text=True, timeout=60, check=False)


def test_corpus_is_large_enough() -> None:
    assert len(BAD_FILES) >= 30


@pytest.mark.parametrize("path", BAD_FILES, ids=lambda p: p.stem)
def test_stem_matches_name_unless_that_is_the_case(path: Path) -> None:
    field, reason = expectation(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, RecursionError):
        return  # YAML-level cases never reach the name check
    if not isinstance(data, dict) or "name" not in data:
        return
    if field == "name" and "must live in" in reason:
        assert data["name"] != path.stem
    else:
        assert data["name"] == path.stem, "a bad-class file must be named after its class"


@pytest.mark.parametrize("path", BAD_FILES, ids=lambda p: p.stem)
def test_bad_class_in_process(path: Path) -> None:
    field, reason = expectation(path)
    with pytest.raises(BadInput) as info:
        load_class(path)
    line = info.value.one_line()
    assert "\n" not in line and "\r" not in line
    assert line.startswith(f"{path}: {field}: "), line
    assert reason in line, line
    assert info.value.exit_code == 2


@pytest.mark.parametrize("path", BAD_FILES, ids=lambda p: p.stem)
def test_bad_class_through_cli(path: Path) -> None:
    field, reason = expectation(path)
    proc = cli(str(path))
    assert "Traceback" not in proc.stdout and "Traceback" not in proc.stderr
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert proc.stderr.endswith("\n") and proc.stderr.count("\n") == 1
    assert lines[0].startswith(f"fleetgate: {path}: {field}: "), lines[0]
    assert reason in lines[0], lines[0]
    assert proc.stdout == ""


def test_directory_of_bad_classes_fails_on_first_file() -> None:
    proc = cli(str(BAD_DIR))
    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) == 1
    assert proc.stderr.startswith(f"fleetgate: {BAD_FILES[0]}: ")


# --- duplicate class names across directories ----------------------------------------------

def test_dup_fixtures_are_valid_alone() -> None:
    for d in (DUP_A, DUP_B):
        assert list(load_all([d])) == ["dup-name"]


def test_duplicate_class_name_in_process() -> None:
    with pytest.raises(BadInput) as info:
        load_all([DUP_A, DUP_B])
    line = info.value.one_line()
    assert line.startswith(f"{DUP_B / 'dup-name.yml'}: name: ")
    assert "duplicate class name 'dup-name'" in line
    assert str(DUP_A / "dup-name.yml") in line


def test_duplicate_class_name_through_cli() -> None:
    proc = cli(str(DUP_A), str(DUP_B))
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert "duplicate class name 'dup-name'" in lines[0]
    assert "Traceback" not in proc.stdout + proc.stderr


def test_same_file_twice_is_a_duplicate() -> None:
    f = DUP_A / "dup-name.yml"
    with pytest.raises(BadInput, match="duplicate class name"):
        load_all([f, f])


# --- matrix errors cite their source -------------------------------------------------------

@pytest.mark.parametrize("path", [p for p in BAD_FILES if "matrix rule" in expectation(p)[1]],
                         ids=lambda p: p.stem)
def test_matrix_rule_error_names_its_source(path: Path) -> None:
    with pytest.raises(BadInput) as info:
        load_class(path)
    line = info.value.one_line()
    assert "(source: " in line and line.endswith(")"), line


# --- YAML merge keys -----------------------------------------------------------------------

MERGED = FIXTURES / "merge_classes" / "nvidia-h100-merged.yml"


def test_merge_keys_are_accepted_and_merged_keys_overridden() -> None:
    nc = load_class(MERGED)
    assert (nc.runtime.engine, nc.runtime.version) == ("containerd", "1.6.20~ds1-1+deb12u2")
    assert nc.runtime.cdi is True  # merged in as false, overridden in the merging mapping
    proc = cli(str(MERGED))
    assert proc.returncode == 0 and "1 class(es) valid" in proc.stdout, proc.stderr


def test_merge_keys_do_not_hide_a_real_duplicate(tmp_path: Path) -> None:
    text = MERGED.read_text().replace("  cdi: true\n", "  cdi: true\n  cdi: false\n")
    f = tmp_path / MERGED.name
    f.write_text(text)
    with pytest.raises(BadInput, match="duplicate key 'cdi'"):
        load_class(f)


@pytest.mark.parametrize(("depth", "ok"), [(60, True), (70, False)])
def test_yaml_depth_limit(tmp_path: Path, depth: int, ok: bool) -> None:
    f = tmp_path / "deep.yml"
    f.write_text("x: " + "[" * depth + "]" * depth + "\n")
    if ok:
        assert read_yaml(f) is not None
    else:
        with pytest.raises(BadInput, match="nested deeper than 64 levels at line 1"):
            read_yaml(f)


def test_aliases_cannot_expand_past_the_size_limit(tmp_path: Path) -> None:
    # 2^25 values from 26 short lines (a "billion laughs"): refused while composing
    lines = ["a0: &a0 [x, x]"] + [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}]" for i in range(1, 26)]
    f = tmp_path / "laughs.yml"
    f.write_text("\n".join(lines) + "\n")
    with pytest.raises(BadInput, match="values once aliases are expanded"):
        read_yaml(f)


# --- every class in the repository is valid ------------------------------------------------

REPO_CLASSES = sorted({*REPO.glob("inventory/classes/*.yml"),
                       *REPO.glob("examples/*/classes/*.yml"),
                       *(FIXTURES / "classes").glob("*.yml"), MERGED})


@pytest.mark.parametrize("path", REPO_CLASSES, ids=lambda p: f"{p.parent.parent.name}/{p.stem}")
def test_repository_class_is_valid(path: Path) -> None:
    nc = load_class(path)
    assert nc.name == path.stem
