"""Shared test helpers (the real `fleetgate` CLI as a subprocess, a lab handle) and the run's own
record and clean-up at its end: lane, file and lab timings, the golden store and its images."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from fleetgate.image.lab_images import IMAGE_LABEL, IMAGE_REPO
from fleetgate.lab.keys import ssh_argv
from fleetgate.lab.paths import LabPaths
from fleetgate.lab.state import load_state

REPO = Path(__file__).resolve().parents[1]
FLEETGATE = Path(sys.executable).parent / "fleetgate"


def fleetgate(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = 600, check: bool = False,
    cwd: Path = REPO,
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "FLEETGATE_HOME": str(REPO), "COLUMNS": "200", **(env or {})}
    # stdin=DEVNULL here and in ssh(): an ssh child sets an inherited stdin non-blocking, and
    # the xdist worker's stdin is shared by every later Ansible process of the lane.
    proc = subprocess.run([str(FLEETGATE), *args], capture_output=True, text=True,
                          timeout=timeout, env=full_env, cwd=cwd, check=False,
                          stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        pytest.fail(f"fleetgate {' '.join(args)} -> {proc.returncode}\n"
                    f"{proc.stdout}\n{proc.stderr}")
    return proc


class LabHandle:
    """A lab in its own directory, driven through the real CLI; shared by the lab test files."""

    def __init__(self, root: Path):
        self.root = root
        self.env = {"FLEETGATE_LAB_DIR": str(root), "FLEETGATE_STATE_DIR": str(root.parent)}
        self.up_output: subprocess.CompletedProcess[str] | None = None  # set by lab_up

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return fleetgate(*args, env=self.env, check=check)

    @property
    def inventory(self) -> str:
        return str(self.root / "inventory.yml")

    def ssh(self, host: str, command: str) -> str:
        """Run a command on a lab host over the lab's own SSH trust; returns stdout."""
        paths = LabPaths(self.root)
        state = load_state(paths.state)
        assert state is not None, f"no lab in {self.root}"
        proc = subprocess.run(ssh_argv(paths, state.host(host), command),
                              capture_output=True, text=True, timeout=30, check=False,
                              stdin=subprocess.DEVNULL)
        return proc.stdout


# The session's golden images (tests/integration/conftest.py: GoldenImages) live in one store
# per run. A developer iterating on one lab file can point this at a store a run already filled
# (FLEETGATE_TEST_IMAGES=/tmp/pytest-of-root/pytest-N/golden) and skip the builds; the store
# is then left in place. CI never sets it.
KEEP_IMAGES = os.environ.get("FLEETGATE_TEST_IMAGES")
# When this process began (the main one's: it removes the run's images at its end); podman
# keeps an image's creation time in whole seconds.
SESSION_STARTED = int(time.time()) - 1


def golden_root(config: pytest.Config) -> Path:
    """One store per run: under the main process's base temp dir, which xdist workers share
    (each worker's own base temp is a child of it)."""
    if KEEP_IMAGES:
        return Path(KEEP_IMAGES)
    base = config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
    if hasattr(config, "workerinput"):
        base = base.parent
    return Path(base) / "golden"


# Image builds and lab starts by name (tests/integration/conftest.py and test_image.py write
# them), printed at the end of the run: the suite's own record of where its slow time went.
# Under xdist each worker fills its own copy and hands it to the main process at its end.
TIMINGS: dict[str, float] = {}


@contextmanager
def timed(name: str) -> Iterator[None]:
    """The block's wall time into TIMINGS under `name`, also when it fails: a failed build's
    time is part of where the run's time went."""
    t = time.monotonic()
    try:
        yield
    finally:
        TIMINGS[name] = time.monotonic() - t


# Here, not in tests/integration/conftest.py: under xdist the main process collects nothing,
# so it never loads that file, and a hook there ran in no process that outlives every lane.
def pytest_sessionfinish(session: pytest.Session) -> None:
    if hasattr(session.config, "workeroutput"):  # an xdist worker
        session.config.workeroutput["lab_timings"] = dict(TIMINGS)
        return
    # The main process removes the store: gigabytes of root filesystems, and the podman images
    # lab hosts were started from (`lab up --image` imports an image once, under one tag, for
    # every lab of the run). Only here, once every worker is done: a test file's own teardown
    # removing them (`rmi --force` takes the containers too) killed other lanes' hosts
    # mid-test.
    # Only images imported since this run began: a developer's own lab (the demo's, say) on
    # an image imported earlier keeps its image and its containers.
    store = golden_root(session.config)
    if KEEP_IMAGES or not store.exists():
        return  # a kept store, or no lab file ran: no image was built or imported
    shutil.rmtree(store, ignore_errors=True)
    found = subprocess.run(["podman", "images", "--filter", f"label={IMAGE_LABEL}",
                            "--format", "json"], capture_output=True, text=True,
                           timeout=300, check=False)
    refs = [name for image in json.loads(found.stdout or "[]")
            if int(image.get("Created", 0)) >= SESSION_STARTED
            for name in image.get("Names") or []
            if name.startswith(f"{IMAGE_REPO}-")]
    if refs:
        subprocess.run(["podman", "rmi", "--force", *refs], capture_output=True,
                       timeout=300, check=False)


# The suite runs in two pytest-xdist workers, a file at a time (`make test`: --dist loadfile,
# --no-loadscope-reorder), and a worker takes the next file in collection order when it is
# free. Longest first keeps the two lanes even, so the slow lab files lead, in about the order
# of their wall time on the 2-core CI machine; every other file keeps pytest's order after them.
SLOW_FIRST = (
    "integration/test_kernel_update.py",
    "integration/test_rollout.py",
    "integration/test_molecule.py",
    "integration/test_image.py",
    "integration/test_nvidia_dkms.py",
    "integration/test_smoke.py",
    "integration/test_slurm_drain.py",
    "integration/test_execution_nodes.py",
    "integration/test_bad_inputs.py",
    "integration/test_bad_blas.py",
    "integration/test_judge.py",
    "integration/test_triage.py",
    "integration/test_lab.py",
    "integration/test_preflight_deps.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        rel = Path(str(item.path)).relative_to(REPO / "tests").as_posix()
        if rel in SLOW_FIRST:
            return SLOW_FIRST.index(rel)
        # A lab file not listed yet (a new one) still goes before the quick unit files.
        return len(SLOW_FIRST) + (0 if rel.startswith("integration/") else 1)

    items.sort(key=rank)


# Where the suite's wall time went, file by file and lane by lane, printed at the end of every
# run (the main process sees every worker's reports): the record that 13's "≤ 30 minutes" is
# kept by, and the first thing to read when a lane grows.
FILE_SECONDS: dict[str, float] = {}
LANE_SECONDS: dict[str, float] = {}


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: a worker's TIMINGS, at its end
def pytest_testnodedown(node: Any, error: object) -> None:
    TIMINGS.update(getattr(node, "workeroutput", {}).get("lab_timings", {}))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.split("::", 1)[0]
    FILE_SECONDS[path] = FILE_SECONDS.get(path, 0.0) + report.duration
    node = getattr(report, "node", None)  # the xdist worker that ran it, in the main process
    lane = node.gateway.id if node is not None else "main"
    LANE_SECONDS[lane] = LANE_SECONDS.get(lane, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not FILE_SECONDS or hasattr(terminalreporter.config, "workerinput"):
        return
    if TIMINGS:
        terminalreporter.write_line("lab and image timings: " + ", ".join(
            f"{k} {v:.0f}s" for k, v in TIMINGS.items()))
    unit = sum(v for k, v in FILE_SECONDS.items() if k.startswith("tests/unit/"))
    lab = sorted(((v, k) for k, v in FILE_SECONDS.items() if not k.startswith("tests/unit/")),
                 reverse=True)
    terminalreporter.write_line("seconds per lane: " + ", ".join(
        f"{k} {v:.0f}" for k, v in sorted(LANE_SECONDS.items())))
    terminalreporter.write_line("seconds per file: " + ", ".join(
        f"{k.removeprefix('tests/')} {v:.0f}" for v, k in lab) + f", unit files {unit:.0f}")
