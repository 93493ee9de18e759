"""`scan_target`: find every artifact in a target and the evidence of the GPU vendors it needs.

Parallelism is over files (a tree's ELF files, a directory's wheels) in a process pool: ELF
parsing is Python-bound, so threads would serialise on the GIL. A tar is one compressed stream
and a wheel's members are inflated in order, so each of those is read by one process.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path
from typing import TypeVar

from fleetgate.errors import BadInput
from fleetgate.preflight.members import probe_path
from fleetgate.preflight.model import Artifact, ScanResult, ScanStats, Unreadable
from fleetgate.preflight.targets import TREE_KINDS, detect_kind, read_tar, read_tree, wheels_in
from fleetgate.preflight.tree import TreeCollector
from fleetgate.preflight.vendor_table import VendorTable
from fleetgate.preflight.wheel_scan import scan_wheel

# Below this many files a pool costs more to start than it saves.
MIN_FILES_FOR_POOL = 200

T = TypeVar("T")
R = TypeVar("R")


def default_jobs() -> int:
    return max(1, min(len(os.sched_getaffinity(0)), 8))


def _map(fn: Callable[[T], R], items: Sequence[T], jobs: int, *, min_items: int) -> list[R]:
    if jobs <= 1 or len(items) < min_items:
        return [fn(item) for item in items]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        # About 16 chunks per worker: few enough to keep inter-process traffic low, enough that
        # a worker held up by one huge library leaves the remaining chunks to the others.
        return list(pool.map(fn, items, chunksize=max(1, len(items) // (jobs * 16))))


def _wheel_in_dir(path: Path, table: VendorTable, root: Path) -> tuple[Artifact, ScanStats]:
    """One wheel of a directory: a broken one is reported, not fatal to the others."""
    location = str(path.relative_to(root))
    try:
        return scan_wheel(path, table, location=location)
    except BadInput as exc:
        artifact = Artifact(name=path.name, kind="wheel", location=location)
        artifact.unreadable.add(Unreadable(path.name, exc.reason))
        return artifact, ScanStats(files=1)


def scan_target(target: Path, table: VendorTable, *, jobs: int | None = None) -> ScanResult:
    jobs = default_jobs() if jobs is None else jobs
    started = time.perf_counter()
    kind = detect_kind(target)
    stats = ScanStats()
    if kind == "wheel":
        artifact, stats = scan_wheel(target, table, location=target.name)
        artifacts = [artifact]
    elif kind == "wheel-dir":
        results = _map(partial(_wheel_in_dir, table=table, root=target), wheels_in(target), jobs,
                       min_items=2)
        artifacts = [a for a, _ in results]
        for _, wheel_stats in results:
            stats.add(wheel_stats)
    else:
        collector = TreeCollector(table)
        if kind in TREE_KINDS:
            candidates = read_tree(target, collector)
            found = _map(partial(probe_path, pattern=table.dlopen_pattern),
                         [path for path, _, _ in candidates], jobs, min_items=MIN_FILES_FOR_POOL)
            for (_, rel, size), facts in zip(candidates, found, strict=True):
                if facts is not None:
                    collector.add_elf(rel, size, facts)
        else:
            read_tar(target, collector, table)
        artifacts = collector.artifacts()
        stats = collector.stats
    return ScanResult(target=str(target), target_kind=kind, artifacts=artifacts, stats=stats,
                      table_sources=table.sources, wall_s=time.perf_counter() - started,
                      jobs=jobs)
