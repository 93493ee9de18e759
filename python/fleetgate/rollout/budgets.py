"""Error budgets: how many failed hosts a wave, the rollout and a failure domain tolerate, and
how many hosts may be in flight so that failing together cannot overshoot them.

Ansible's own `max_fail_percentage` counts per batch (serial), so 10% of a 5-host batch and
10% of the next batch can add up to far more than 10% of the fleet. Here failures are counted
across the whole wave, rollout and domain, and a batch never holds more hosts than the
smallest remaining budget + 1: even if every host in it fails, the rollout halts with its
budget exceeded by one failure, never by a batch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from fleetgate.rollout.journal import FAILED_HOST, HostRow
from fleetgate.rollout.plan import RolloutPlan, budget_count
from fleetgate.rollout.waves import Assignment


@dataclass(frozen=True)
class Limits:
    per_wave: list[int]
    total: int
    per_domain: dict[str, int]
    domain_key: str | None


def limits(plan: RolloutPlan, a: Assignment) -> Limits:
    b = plan.budgets
    per_domain: dict[str, int] = {}
    key = b.per_domain.key if b.per_domain is not None else None
    if b.per_domain is not None and key is not None:
        sizes = Counter(h.domains.get(key, "") for h in a.hosts.values())
        per_domain = {v: budget_count(b.per_domain.max_failed, n) for v, n in sizes.items()}
    return Limits([budget_count(b.per_wave.max_failed, len(w)) for w in a.waves],
                  budget_count(b.total.max_failed, len(a.hosts)), per_domain, key)


class Tally:
    """The budget counters of one rollout: failed hosts per wave, in all and per failure
    domain, and each wave's pending hosts in wave order. A controller keeps one for the
    rollout it owns, built from the journal's rows when it takes the rollout (Journal.own calls
    `reset`, also on resume after a crash) and moved with every host transition the journal
    commits (`move`), so a safe point and the next batch cost O(batch), not O(hosts): the
    journal stays the record, and a recount of its rows gives the same numbers."""

    def __init__(self, lim: Limits, a: Assignment,
                 rows: Mapping[str, HostRow] | None = None):
        self._lim, self._a = lim, a
        self._pos = {h: i for members in a.waves for i, h in enumerate(members)}
        self.reset(rows or {})

    def reset(self, rows: Mapping[str, HostRow]) -> None:
        """Counters recounted from `rows` (every host row of the rollout)."""
        self.failed_wave = [0] * len(self._a.waves)
        self.failed_total = 0
        self.failed_domain: Counter[str] = Counter()
        self.pending: list[dict[str, None]] = [{} for _ in self._a.waves]
        self._extra_failed_waves: Counter[int] = Counter()
        for members in self._a.waves:
            for h in members:
                r = rows.get(h)
                if r is not None and r.state == "pending":
                    self.pending[r.wave - 1][h] = None
        for r in rows.values():
            if r.state in FAILED_HOST:
                self._count(r, 1)

    def domain_of(self, host: str) -> str:
        """The host's value of the budget's failure domain key ("" without one)."""
        key = self._lim.domain_key
        h = self._a.hosts.get(host)
        return "" if key is None or h is None else h.domains.get(key, "")

    def _count(self, r: HostRow, n: int) -> None:
        if 1 <= r.wave <= len(self.failed_wave):
            self.failed_wave[r.wave - 1] += n
        else:  # a row of no planned wave (never written by fleetgate): counted, not lost
            self._extra_failed_waves[r.wave] += n
        self.failed_total += n
        if self._lim.domain_key is not None:
            d = self.domain_of(r.host)
            self.failed_domain[d] += n
            if not self.failed_domain[d]:
                del self.failed_domain[d]

    def move(self, old: HostRow, new: HostRow) -> None:
        """One committed transition of a host row (old -> new)."""
        if old.state in FAILED_HOST:
            self._count(old, -1)
        if new.state in FAILED_HOST:
            self._count(new, 1)
        if old.state == "pending" and new.state != "pending":
            if 1 <= old.wave <= len(self.pending):
                self.pending[old.wave - 1].pop(old.host, None)
        elif new.state == "pending" and old.state != "pending" and 1 <= new.wave <= len(
                self.pending):
            # Back to pending (reconcile after a crash): rare, so the wave's order is rebuilt.
            left = self.pending[new.wave - 1]
            left[new.host] = None
            self.pending[new.wave - 1] = dict.fromkeys(
                sorted(left, key=lambda h: self._pos.get(h, len(self._pos))))

    def failed_in_wave(self, wave: int) -> int:
        if 1 <= wave <= len(self.failed_wave):
            return self.failed_wave[wave - 1]
        return self._extra_failed_waves[wave]

    def snapshot(self) -> dict[str, object]:
        """Every counter, for comparing a kept tally with a recount."""
        return {"failed_wave": list(self.failed_wave), "failed_total": self.failed_total,
                "failed_domain": dict(self.failed_domain),
                "extra": {k: v for k, v in self._extra_failed_waves.items() if v},
                "pending": [list(p) for p in self.pending]}


def _tally(lim: Limits, a: Assignment, rows: Mapping[str, HostRow] | Tally) -> Tally:
    return rows if isinstance(rows, Tally) else Tally(lim, a, rows)


def breaches(lim: Limits, a: Assignment, rows: Mapping[str, HostRow] | Tally) -> list[str]:
    """Every budget exceeded (failed > tolerated), as a reason string. `rows`: the host rows,
    or the controller's Tally of them."""
    t = _tally(lim, a, rows)
    out: list[str] = []
    for k, allowed in enumerate(lim.per_wave, start=1):
        n = t.failed_in_wave(k)
        if n > allowed:
            out.append(f"wave {k} budget exceeded: {n} failed > {allowed} tolerated")
    if t.failed_total > lim.total:
        out.append(f"rollout budget exceeded: {t.failed_total} failed > {lim.total} tolerated")
    if lim.domain_key is not None:
        for value, n in sorted(t.failed_domain.items()):
            if n > lim.per_domain.get(value, 0):
                out.append(f"{lim.domain_key} {value} budget exceeded: {n} failed > "
                           f"{lim.per_domain.get(value, 0)} tolerated")
    return out


def next_batch(plan: RolloutPlan, lim: Limits, a: Assignment,
               rows: Mapping[str, HostRow] | Tally, wave: int) -> list[str]:
    """The pending hosts of `wave` to start now, at most concurrency, capped by every budget's
    remaining room + 1. `rows`: the host rows, or the controller's Tally of them."""
    t = _tally(lim, a, rows)
    room_wave = lim.per_wave[wave - 1] - t.failed_in_wave(wave)
    room_total = lim.total - t.failed_total
    cap = min(plan.concurrency, room_wave + 1, room_total + 1)
    if cap <= 0:
        return []
    room_domain: dict[str, int] = {}
    if lim.domain_key is not None:
        room_domain = {v: n - t.failed_domain.get(v, 0) for v, n in lim.per_domain.items()}
    batch: list[str] = []
    in_domain: Counter[str] = Counter()
    for h in t.pending[wave - 1]:
        if lim.domain_key is not None:
            d = t.domain_of(h)
            if in_domain[d] >= room_domain.get(d, 0) + 1:
                continue
            in_domain[d] += 1
        batch.append(h)
        if len(batch) >= cap:
            break
    return batch
