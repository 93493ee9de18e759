"""What an operator sees, through a pipe: full ids, versions and reasons, hosts grouped by
state and reason, next steps and exit codes for every rollout state, a history that is
readable, progress lines and heartbeats from following the journal, help that documents
itself. The CLI runs as a subprocess with stdout a pipe (no TTY), as in a CI job.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest
import typer

from fleetgate.cli.main import build
from fleetgate.rollout import progress
from fleetgate.rollout.journal import Journal
from tests.conftest import FLEETGATE, REPO, fleetgate
from tests.fixtures.rollout.journal_builder import HOSTILE, RID, WAVES, artifact, build_journal

ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    build_journal(tmp_path / "rollouts" / "journal.db")
    return tmp_path


def cli(state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # A narrow terminal width: piped output must still not cut anything.
    return fleetgate(*args, env={"FLEETGATE_STATE_DIR": str(state_dir), "COLUMNS": "60"})


def add_rollouts(state_dir: Path) -> None:
    """Beside the halted one: a rollout in each other state."""
    j = Journal(state_dir / "rollouts" / "journal.db")
    for rid, state in (("ab-1", "aborted"), ("ok-1", "completed"), ("run-1", "running"),
                       ("plan-1", "planned"), ("soak-1", "soaking")):
        j.create_rollout(rid, "driver-575", "/srv/inventory.yml", artifact(), WAVES)
        j.set_rollout(rid, state, wave=1, phase="applying" if state == "running" else "")
    j.close()


def test_piped_status_list_and_history_cut_nothing_and_group_hosts(state_dir: Path) -> None:
    add_rollouts(state_dir)
    p = cli(state_dir, "rollout", "list")
    assert p.returncode == 0, p.stderr
    assert re.search(rf"^{re.escape(RID)}\s+driver-575\s+halted\s+2\s+{ISO}\s+wave 2 budget "
                     r"exceeded: 2 failed > 1 tolerated; rollout budget exceeded: 2 failed > 1 "
                     r"tolerated$", p.stdout, re.M), p.stdout

    p = cli(state_dir, "rollout", "status", RID)
    assert p.returncode == 10, p.stderr  # halted, like `start`
    lines = p.stdout.splitlines()
    # The 260-character reason of gpu-a03, Ansible's message included, on one line, uncut.
    held = [x for x in lines if x.startswith("2 ") and "gpu-a03" in x]
    assert len(held) == 1 and held[0].endswith(HOSTILE), held
    # Three skipped hosts with one reason: one row.
    skipped = [x for x in lines if "skipped" in x and x.startswith("3 ")]
    assert len(skipped) == 1 and "gpu-b01, gpu-b02, gpu-b03" in skipped[0]
    assert "…" not in p.stdout
    fleet = lines[lines.index("fleet now:") + 1:lines.index("next:")]
    assert fleet == [
        "  1 changed and verified: gpu-a01 (applied and verified)",
        "  1 rolled back and verified on the old version: gpu-a02 (canary analysis failed "
        "(gemm.tflops): critical metric failed: gemm.tflops; rolled back and verified on the "
        "old version)",
        "  1 held out of service: gpu-a03 (canary analysis failed (gemm.tflops): critical "
        "metric failed: gemm.tflops; rollback failed: rollback failed at task 'Install the "
        f"pinned version' on gpu-a03: {HOSTILE})",
        "  3 untouched (skipped): gpu-b01, gpu-b02, gpu-b03 (rollout halted before this host "
        "started: wave 2 budget exceeded: 2 failed > 1 tolerated; rollout budget exceeded: 2 "
        "failed > 1 tolerated)"]
    nxt = lines[lines.index("next:") + 1:]
    assert nxt == [f"  fleetgate rollout explain {RID} --wave 2",
                   f"  fleetgate rollout history {RID} --kind host",
                   "  fleetgate diagnose -i /srv/inventory.yml --limit gpu-a03",
                   "  fleetgate rollout plan /srv/plans/driver-575.yml",
                   f"  fleetgate rollout report {RID} --html {RID}.html --md {RID}.md"]

    # Exit codes for every state, and -o json agreeing with --json.
    for rid, rc in (("ab-1", 11), ("ok-1", 0), ("run-1", 0), ("plan-1", 0), ("soak-1", 0)):
        got = cli(state_dir, "rollout", "status", rid, "-o", "json")
        assert got.returncode == rc, (rid, got.stderr)
        assert json.loads(got.stdout)["id"] == rid
    both = cli(state_dir, "rollout", "status", RID, "--json", "-o", "wide")
    assert both.returncode == 2 and "--json is -o json" in both.stderr

    hist = cli(state_dir, "rollout", "history", RID)
    assert hist.returncode == 0, hist.stderr
    kinds = {m.group(1) for m in re.finditer(rf"^#\d+ {ISO} (\w+)", hist.stdout, re.M)}
    assert {"rollout", "host", "canary"} <= kinds
    assert not kinds & {"batch", "smoke", "hoststate", "ansible"}
    assert all(re.match(rf"#\d+ {ISO} ", x) for x in hist.stdout.splitlines())
    assert "{'" not in hist.stdout and "['" not in hist.stdout  # no Python reprs
    verbose = cli(state_dir, "rollout", "history", RID, "--verbose")
    assert " batch w" in verbose.stdout and " smoke w" in verbose.stdout
    assert "{'" not in verbose.stdout and "['" not in verbose.stdout

    bad = cli(state_dir, "rollout", "history", RID, "--kind", "nonsense")
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.startswith("fleetgate: --kind: nonsense: unknown event kind (known: "
                                 "rollout, started, host, canary,")


def test_spec_validate_and_smoke_run_flags_piped(tmp_path: Path) -> None:
    p = fleetgate("spec", "validate", env={"COLUMNS": "40"})
    assert p.returncode == 0, p.stderr
    row = next(x for x in p.stdout.splitlines() if x.startswith("lab-vm "))
    assert re.search(r"\s6\.1\.0-\d+-cloud-amd64\s", row), row
    old = fleetgate("smoke", "run", "-i", "inventory.yml", "--json", str(tmp_path / "r.json"))
    assert old.returncode == 2 and "write them to a file with --out PATH" in old.stderr
    assert not (tmp_path / "r.json").exists()
    plan_o = fleetgate("rollout", "plan", "p.yml", "-o", str(tmp_path / "a.json"))
    assert plan_o.returncode == 2 and "write the artifact with --out PATH" in plan_o.stderr


def test_status_watch_without_a_tty_prints_a_line_per_change(tmp_path: Path) -> None:
    j = Journal(tmp_path / "rollouts" / "journal.db")
    j.create_rollout("watch-1", "driver-575", "/srv/inventory.yml", artifact(), WAVES)
    j.set_rollout("watch-1", "running", wave=1, phase="applying")
    proc = subprocess.Popen([str(FLEETGATE), "rollout", "status", "watch-1", "--watch"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "FLEETGATE_STATE_DIR": str(tmp_path),
                                 "FLEETGATE_HOME": str(REPO)}, cwd=REPO)
    assert proc.stdout is not None
    first = proc.stdout.readline()
    assert re.match(rf"{ISO} watch-1: running \(wave 1 of 3, applying\); hosts: 6 pending",
                    first), first
    j.set_host("watch-1", "gpu-a01", "applying")
    line = proc.stdout.readline()
    assert re.match(rf"{ISO} wave 1/3 gpu-a01 applying \[budget 0/1 failed\]$", line), line
    j.set_host("watch-1", "gpu-a01", "failed_held", "gate discovery fail: 7 of 8 GPUs")
    j.set_rollout("watch-1", "halted", reason="rollout budget exceeded")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 10, err
    assert re.search(rf"^{ISO} wave 1/3 gpu-a01 failed_held \(gate discovery fail: 7 of 8 "
                     r"GPUs\) \[budget 1/1 failed\]$", out, re.M), out
    assert re.search(r"rollout halted \(rollout budget exceeded\)", out)
    assert "next:" in out


def test_follower_lines_and_heartbeats_from_the_journal(tmp_path: Path) -> None:
    j, _ = build_journal(tmp_path / "j.db")
    got: list[dict[str, Any]] = []
    f = progress.Follower(j.path, RID, got.append, heartbeat_s=60, clock=lambda: 0.0)
    f.poll(j)
    events = {e["seq"]: e for e in j.events(RID)}
    assert got and all(r["ts"] == progress.iso(events[r["seq"]]["ts"]) for r in got)
    host = [r for r in got if r["event"] == "host"]
    assert len(host) == len(j.events(RID, kinds=("host",)))
    lines = [progress.text(r, 3) for r in got]
    assert any(re.fullmatch(rf"{ISO} wave 2/3 gpu-a02 canary FAIL score 50\.0 \(critical "
                            r"metric failed: gemm\.tflops; score 50\.0 \(pass >= 90, marginal "
                            r">= 60\)\) \[budget 0/1 failed\]", x) for x in lines), lines
    assert any(re.fullmatch(rf"{ISO} wave 1/3 gpu-a01 gate verify discovery pass \(as the class "
                            r"expects\) \[budget 0/1 failed\]", x) for x in lines)
    assert lines[-1].endswith("[budget 2/1 failed]")
    # Heartbeats: a host in a phase gets one at least every heartbeat_s, grouped by phase.
    t = progress.Tracker(tolerated=1, waves=3)
    t.hosts = {"lab-v01": ("applying", 1000.0, 1), "lab-v02": ("applying", 1000.0, 1),
               "lab-v03": ("pending", 0.0, 2)}
    t.rollout = ("running", "applying", 990.0, 1)
    assert progress.heartbeats(t, RID, 1059.0, 60) == []
    beats = progress.heartbeats(t, RID, 1130.0, 60)
    assert [progress.text(b, 3)[25:] for b in beats] == [
        "wave 1/3 lab-v01, lab-v02 applying… 2m10s elapsed [budget 0/1 failed]"]
    assert progress.heartbeats(t, RID, 1150.0, 60) == []  # not again before 60 s
    assert len(progress.heartbeats(t, RID, 1191.0, 60)) == 1
    # A soak with no host in flight beats for the rollout itself.
    t.hosts = {"lab-v01": ("healthy", 1200.0, 1)}
    t.rollout = ("soaking", "soak until 10:30:00Z", 1200.0, 1)
    soak = progress.heartbeats(t, RID, 1300.0, 60)
    assert [progress.text(b, 3)[25:] for b in soak] == [
        "wave 1/3 soak until 10:30:00Z… 100s elapsed [budget 0/1 failed]"]
    as_json = []
    progress.line_printer("json", 3, as_json.append)(got[0])
    assert json.loads(as_json[0])["seq"] == got[0]["seq"]


def _commands(group: click.Group, path: str = "fleetgate") -> list[tuple[str, click.Command]]:
    out: list[tuple[str, click.Command]] = []
    for name, cmd in group.commands.items():
        if isinstance(cmd, click.Group):
            out += _commands(cmd, f"{path} {name}")
        else:
            out.append((f"{path} {name}", cmd))
    return out


def test_every_command_documents_examples_and_exit_codes() -> None:
    root = typer.main.get_command(build())
    assert isinstance(root, click.Group)
    commands = _commands(root)
    assert len(commands) > 25
    for path, cmd in commands:
        text = cmd.help or ""
        assert "\nExamples:\n  $ fleetgate " in text, path
        assert "\n\nExit codes: 0 " in text, path
        prose = text.split("\n\nExamples:")[0]
        # Prose is one line per paragraph: the terminal wraps it, not the source.
        assert all("\n" not in para for para in prose.split("\n\n")), path
    # One output vocabulary: a command that prints JSON takes -o json|wide|table too.
    for path, cmd in commands:
        flags = {o for param in cmd.params for o in getattr(param, "opts", [])}
        assert "--json" not in flags or {"--output", "-o"} <= flags, path
    start = dict(commands)["fleetgate rollout start"].help or ""
    assert all(f"{code} " in start.split("Exit codes:")[1] for code in ("10", "11", "12"))
    v = fleetgate("--version")
    assert v.returncode == 0 and re.fullmatch(r"fleetgate \d+\.\d+\.\d+ \(git \S+\)\n", v.stdout)
    h = fleetgate("rollout", "start", "--help", env={"COLUMNS": "100"})
    assert "Examples:" in h.stdout and "12 another controller holds the lease" in \
        " ".join(h.stdout.replace("│", " ").split())


def test_status_watch_on_a_terminal_is_a_live_table_not_lines(tmp_path: Path) -> None:
    j = Journal(tmp_path / "rollouts" / "journal.db")
    j.create_rollout("tty-1", "driver-575", "/srv/inventory.yml", artifact(), WAVES)
    j.set_rollout("tty-1", "running", wave=1, phase="applying")
    primary, secondary = pty.openpty()
    proc = subprocess.Popen([str(FLEETGATE), "rollout", "status", "tty-1", "--watch"],
                            stdin=subprocess.DEVNULL, stdout=secondary, stderr=secondary,
                            env={**os.environ, "FLEETGATE_STATE_DIR": str(tmp_path),
                                 "FLEETGATE_HOME": str(REPO), "COLUMNS": "120",
                                 "TERM": "xterm"}, cwd=REPO)
    os.close(secondary)
    out = b""

    def read_until(done: Callable[[bytes], bool], limit: float = 60) -> None:
        nonlocal out
        deadline = time.monotonic() + limit
        while not done(out) and time.monotonic() < deadline:
            ready, _, _ = select.select([primary], [], [], 0.5)
            if ready:
                try:
                    out += os.read(primary, 65536)
                except OSError:  # the child closed the terminal
                    return

    read_until(lambda b: b"gpu-a01" in b)
    j.set_host("tty-1", "gpu-a01", "failed_held", "gate discovery fail: 7 of 8 GPUs")
    j.set_rollout("tty-1", "halted", reason="rollout budget exceeded")
    read_until(lambda b: proc.poll() is not None and b"halted" in b)
    proc.wait(30)
    os.close(primary)
    text = out.decode(errors="replace")
    assert proc.returncode == 10, text[-2000:]
    # rich's table borders and cursor control, not the timestamped lines a pipe gets.
    assert "│" in text or "┃" in text, text[-2000:]
    assert "\x1b[" in text
    assert not re.search(rf"^{ISO} ", text, re.M)
    assert "gate discovery fail: 7 of 8 GPUs" in text
