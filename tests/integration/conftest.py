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
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

from fleetgate.spec.loader import load_class
from tests.conftest import FLEETGATE, REPO, LabHandle, fleetgate, golden_root, timed

BUILD_TIMEOUT_S = 3600


class GoldenImages:
    """An image store shared by the session's test processes (pytest-xdist workers included),
    filled on demand: the first process to need a class builds it under a lock, the others
    wait for that build and read its manifest."""

    def __init__(self, root: Path):
        self.root = root
        self.env = {"FLEETGATE_IMAGES_DIR": str(root)}
        self.manifests: dict[str, dict[str, Any]] = {}

    def build(self, class_name: str, *args: str, classes: Path | None = None) -> str:
        """`CLASS:VERSION` of the class's image, built now if this session has not yet.
        `classes`: another class directory (a new version of the class, e.g. an example's)."""
        nc = load_class((classes or REPO / "inventory" / "classes") / f"{class_name}.yml")
        name = f"{nc.name}-{nc.version}"
        if name not in self.manifests:
            self.root.mkdir(parents=True, exist_ok=True)
            with FileLock(self.root / f".{name}.lock"):
                failed = self.root / f".{name}.failed"
                assert not failed.exists(), f"{name}: failed in another worker: " + \
                    failed.read_text()[-4000:]
                if not (self.root / name / "manifest.json").exists():
                    path = f"{FLEETGATE.parent}{os.pathsep}{os.environ.get('PATH', '')}"
                    env = {**self.env, "PATH": path}
                    if classes is not None:
                        env["FLEETGATE_CLASSES_DIR"] = str(classes)
                    with timed(f"image build {name}"):
                        proc = fleetgate("image", "build", nc.name, *args,
                                         timeout=BUILD_TIMEOUT_S, env=env)
                    if proc.returncode != 0:
                        failed.write_text(proc.stdout[-4000:] + proc.stderr)
                    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
            self.manifests[name] = json.loads((self.root / name / "manifest.json").read_text())
        return f"{nc.name}:{nc.version}"


@pytest.fixture(scope="session")
def golden(pytestconfig: pytest.Config) -> GoldenImages:
    return GoldenImages(golden_root(pytestconfig))


LabFactory = Callable[..., AbstractContextManager[Any]]


@pytest.fixture(scope="session")
def lab_up(tmp_path_factory: pytest.TempPathFactory) -> LabFactory:
    """`with lab_up("name", containers=N, vms=M, images=[...], handle=Cls) as lab:` — a real
    lab in its own directory, up before the body and down after it, whatever happens.
    `args`: more `lab up` options (e.g. ("--slurm",))."""

    @contextmanager
    def factory(name: str, *, containers: int = 0, vms: int = 0, images: tuple[str, ...] = (),
                golden: GoldenImages | None = None, handle: Callable[[Path], Any] = LabHandle,
                timeout: float = 900, args: tuple[str, ...] = ()) -> Iterator[Any]:
        lab = handle(tmp_path_factory.mktemp(name) / "lab")
        if golden is not None:
            lab.env.update(golden.env)
        argv = ["lab", "up", "--containers", str(containers), "--vms", str(vms), *args]
        for ref in images:
            argv += ["--image", ref]
        with timed(f"lab up {name} ({containers} containers, {vms} VMs)"):
            proc = fleetgate(*argv, env=lab.env, timeout=timeout)
        try:
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
            lab.up_output = proc  # what `lab up` printed: its progress lines are tested
            yield lab
        finally:
            fleetgate("lab", "down", env=lab.env)

    return factory
