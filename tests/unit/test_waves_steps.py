"""Wave assignment by steps picks hosts with a heap per diversity bucket (waves._by_steps),
not a scan of every group per pick: it must choose exactly the hosts the plain rule chooses
(the group bringing the most uncovered values, coarser keys first; ties to the smallest
host name), which `reference` below spells out as it was first written."""

from __future__ import annotations

import random
from collections import deque

import pytest

from fleetgate.rollout.waves import Host, _by_steps, step_sizes


def reference(steps: list[int | str], keys: list[str], hosts: dict[str, Host]) -> list[list[str]]:
    sizes, _notes = step_sizes(steps, len(hosts))
    groups: dict[tuple[str, ...], deque[str]] = {}
    for h in sorted(hosts):
        groups.setdefault(tuple(hosts[h].domains.get(k, "") for k in keys), deque()).append(h)
    waves: list[list[str]] = []
    for size in sizes:
        if size >= sum(len(q) for q in groups.values()):
            waves.append(sorted(h for q in groups.values() for h in q))
            break
        wave: list[str] = []
        covered: list[set[str]] = [set() for _ in keys]
        for _ in range(size):
            best = max((g for g in groups if groups[g]), key=lambda g: (
                tuple(g[i] not in covered[i] for i in range(len(keys))),
                [-ord(c) for c in groups[g][0]]))
            wave.append(groups[best].popleft())
            for i, value in enumerate(best):
                covered[i].add(value)
        waves.append(sorted(wave))
    return waves


@pytest.mark.parametrize("seed", range(40))
def test_heap_picks_are_the_plain_rules_picks(seed: int) -> None:
    r = random.Random(seed)  # noqa: S311  # a reproducible fleet, not a secret
    names: set[str] = set()
    while len(names) < r.randint(1, 90):
        names.add(r.choice(["gpu", "g", "gpu-a", "h"]) + str(r.randint(0, 300))
                  + r.choice(["", "x", "-1", ".b"]))
    hosts = {h: Host(h, "lab-cpu", {"zone": f"z{r.randint(0, 3)}", "rack": f"r{r.randint(0, 12)}",
                                    "row": r.choice(["", "a", "b"])}) for h in names}
    keys = r.choice([[], ["zone"], ["zone", "rack"], ["rack", "zone"], ["zone", "rack", "row"]])
    steps = r.choice([[1, "10%", "100%"], [1, 2, 3], [2, "50%"], [1, 10, "1%", "10%", "100%"]])
    assert _by_steps(steps, keys, hosts).waves == reference(steps, keys, hosts)
