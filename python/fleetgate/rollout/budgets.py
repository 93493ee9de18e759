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


def _failed(rows: Mapping[str, HostRow]) -> list[HostRow]:
    return [r for r in rows.values() if r.state in FAILED_HOST]


def breaches(lim: Limits, a: Assignment, rows: Mapping[str, HostRow]) -> list[str]:
    """Every budget exceeded (failed > tolerated), as a reason string."""
    failed = _failed(rows)
    out: list[str] = []
    for k, allowed in enumerate(lim.per_wave, start=1):
        n = sum(1 for r in failed if r.wave == k)
        if n > allowed:
            out.append(f"wave {k} budget exceeded: {n} failed > {allowed} tolerated")
    if len(failed) > lim.total:
        out.append(f"rollout budget exceeded: {len(failed)} failed > {lim.total} tolerated")
    if lim.domain_key is not None:
        per = Counter(a.hosts[r.host].domains.get(lim.domain_key, "") for r in failed)
        for value, n in sorted(per.items()):
            if n > lim.per_domain.get(value, 0):
                out.append(f"{lim.domain_key} {value} budget exceeded: {n} failed > "
                           f"{lim.per_domain.get(value, 0)} tolerated")
    return out


def next_batch(plan: RolloutPlan, lim: Limits, a: Assignment, rows: Mapping[str, HostRow],
               wave: int) -> list[str]:
    """The pending hosts of `wave` to start now, at most concurrency, capped by every budget's
    remaining room + 1."""
    failed = _failed(rows)
    room_wave = lim.per_wave[wave - 1] - sum(1 for r in failed if r.wave == wave)
    room_total = lim.total - len(failed)
    cap = min(plan.concurrency, room_wave + 1, room_total + 1)
    if cap <= 0:
        return []
    room_domain: dict[str, int] = {}
    if lim.domain_key is not None:
        used = Counter(a.hosts[r.host].domains.get(lim.domain_key, "") for r in failed)
        room_domain = {v: n - used.get(v, 0) for v, n in lim.per_domain.items()}
    batch: list[str] = []
    in_domain: Counter[str] = Counter()
    for h in a.waves[wave - 1]:
        if rows[h].state != "pending":
            continue
        if lim.domain_key is not None:
            d = a.hosts[h].domains.get(lim.domain_key, "")
            if in_domain[d] >= room_domain.get(d, 0) + 1:
                continue
            in_domain[d] += 1
        batch.append(h)
        if len(batch) >= cap:
            break
    return batch
