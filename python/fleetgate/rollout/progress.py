"""Progress of a running rollout, told by following its journal.

The controller already commits every transition before it acts; a follower reads what was
committed (its own SQLite connection: WAL lets it read beside the writer) and turns each new
event into one timestamped line, or one JSON object for a log shipper. While a host sits in a
phase, or the rollout soaks or waits, a heartbeat line says so at least every `heartbeat_s`,
so a CI runner's no-output timeout never mistakes a long kernel install for a hang.

Lines carry the journal's own timestamp of the transition (`ts`) and its sequence number, so
a reader can line them up with `rollout history`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetgate.isotime import duration, iso
from fleetgate.rollout.journal import FAILED_HOST, IN_FLIGHT, Journal

# Smoke labels that are gate verdicts on a changed host (the others are measurements).
GATE_LABELS = ("verify", "soak", "rollback-verify")
FOLLOWED = ("rollout", "host", "smoke", "canary", "approval_needed", "approve", "abort",
            "reconcile", "soak")
WAITING_PHASES = ("soaking", "awaiting approval", "measuring baseline", "waiting for window")


@dataclass
class Tracker:
    """What the follower knows so far: each host's state and since when, the budget."""

    tolerated: int
    waves: int
    hosts: dict[str, tuple[str, float, int]] = field(default_factory=dict)  # state, since, wave
    rollout: tuple[str, str, float, int] = ("planned", "", 0.0, 0)  # state, phase, since, wave
    last_beat: dict[str, float] = field(default_factory=dict)

    @property
    def failed(self) -> int:
        return sum(1 for s, _, _ in self.hosts.values() if s in FAILED_HOST)

    def budget(self) -> dict[str, int]:
        return {"failed": self.failed, "tolerated": self.tolerated}


def record(e: dict[str, Any], t: Tracker, rid: str) -> dict[str, Any] | None:
    """One journal event as one progress record (None: not worth a line)."""
    d = e["data"]
    kind = e["kind"]
    wave = e.get("wave") or None
    rec: dict[str, Any] = {"ts": iso(e["ts"]), "seq": e["seq"], "rollout": rid,
                           "event": kind, "wave": wave, "host": e.get("host")}
    if kind == "host" and e.get("host"):
        t.hosts[e["host"]] = (str(d.get("to")), float(e["ts"]), int(wave or 0))
        t.last_beat.pop(e["host"], None)
        rec.update(phase=d.get("to"), reason=d.get("reason") or "")
    elif kind == "rollout":
        t.rollout = (str(d.get("state")), str(d.get("phase") or ""), float(e["ts"]),
                     int(wave or 0))
        t.last_beat.pop("", None)
        rec.update(state=d.get("state"), phase=d.get("phase") or "",
                   reason=d.get("reason") or "")
        if d.get("batch"):
            rec["batch"] = d["batch"]
    elif kind == "smoke":
        if d.get("label") not in GATE_LABELS:
            return None
        r = d.get("result") or {}
        rec.update(gate=d.get("label"), check=r.get("check"), verdict=r.get("status"),
                   reason=r.get("reason") or "")
    elif kind == "canary":
        v = d.get("verdict") or {}
        rec.update(verdict=str(v.get("outcome", "skipped")), score=v.get("score"),
                   reason=v.get("reason") or d.get("reason") or "")
    elif kind == "soak":
        rec.update(state=d.get("state"))
    else:
        rec.update(reason=d.get("reason") or "", by=d.get("by"))
    rec["budget"] = t.budget()
    return rec


def text(rec: dict[str, Any], waves: int) -> str:
    """A record as one line: time, wave k/n, host, what happened, budget used."""
    where = (f" wave {rec['wave']}/{waves}" if rec.get("wave") else "") + (
        f" {rec['host']}" if rec.get("host") else "")
    ev = rec["event"]
    why = f" ({rec['reason']})" if rec.get("reason") else ""
    if ev == "host":
        what = f"{rec['phase']}{why}"
    elif ev == "rollout":
        what = f"rollout {rec['state']}" + (f" [{rec['phase']}]" if rec["phase"] else "") + why
        if rec.get("batch"):
            what += f": batch {', '.join(rec['batch'])}"
    elif ev == "smoke":
        what = f"gate {rec['gate']} {rec['check']} {rec['verdict']}{why}"
    elif ev == "canary":
        score = f" score {rec['score']:.1f}" if isinstance(rec.get("score"), float | int) \
            else ""
        what = f"canary {str(rec['verdict']).upper()}{score}{why}"
    elif ev == "heartbeat":
        what = f"{rec['phase']}… {rec['elapsed']} elapsed"
    elif ev == "soak":
        what = f"soak {rec['state']}"
    elif ev == "log":
        what = str(rec["text"])
    else:
        what = ev.replace("_", " ") + why + (f" by {rec['by']}" if rec.get("by") else "")
    b = rec.get("budget")
    budget = f" [budget {b['failed']}/{b['tolerated']} failed]" if b else ""
    return " ".join(f"{rec['ts']}{where} {what}{budget}".split())


def heartbeats(t: Tracker, rid: str, now: float, every_s: float) -> list[dict[str, Any]]:
    """Hosts that have sat in a phase for another `every_s`, grouped by phase and start, and
    the rollout itself when it waits with no host in flight."""
    due: dict[tuple[str, float, int], list[str]] = {}
    for h, (state, since, wave) in t.hosts.items():
        if state in IN_FLIGHT and now - max(since, t.last_beat.get(h, 0.0)) >= every_s:
            due.setdefault((state, since, wave), []).append(h)
            t.last_beat[h] = now
    out = [{"ts": iso(now), "rollout": rid, "event": "heartbeat", "wave": wave or None,
            "host": ", ".join(hs), "phase": f"{state}", "elapsed": duration(now - since),
            "budget": t.budget()} for (state, since, wave), hs in due.items()]
    state, phase, since, wave = t.rollout
    busy = any(s in IN_FLIGHT for s, _, _ in t.hosts.values())
    if (not busy and since and state in ("running", "soaking")
            and (phase in WAITING_PHASES or state == "soaking")
            and now - max(since, t.last_beat.get("", 0.0)) >= every_s):
        t.last_beat[""] = now
        out.append({"ts": iso(now), "rollout": rid, "event": "heartbeat", "wave": wave or None,
                    "host": None, "phase": phase or state, "elapsed": duration(now - since),
                    "budget": t.budget()})
    return out


class Follower:
    """A thread that follows one rollout's journal and hands each record to `emit`."""

    def __init__(self, path: Path, rid: str, emit: Callable[[dict[str, Any]], None], *,
                 heartbeat_s: float = 60.0, poll_s: float = 0.5, after: int = 0,
                 clock: Callable[[], float] = time.time):
        self.path, self.rid, self.emit = path, rid, emit
        self.heartbeat_s, self.poll_s, self.after, self.clock = heartbeat_s, poll_s, after, clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fleetgate-progress",
                                        daemon=True)
        j = Journal(path)
        try:
            row = j.rollout(rid)
            art: dict[str, Any] = row.artifact if row else {"limits": {"total": 0},
                                                            "waves": []}
            self.tracker = Tracker(int(art["limits"]["total"]), len(art["waves"]))
            # Start from what the journal already says, so a resume's heartbeats know how
            # long an in-flight host has been in its phase.
            for e in j.events(rid, kinds=("host", "rollout")):
                if e["seq"] <= after:
                    record(e, self.tracker, rid)
        finally:
            j.close()

    def start(self) -> Follower:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Drain what is committed, then end: the last transitions always get their line."""
        self._stop.set()
        self._thread.join(30)

    def poll(self, j: Journal) -> int:
        n = 0
        for e in j.events(self.rid, kinds=FOLLOWED, after=self.after):
            self.after = e["seq"]
            rec = record(e, self.tracker, self.rid)
            if rec is not None:
                self.emit(rec)
                n += 1
        for rec in heartbeats(self.tracker, self.rid, self.clock(), self.heartbeat_s):
            self.emit(rec)
            n += 1
        return n

    def _run(self) -> None:
        j = Journal(self.path)
        try:
            while not self._stop.is_set():
                self.poll(j)
                self._stop.wait(self.poll_s)
            self.poll(j)
        finally:
            j.close()


def line_printer(fmt: str, waves: int, write: Callable[[str], None]
                 ) -> Callable[[dict[str, Any]], None]:
    """`text`: one readable line per record; `json`: one JSON object per line."""
    if fmt == "json":
        return lambda rec: write(json.dumps(rec, sort_keys=True, default=str))
    return lambda rec: write(text(rec, waves))
