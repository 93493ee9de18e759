"""Fixtures shared by unit-test files."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fleetgate.runner import remote


@pytest.fixture
def node_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An execution node's side runs here: `sh -c SCRIPT` with its own HOME, this venv's
    ansible-runner on PATH. Only the transport is replaced; every script, the worker and the
    stream are real. The state dir is the test's own."""
    home = tmp_path / "node"
    home.mkdir()
    path = f"{Path(sys.executable).parent}:/usr/bin:/bin"

    def local(node: remote.RemoteNode, script: str) -> list[str]:
        return ["env", f"HOME={home}", f"PATH={path}", "sh", "-c", script]

    monkeypatch.setattr(remote, "ssh_argv", local)
    monkeypatch.setenv("FLEETGATE_STATE_DIR", str(tmp_path / "state"))
    return home
