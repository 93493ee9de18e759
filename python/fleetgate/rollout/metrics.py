"""Prometheus metrics of rollouts, in the text exposition format (version 0.0.4).

Two ways out: a node_exporter textfile that `rollout start/resume --metrics-file` rewrites as
the rollout moves, and `rollout serve-metrics`, a small /metrics endpoint over the journal.
Both render from the journal every time, never from counters kept in memory, so a scrape can
never disagree with `rollout status`, and a resumed controller picks up where the counts
were. Counting runs in SQLite (json_extract) so a rewrite stays cheap on a big rollout.

Cardinality stays bounded: the `rollout` label is the plan's name, which repeats run after
run, and the unique rollout id appears only on `fleetgate_rollout_info` (with the class and
the change, to join on). The endpoint exports one rollout per plan: the active one, or else
the last finished one, so two runs of a plan never double the series.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

from fleetgate.errors import BadInput, FleetgateError
from fleetgate.rollout.journal import (
    FAILED_HOST,
    HOST_STATES,
    ROLLOUT_STATES,
    TERMINAL_ROLLOUT,
    Journal,
    RolloutRow,
)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Smoke labels that are gates on a changed host. baseline/before/canary runs are measurements
# for the canary judge; their status decides nothing, so counting them would inflate fails.
GATE_LABELS = ("verify", "soak", "rollback-verify")  # three: the query has three placeholders
VERDICTS = ("pass", "fail", "inconclusive")
CANARY_VERDICTS = ("pass", "fail", "inconclusive", "skipped")
# The events after which the file is rewritten; ansible/batch/lease events change no metric.
TRIGGERS = frozenset({"rollout", "host", "smoke", "canary"})


def escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(v: float) -> str:
    if float(v).is_integer() and abs(v) < 1e15:
        return str(int(v))
    return repr(float(v))


@dataclass
class Family:
    name: str
    kind: str  # gauge | counter
    help: str
    samples: list[tuple[dict[str, str], float]] = field(default_factory=list)

    def add(self, value: float, **labels: str) -> None:
        self.samples.append((labels, value))

    def text(self) -> list[str]:
        # In the 0.0.4 text format a counter's HELP, TYPE and samples all carry `_total`.
        out = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]
        for labels, v in self.samples:
            lab = ",".join(f'{k}="{escape_label(x)}"' for k, x in labels.items())
            out.append(f"{self.name}{{{lab}}} {_number(v)}")
        return out


def _families() -> dict[str, Family]:
    fams = [
        Family("fleetgate_rollout_info", "gauge",
               "The rollout a plan's series describe: its id, class and change; always 1."),
        Family("fleetgate_rollout_state", "gauge",
               "1 for the rollout's current state, 0 for the others."),
        Family("fleetgate_rollout_wave", "gauge", "The wave the rollout is in (0: not started)."),
        Family("fleetgate_rollout_waves_total", "gauge", "Waves the rollout has."),
        Family("fleetgate_rollout_hosts", "gauge", "Hosts of the rollout by state."),
        Family("fleetgate_rollout_gate_verdicts_total", "counter",
               "Smoke gate verdicts on changed hosts (verify, soak, rollback-verify) by check."),
        Family("fleetgate_rollout_canary_verdicts_total", "counter",
               "Canary analysis verdicts, one per judged host (skipped: no baseline left)."),
        Family("fleetgate_rollout_canary_score", "gauge",
               "Score (0-100) of the latest canary verdict."),
        Family("fleetgate_rollout_canary_relative_shift", "gauge",
               "Relative shift of each metric's median in the latest canary verdict "
               "(candidate against reference; negative is lower)."),
        Family("fleetgate_rollout_halts_total", "counter", "Times the rollout halted."),
        Family("fleetgate_rollout_budget_failed", "gauge",
               "Failed hosts counted against the rollout's error budget."),
        Family("fleetgate_rollout_budget_tolerated", "gauge",
               "Failed hosts the rollout's error budget tolerates; one more halts it."),
        Family("fleetgate_rollout_start_timestamp_seconds", "gauge",
               "Unix time the rollout was created."),
        Family("fleetgate_rollout_duration_seconds", "gauge",
               "Seconds from the rollout's creation to its latest journal entry."),
        Family("fleetgate_rollout_last_update_timestamp_seconds", "gauge",
               "Unix time of the rollout's latest journal entry."),
    ]
    return {f.name.removeprefix("fleetgate_rollout_"): f for f in fams}


def change_label(art: dict[str, Any]) -> str:
    """The change in a few words, bounded: the playbook and what its target pins."""
    change = (art.get("plan") or {}).get("change") or {}
    t = change.get("target") or {}
    pins = ([f"kernel={t['kernel_release']}"] if t.get("kernel_release") else []) + [
        f"{k}={v}" for k, v in sorted((t.get("packages") or {}).items())] + [
        f"{k}={v}" for k, v in sorted((t.get("manifest") or {}).items())]
    return (Path(str(change.get("playbook", "?"))).stem + (" " + ",".join(pins) if pins
                                                           else ""))[:120]


def _collect(j: Journal, rid: str, fams: dict[str, Family]) -> None:
    row = j.rollout(rid)
    if row is None:
        return
    plan = row.name  # the bounded label; the id is only on the info metric
    art = row.artifact
    fams["info"].add(1, rollout=plan, id=rid,
                     **{"class": str(((art.get("plan") or {}).get("targets") or {})
                                     .get("class") or "")},
                     change=change_label(art))
    for s in ROLLOUT_STATES:
        fams["state"].add(1 if row.state == s else 0, rollout=plan, state=s)
    fams["wave"].add(row.wave, rollout=plan)
    fams["waves_total"].add(len(art.get("waves", [])), rollout=plan)
    hosts = Counter(r.state for r in j.hosts(rid).values())
    for s in HOST_STATES:
        fams["hosts"].add(hosts.get(s, 0), rollout=plan, state=s)
    gates = {(str(c), str(v)): int(n) for c, v, n in j.query(
        "SELECT json_extract(data, '$.result.check'), json_extract(data, '$.result.status'),"
        " count(*) FROM events WHERE rollout_id=? AND kind='smoke' AND"
        " json_extract(data, '$.label') IN (?, ?, ?) GROUP BY 1, 2", (rid, *GATE_LABELS))}
    # Every planned check gets all three series, so rate() works from the first verdict on.
    checks = sorted({*art["plan"]["gates"]["checks"], *(c for c, _ in gates)})
    for c in checks:
        for v in VERDICTS:
            fams["gate_verdicts_total"].add(gates.get((c, v), 0), rollout=plan, check=c,
                                            verdict=v)
    canary = {str(v): int(n) for v, n in j.query(
        "SELECT coalesce(json_extract(data, '$.verdict.outcome'), 'skipped'), count(*)"
        " FROM events WHERE rollout_id=? AND kind='canary' GROUP BY 1", (rid,))}
    for v in CANARY_VERDICTS:
        fams["canary_verdicts_total"].add(canary.get(v, 0), rollout=plan, verdict=v)
    latest = j.query("SELECT json_extract(data, '$.verdict') FROM events WHERE rollout_id=? AND"
                     " kind='canary' AND json_extract(data, '$.verdict') IS NOT NULL"
                     " ORDER BY seq DESC LIMIT 1", (rid,))
    if latest:
        verdict = json.loads(latest[0][0])
        if isinstance(verdict.get("score"), int | float):
            fams["canary_score"].add(float(verdict["score"]), rollout=plan)
        for m in verdict.get("metrics", []):
            if isinstance(m.get("relative_shift"), int | float):
                fams["canary_relative_shift"].add(float(m["relative_shift"]), rollout=plan,
                                                  metric=str(m["name"]))
    halts = j.query("SELECT count(*) FROM events WHERE rollout_id=? AND kind='rollout' AND"
                    " json_extract(data, '$.state')='halted'", (rid,))[0][0]
    fams["halts_total"].add(int(halts), rollout=plan)
    fams["budget_failed"].add(sum(hosts.get(s, 0) for s in FAILED_HOST), rollout=plan)
    fams["budget_tolerated"].add(int(art["limits"]["total"]), rollout=plan)
    last = max(row.updated_at, j.query("SELECT max(ts) FROM events WHERE rollout_id=?",
                                       (rid,))[0][0] or 0.0)
    fams["start_timestamp_seconds"].add(row.created_at, rollout=plan)
    fams["duration_seconds"].add(round(last - row.created_at, 3), rollout=plan)
    fams["last_update_timestamp_seconds"].add(last, rollout=plan)


def exported(rows: Sequence[RolloutRow]) -> list[str]:
    """One rollout per plan: its active one (the latest, if several), else its last finished
    one. Everything older stays in the journal and out of Prometheus."""
    pick: dict[str, RolloutRow] = {}
    for r in rows:
        cur = pick.get(r.name)
        active = r.state not in TERMINAL_ROLLOUT
        cur_active = cur is not None and cur.state not in TERMINAL_ROLLOUT
        if cur is None or (active, r.created_at) >= (cur_active, cur.created_at):
            pick[r.name] = r
    return [r.id for r in sorted(pick.values(), key=lambda r: r.created_at)]


def render(j: Journal, rids: Sequence[str]) -> str:
    fams = _families()
    rows = [r for r in (j.rollout(x) for x in rids) if r is not None]
    for rid in exported(rows):  # two ids of one plan would be two copies of every series
        _collect(j, rid, fams)
    # Families without samples are left out: a textfile should not announce empty metrics.
    return "\n".join(line for f in fams.values() if f.samples for line in f.text()) + "\n"


# ---------------------------------------------------------------------------- textfile

def check_path(path: Path) -> Path:
    """A path node_exporter's textfile collector will read, in a directory that exists."""
    if path.suffix != ".prom":
        raise BadInput("node_exporter's textfile collector reads only *.prom files",
                       source="--metrics-file", field=str(path))
    if not path.parent.is_dir():
        raise BadInput("no such directory", source="--metrics-file", field=str(path.parent))
    if path.is_dir():
        raise BadInput("is a directory", source="--metrics-file", field=str(path))
    if not os.access(path.parent, os.W_OK):
        # The file is replaced by rename, so it is the directory that must be writable.
        raise BadInput("directory not writable", source="--metrics-file",
                       field=str(path.parent))
    return path


def write_atomic(path: Path, text: str) -> None:
    """Write beside the target, then rename over it: a scrape sees the old file or the new
    one, never half of one (node_exporter would drop a half-written file with an error)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide it from a node_exporter user
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class MetricsFile:
    """A journal listener that rewrites one rollout's textfile after each relevant event."""

    def __init__(self, j: Journal, rid: str, path: Path):
        self.j, self.rid, self.path = j, rid, path
        # The heartbeat thread may commit too; one writer at a time keeps renames ordered.
        self._lock = threading.Lock()

    def __call__(self, event: dict[str, Any]) -> None:
        if event.get("rollout_id") == self.rid and event.get("kind") in TRIGGERS:
            self.write()

    def write(self) -> None:
        with self._lock:
            write_atomic(self.path, render(self.j, [self.rid]))


def attach(j: Journal, rid: str, path: Path) -> MetricsFile:
    m = MetricsFile(j, rid, check_path(path))
    m.write()  # the file exists (and says where the rollout stands) before the first event
    j.listeners.append(m)
    return m


# ---------------------------------------------------------------------------- serving

def check_bind(bind: str) -> str:
    try:
        ipaddress.ip_address(bind)
    except ValueError:
        raise BadInput("not an IP address (e.g. 127.0.0.1, ::1, 0.0.0.0)", source="--bind",
                       field=bind) from None
    return bind


def make_server(j: Journal, rids: Sequence[str], bind: str, port: int,
                log: Callable[[str], None] | None = None) -> HTTPServer:
    """An HTTP server answering GET /metrics for `rids` (every rollout when empty)."""
    for rid in rids:
        if j.rollout(rid) is None:
            raise BadInput("no such rollout in the journal", source=str(j.path), field=rid)
    say = log or (lambda _m: None)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != "/metrics":
                self._send(404, "text/plain; charset=utf-8", b"see /metrics\n")
                return
            try:
                ids = list(rids) or exported(j.rollouts())
                body = render(j, ids).encode()
            except Exception as exc:  # a scrape error must not kill the server
                say(f"metrics: {type(exc).__name__}: {exc}")
                self._send(500, "text/plain; charset=utf-8", b"journal unreadable\n")
                return
            self._send(200, CONTENT_TYPE, body)

        def _send(self, code: int, ctype: str, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # one line per scrape every 15s is noise, not a log

    class Server(HTTPServer):
        address_family = socket.AF_INET6 if ":" in bind else socket.AF_INET

    try:
        return Server((check_bind(bind), port), Handler)
    except OSError as exc:
        raise FleetgateError(f"cannot listen: {exc.strerror or exc}",
                             source=f"{bind}:{port}") from None


def serve(j: Journal, rids: Sequence[str], bind: str, port: int,
          log: Callable[[str], None]) -> None:
    server = make_server(j, rids, bind, port, log)
    shown = f"[{bind}]" if ":" in bind else bind
    log(f"serving metrics of {', '.join(rids) or 'every rollout'} on "
        f"http://{shown}:{server.server_port}/metrics (Ctrl-C stops)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
