"""Which host goes in which wave: inventory pools in order, or cumulative steps spread across
failure domains, so that an early wave sees every rack/zone it can and a bad change shows up
before it has reached a whole domain.
"""

from __future__ import annotations

import heapq
import itertools
import math
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fleetgate.errors import BadInput
from fleetgate.rollout.plan import RolloutPlan, Waves
from fleetgate.runner.inventory import resolve_inventory

HOST_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
DOMAIN_VALUE_RE = re.compile(r"^[A-Za-z0-9_.-]{0,64}$")


@dataclass(frozen=True)
class Host:
    name: str
    node_class: str | None
    domains: dict[str, str]
    groups: tuple[str, ...] = ()


@dataclass
class Assignment:
    waves: list[list[str]]
    hosts: dict[str, Host]
    notes: list[str] = field(default_factory=list)

    def wave_of(self, host: str) -> int:
        for i, members in enumerate(self.waves, start=1):
            if host in members:
                return i
        raise KeyError(host)


def resolve_hosts(plan: RolloutPlan, inventory: Path) -> dict[str, Host]:
    """Hosts the plan targets, with their class and failure-domain values, as Ansible sees them
    (vars plugins included). Every name and domain value is checked before it can reach a
    command line as a `--limit`."""
    limit = ":".join(plan.targets.patterns) or None
    inv = resolve_inventory(inventory, limit)
    hostvars = inv.hostvars
    groups_of = inv.groups_of()
    keys = set(plan.waves.diversity)
    if plan.budgets.per_domain is not None:
        keys.add(plan.budgets.per_domain.key)
    if plan.execution is not None:
        keys.add(plan.execution.domain)  # it picks each host's execution node
    hosts: dict[str, Host] = {}
    for name in sorted(hostvars):
        if not HOST_RE.fullmatch(name):
            raise BadInput("host name has characters outside [A-Za-z0-9_.-]", source=str(inventory),
                           field=f"hosts.{name!r}")
        hv = hostvars[name]
        cls = hv.get("fleetgate_class")
        if plan.targets.node_class is not None and cls != plan.targets.node_class:
            continue
        domains: dict[str, str] = {}
        for k in sorted(keys):
            v = str(hv.get(k, ""))
            if not DOMAIN_VALUE_RE.fullmatch(v):
                raise BadInput("failure-domain value has characters outside [A-Za-z0-9_.-]",
                               source=str(inventory), field=f"hosts.{name}.{k}")
            domains[k] = v
        hosts[name] = Host(name, str(cls) if cls else None, domains,
                           tuple(sorted(groups_of.get(name, []))))
    if not hosts:
        what = f"class {plan.targets.node_class}" if plan.targets.node_class else "the plan"
        raise BadInput(f"no host matches {what}" + (f" within {limit}" if limit else ""),
                       source=str(inventory), field="targets")
    return hosts


def assign(plan_waves: Waves, hosts: dict[str, Host], *, source: Path | str | None = None,
           where: str = "waves") -> Assignment:
    """The hosts in waves; `source` and `where` name the plan and its waves in errors."""
    if plan_waves.pools is not None:
        return _by_pools(plan_waves.pools, hosts, source=source, where=f"{where}.pools")
    assert plan_waves.steps is not None
    return _by_steps(plan_waves.steps, plan_waves.diversity, hosts)


def _by_pools(pools: list[str], hosts: dict[str, Host], *, source: Path | str | None,
              where: str) -> Assignment:
    waves: list[list[str]] = []
    placed: dict[str, str] = {}
    for pool in pools:
        members = sorted(h for h, hv in hosts.items() if pool in hv.groups)
        twice = [f"{h} ({placed[h]} and {pool})" for h in members if h in placed]
        if twice:
            raise BadInput(f"a host is in exactly one wave; in two pools: {', '.join(twice)}",
                           source=source, field=where)
        if not members:
            raise BadInput(f"pool {pool} has no targeted host", source=source, field=where)
        for h in members:
            placed[h] = pool
        waves.append(members)
    left = sorted(set(hosts) - set(placed))
    if left:
        raise BadInput(f"targeted hosts in no pool: {', '.join(left)}", source=source,
                       field=where)
    return Assignment(waves, hosts)


def step_sizes(steps: list[int | str], total: int) -> tuple[list[int], list[str]]:
    """Cumulative step targets -> per-wave sizes. A step that adds no host is dropped (and
    said so); whatever the last step leaves becomes a final wave."""
    sizes: list[int] = []
    notes: list[str] = []
    done = 0
    for s in steps:
        want = (math.ceil(float(s[:-1]) * total / 100) if isinstance(s, str) else int(s))
        want = min(want, total)
        if want <= done:
            notes.append(f"step {s!r} adds no host at {total} hosts ({done} already), dropped")
            continue
        sizes.append(want - done)
        done = want
    if done < total:
        notes.append(f"the steps cover {done} of {total} hosts; the rest form a last wave")
        sizes.append(total - done)
    return sizes, notes


def _rank(host: str) -> str:
    """A host's place among equally diverse groups, smallest first: the order in which
    `max` over `[-ord(c) for c in name]` chose (a smaller character first; of a name and its
    prefix, the longer). Host names are [A-Za-z0-9_.-], so the sentinel sorts after all."""
    return host + "\U0010ffff"


def _by_steps(steps: list[int | str], keys: list[str], hosts: dict[str, Host]) -> Assignment:
    sizes, notes = step_sizes(steps, len(hosts))
    # Hosts with the same domain values are interchangeable for diversity: choose among
    # groups (a few hundred racks), not hosts (tens of thousands).
    groups: dict[tuple[str, ...], deque[str]] = {}
    for h in sorted(hosts):
        groups.setdefault(tuple(hosts[h].domains.get(k, "") for k in keys), deque()).append(h)
    left = len(hosts)
    # Each pick takes the group that brings the most not-yet-covered values, coarser keys
    # first (zone before rack); ties go to the smallest host name, for a stable plan. The
    # groups sit in buckets by which of their values are still uncovered (a vector of bools),
    # each bucket a heap by head host: a pick looks at the best non-empty bucket's top, and a
    # group whose values were covered since it was filed moves down when it reaches a top.
    # O(log groups) a pick, not O(groups): 10,000 picks among 2,500 racks at 100,000 hosts.
    order = sorted(itertools.product((True, False), repeat=len(keys)), reverse=True)
    waves: list[list[str]] = []
    for size in sizes:
        if size >= left:  # the last wave: everyone left
            waves.append(sorted(h for q in groups.values() for h in q))
            break
        wave: list[str] = []
        covered: list[set[str]] = [set() for _ in keys]

        def vector(g: tuple[str, ...], covered: list[set[str]] = covered) -> tuple[bool, ...]:
            return tuple(g[i] not in covered[i] for i in range(len(keys)))

        everyone = tuple(True for _ in keys)
        buckets: dict[tuple[bool, ...], list[tuple[str, tuple[str, ...]]]] = {
            everyone: [(_rank(q[0]), g) for g, q in groups.items() if q]}
        heapq.heapify(buckets[everyone])
        for _ in range(size):
            best = _pick(order, buckets, groups, vector)
            host = groups[best].popleft()
            for i, value in enumerate(best):
                covered[i].add(value)
            if groups[best]:
                heapq.heappush(buckets.setdefault(vector(best), []),
                               (_rank(groups[best][0]), best))
            wave.append(host)
        left -= size
        waves.append(sorted(wave))
    return Assignment(waves, hosts, notes)


def _pick(order: list[tuple[bool, ...]],
          buckets: dict[tuple[bool, ...], list[tuple[str, tuple[str, ...]]]],
          groups: dict[tuple[str, ...], deque[str]],
          vector: Callable[[tuple[str, ...]], tuple[bool, ...]]) -> tuple[str, ...]:
    """The best group, taken off its bucket (the caller files it again if hosts are left)."""
    for vec in order:
        heap = buckets.get(vec)
        while heap:
            rank, g = heap[0]
            q = groups[g]
            if not q or _rank(q[0]) != rank:  # stale: not this group's head any more
                heapq.heappop(heap)
                continue
            now = vector(g)
            if now != vec:  # some of its values were covered since it was filed
                heapq.heappop(heap)
                heapq.heappush(buckets.setdefault(now, []), (rank, g))
                continue
            heapq.heappop(heap)
            return g
    raise AssertionError("no host left to pick")  # callers pick at most the hosts left
