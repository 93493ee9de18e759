"""What the lab test files share: golden images built once per session, and one lab factory.

Building a golden image is the slow, real part (Packer's docker builder against podman, the
class's roles inside the build container, the in-image gate). Each class is built at most
once per session, on first use, by the real `fleetgate image build`; test files that need a
converged host start it from that image instead of applying the class again (under TCG a
class apply costs minutes), and test_image.py asserts on the very same builds.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest

from fleetgate.spec.loader import load_class
from tests.conftest import FLEETGATE, REPO, LabHandle, fleetgate

BUILD_TIMEOUT_S = 3600
# Image builds and lab starts, by name, printed at the end of the session: the suite's own
# record of where its slow time went.
TIMINGS: dict[str, float] = {}

class GoldenImages:
    """An image store private to the session, filled on demand."""

    def __init__(self, root: Path):
        self.root = root
        self.env = {"FLEETGATE_IMAGES_DIR": str(root)}
        self.manifests: dict[str, dict[str, Any]] = {}

    def build(self, class_name: str, *args: str) -> str:
        """`CLASS:VERSION` of the class's image, built now if this session has not yet."""
        nc = load_class(REPO / "inventory" / "classes" / f"{class_name}.yml")
        name = f"{nc.name}-{nc.version}"
        if name not in self.manifests:
            t = time.monotonic()
            path = f"{FLEETGATE.parent}{os.pathsep}{os.environ.get('PATH', '')}"
            proc = fleetgate("image", "build", nc.name, *args, timeout=BUILD_TIMEOUT_S,
                             env={**self.env, "PATH": path})
            TIMINGS[f"image build {name}"] = time.monotonic() - t
            assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
            self.manifests[name] = json.loads((self.root / name / "manifest.json").read_text())
        return f"{nc.name}:{nc.version}"


@pytest.fixture(scope="session")
def golden(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GoldenImages]:
    store = GoldenImages(tmp_path_factory.mktemp("golden"))
    yield store
    shutil.rmtree(store.root, ignore_errors=True)  # gigabytes of root filesystems


LabFactory = Callable[..., AbstractContextManager[Any]]


@pytest.fixture(scope="session")
def lab_up(tmp_path_factory: pytest.TempPathFactory) -> LabFactory:
    """`with lab_up("name", containers=N, vms=M, images=[...], handle=Cls) as lab:` — a real
    lab in its own directory, up before the body and down after it, whatever happens."""

    @contextmanager
    def factory(name: str, *, containers: int = 0, vms: int = 0, images: tuple[str, ...] = (),
                golden: GoldenImages | None = None, handle: Callable[[Path], Any] = LabHandle,
                timeout: float = 900) -> Iterator[Any]:
        lab = handle(tmp_path_factory.mktemp(name) / "lab")
        if golden is not None:
            lab.env.update(golden.env)
        args = ["lab", "up", "--containers", str(containers), "--vms", str(vms)]
        for ref in images:
            args += ["--image", ref]
        t = time.monotonic()
        proc = fleetgate(*args, env=lab.env, timeout=timeout)
        TIMINGS[f"lab up {name} ({containers} containers, {vms} VMs)"] = time.monotonic() - t
        try:
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
            yield lab
        finally:
            fleetgate("lab", "down", env=lab.env)

    return factory


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if TIMINGS:
        terminalreporter.write_line("lab and image timings: " + ", ".join(
            f"{k} {v:.0f}s" for k, v in TIMINGS.items()))
