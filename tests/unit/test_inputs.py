"""Bad input that must never get past the door: FIFOs and devices as inputs (a read that would
block forever), documents nested past any parser's stack, NaN in JSON, a corrupt journal and a
state directory that is a file. In-process, and through the real CLI: exit 2, one line, in
seconds (a hang shows up as the subprocess timeout)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from pathlib import Path
from typing import Annotated

import pytest
from pydantic import BaseModel, Field, StringConstraints

from fleetgate.errors import BadInput
from fleetgate.inputs import (
    MAX_DEPTH,
    check_inventory_source,
    depth_exceeds,
    load_json,
    read_input,
)
from fleetgate.rollout.journal import Journal
from tests.conftest import REPO, fleetgate

DEEP_LISTS = "[" * 100_000 + "]" * 100_000


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "input.yml"
    os.mkfifo(path)
    return path


def one_line_exit_2(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


# --- read_input ------------------------------------------------------------------------------

def test_regular_file_and_a_symlink_to_one_are_read(tmp_path: Path) -> None:
    f = tmp_path / "a.yml"
    f.write_text("name: x\n")
    link = tmp_path / "b.yml"
    link.symlink_to(f)
    assert read_input(f) == read_input(link) == "name: x\n"


def test_fifo_is_refused_without_blocking(fifo: Path) -> None:
    with pytest.raises(BadInput, match=r"^.*input.yml: is a FIFO, not a regular file$"):
        read_input(fifo)


def test_symlink_to_a_fifo_is_refused(fifo: Path, tmp_path: Path) -> None:
    link = tmp_path / "link.yml"
    link.symlink_to(fifo)
    with pytest.raises(BadInput, match="a FIFO"):
        read_input(link)


@pytest.mark.parametrize(("path", "kind"), [("/dev/null", "a character device"),
                                            ("/dev/zero", "a character device")])
def test_devices_are_refused(path: str, kind: str) -> None:
    with pytest.raises(BadInput, match=kind):
        read_input(Path(path))


def test_directory_missing_oversized_and_binary(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="a directory"):
        read_input(tmp_path)
    with pytest.raises(BadInput, match="no such file"):
        read_input(tmp_path / "nope.yml")
    big = tmp_path / "big.json"
    big.write_text("x" * 101)
    assert read_input(big, max_bytes=101) == "x" * 101
    with pytest.raises(BadInput, match="larger than 100 bytes"):
        read_input(big, max_bytes=100)
    binary = tmp_path / "bin.yml"
    binary.write_bytes(b"name: \xff\xfe\n")
    with pytest.raises(BadInput, match=r"not UTF-8 text \(byte 6\)"):
        read_input(binary)


# --- load_json -------------------------------------------------------------------------------

@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999", "-1e999"])
def test_json_without_nan_or_infinity(literal: str) -> None:
    with pytest.raises(BadInput, match="invalid JSON") as err:
        load_json(f'{{"tflops": {literal}}}', "probe.json", what="probe output")
    assert err.value.one_line().startswith(
        f"probe.json: tflops: probe output: invalid JSON: {literal} ")
    assert load_json('{"tflops": 1e300}', "probe.json") == {"tflops": 1e300}


def test_a_number_that_is_not_one_is_named_by_where_it_sits() -> None:
    doc = '{"gemm.tflops": [0.01, 0.02], "runs": [{"samples": [1.0, 2.0, NaN]}, Infinity]}'
    with pytest.raises(BadInput) as err:
        load_json(doc, "samples.json")
    assert err.value.field == "runs[0].samples[2]"
    assert err.value.reason == "JSON: invalid JSON: NaN is not a JSON number"
    with pytest.raises(BadInput) as err:
        load_json("[1, -1e999]", "x.json")
    assert err.value.field == "[1]" and "-1e999 is out of range" in err.value.reason


def test_json_depth_at_and_past_the_limit() -> None:
    at = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert not depth_exceeds(load_json(at, "x"))
    for deeper in ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), DEEP_LISTS):
        with pytest.raises(BadInput, match="nested too deeply"):
            load_json(deeper, "x")


# --- inventory sources -----------------------------------------------------------------------

def test_inventory_files_directories_and_host_lists_pass(tmp_path: Path) -> None:
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text("x: 1\n")
    script = tmp_path / "dynamic.py"
    script.write_text("#!/bin/sh\necho '{}'\n")
    script.chmod(0o755)
    for source in (tmp_path, script, "host1,host2,"):
        check_inventory_source(source)


def test_fifo_as_inventory_or_inside_one_is_refused(tmp_path: Path, fifo: Path) -> None:
    with pytest.raises(BadInput, match="not a FIFO"):
        check_inventory_source(fifo)
    inv = tmp_path / "inv"
    (inv / "host_vars").mkdir(parents=True)
    os.mkfifo(inv / "host_vars" / "gpu-a01")
    with pytest.raises(BadInput, match="this is a FIFO") as err:
        check_inventory_source(inv)
    assert err.value.source == str(inv / "host_vars" / "gpu-a01")
    with pytest.raises(BadInput, match="a character device"):
        check_inventory_source("/dev/null")


# --- the CLI: exit 2 within 5 s, never a hang ----------------------------------------------

# {} is the input file: a class, a plan, a probe or tool output, a saved triage collection,
# judge samples, a smoke baseline.
INPUT_COMMANDS = [("spec", "validate", "{}"), ("rollout", "plan", "{}"),
                  ("smoke", "parse", "probe", "{}"), ("smoke", "parse", "rocm-smi", "{}"),
                  ("diagnose", "--from", "{}"), ("judge", "--baseline", "{}", "--canary", "{}"),
                  ("smoke", "run", "-i", "localhost,", "--baseline", "{}")]


# A blocked read waits forever; the CLI itself answers in ~1 s of CPU. The limit leaves room
# for a loaded 2-core CI machine, where starting the CLI alone has taken 4 s of wall time.
ANSWER_WITHIN_S = 15


@pytest.mark.parametrize("argv", INPUT_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_fifo_given_to_the_cli_is_refused_not_read(fifo: Path, argv: tuple[str, ...]) -> None:
    line = one_line_exit_2(fleetgate(*(a.format(fifo) for a in argv), timeout=ANSWER_WITHIN_S))
    assert f"{fifo}: is a FIFO, not a regular file" in line


@pytest.mark.parametrize("argv", [a for a in INPUT_COMMANDS if a[:2] != ("rollout", "plan")],
                         ids=lambda a: " ".join(a[:3]))
def test_deep_json_is_one_line_exit_2(tmp_path: Path, argv: tuple[str, ...]) -> None:
    # YAML is a superset of JSON: the same 100000 nested lists as a class file
    f = tmp_path / "deep.yml"
    f.write_text(DEEP_LISTS)
    line = one_line_exit_2(fleetgate(*(a.format(f) for a in argv), timeout=30))
    assert line.startswith(f"fleetgate: {f}: ") and "nested" in line


def test_nan_in_a_probe_output_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "probe.json"
    f.write_text('{"probe": "gemm", "backend": "cpu", "status": "ok", "duration_s": 1.0,'
                 ' "metrics": {"tflops": NaN}}')
    line = one_line_exit_2(fleetgate("smoke", "parse", "probe", str(f), timeout=30))
    assert "NaN is not a JSON number" in line


def test_negative_probe_duration_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "probe.json"
    f.write_text('{"probe": "gemm", "backend": "cpu", "status": "ok", "duration_s": -1.0}')
    line = one_line_exit_2(fleetgate("smoke", "parse", "probe", str(f), timeout=30))
    assert f"{f}: duration_s: " in line and "greater than or equal to 0" in line


# --- journal and state directory -------------------------------------------------------------

def test_garbage_journal_is_not_a_fleetgate_journal(tmp_path: Path) -> None:
    db = tmp_path / "journal.db"
    db.write_bytes(os.urandom(4096))
    with pytest.raises(BadInput, match=r"not a fleetgate journal \(file is not a database\)"):
        Journal(db)


def test_another_programs_database_is_not_a_fleetgate_journal(tmp_path: Path) -> None:
    db = tmp_path / "journal.db"
    with sqlite3.connect(db) as other:
        other.execute("CREATE TABLE rollouts(x)")
    with pytest.raises(BadInput, match="its table rollouts has no column"):
        Journal(db)


def test_fifo_journal_is_refused_before_sqlite_opens_it(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "journal.db")
    with pytest.raises(BadInput, match=r"not a fleetgate journal \(a FIFO\)"):
        Journal(tmp_path / "journal.db")


@pytest.mark.parametrize("wal", [False, True], ids=["rollback-journal", "wal"])
def test_another_programs_database_is_refused_as_it_was_found(tmp_path: Path,
                                                             wal: bool) -> None:
    db = tmp_path / "journal.db"
    with sqlite3.connect(db) as other:
        if wal:
            other.execute("PRAGMA journal_mode=WAL")
        other.execute("CREATE TABLE rollouts(x)")
        other.execute("INSERT INTO rollouts VALUES ('theirs')")
    other.close()
    db.chmod(0o644)
    before = db.read_bytes()
    with pytest.raises(BadInput, match="its table rollouts has no column"):
        Journal(db)
    # Read only: no table of ours added, no WAL switched on, no chmod, no files left beside it.
    assert db.read_bytes() == before
    assert db.stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["journal.db"]


def test_a_database_of_other_tables_is_not_a_journal(tmp_path: Path) -> None:
    db = tmp_path / "journal.db"
    with sqlite3.connect(db) as other:
        other.execute("CREATE TABLE users(name)")
    other.close()
    with pytest.raises(BadInput, match=r"its tables \(users\) are not a journal's"):
        Journal(db)
    with sqlite3.connect(db) as other:
        tables = other.execute("SELECT name FROM sqlite_master").fetchall()
    other.close()
    assert tables == [("users",)]


def test_new_and_reopened_journal_pass(tmp_path: Path) -> None:
    Journal(tmp_path / "journal.db").close()
    j = Journal(tmp_path / "journal.db")
    assert j.query("SELECT count(*) FROM rollouts") == [(0,)]
    j.close()


def test_corrupt_journal_through_the_cli(tmp_path: Path) -> None:
    (tmp_path / "rollouts").mkdir()
    (tmp_path / "rollouts" / "journal.db").write_bytes(b"garbage" * 1000)
    line = one_line_exit_2(fleetgate("rollout", "list", cwd=REPO, timeout=30,
                                     env={"FLEETGATE_STATE_DIR": str(tmp_path)}))
    assert "not a fleetgate journal (file is not a database)" in line


def test_state_dir_that_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "state"
    f.write_text("")
    line = one_line_exit_2(fleetgate("rollout", "list", cwd=REPO, timeout=30,
                                     env={"FLEETGATE_STATE_DIR": str(f)}))
    assert line == (f"fleetgate: {f}: FLEETGATE_STATE_DIR: the state directory is not a "
                    "directory")


# --- pydantic errors as one bounded line ---------------------------------------------------

def test_validated_turns_a_validation_error_into_one_line() -> None:
    from fleetgate.errors import validated
    from fleetgate.spec.schema import KernelSpec

    ok = validated(KernelSpec, {"abi": "6.1.0-55-amd64", "package_version": "6.1.192-1"}, "a")
    assert ok.abi == "6.1.0-55-amd64"
    with pytest.raises(BadInput) as err:
        validated(KernelSpec, {"abi": "6.1.0-55-amd64", "package_version": 6}, "plan.json",
                  prefix="plan.kernel")
    assert err.value.one_line().startswith("plan.json: plan.kernel.package_version: ")
    assert err.value.exit_code == 2


class _Share(BaseModel):
    """A union as plans have them: a count, or a percentage."""

    share: Annotated[int, Field(ge=1)] | Annotated[str, StringConstraints(pattern=r"^\d+%$")]
    shares: list[Annotated[int, Field(ge=1)] | Annotated[str, StringConstraints(max_length=3)]] = []


@pytest.mark.parametrize(("doc", "field", "reason"), [
    # The branch the value's type fits says what is wrong with it.
    ({"share": 0}, "share", "Input should be greater than or equal to 1"),
    ({"share": "ten"}, "share", "value 'ten' is not allowed"),
    ({"share": 1, "shares": [2, "1000%"]}, "shares[1]", "String should have at most 3"),
    # No branch fits: the types the value may have.
    ({"share": [1]}, "share", "Input should be a valid integer or a valid string, got list"),
])
def test_a_union_error_is_one_line_in_the_operators_terms(doc: dict[str, object], field: str,
                                                          reason: str) -> None:
    from pydantic import ValidationError

    from fleetgate.errors import validation_error

    with pytest.raises(ValidationError) as exc:
        _Share.model_validate(doc)
    err = validation_error(exc.value, "plan.yml")
    assert err.field == field
    assert err.reason.startswith(reason), err.reason
    assert "(and" not in err.reason  # one mistake, whatever pydantic counts per branch
    for internal in ("constrained-", "function-", "[type=", "int]", "str]"):
        assert internal not in err.one_line()


def test_two_mistakes_are_counted_as_two() -> None:
    from pydantic import ValidationError

    from fleetgate.errors import validation_error

    with pytest.raises(ValidationError) as exc:
        _Share.model_validate({"share": 0, "shares": [0]})
    assert validation_error(exc.value, "p").reason.endswith("(and 1 more)")


def test_a_huge_bad_value_is_capped_in_the_error_line() -> None:
    from fleetgate.errors import validated
    from fleetgate.spec.schema import KernelSpec

    with pytest.raises(BadInput) as err:
        validated(KernelSpec, {"abi": "x" * 100_000, "package_version": "1"}, "c.yml")
    line = err.value.one_line()
    assert "(100002 characters)" in line and len(line) < 400
