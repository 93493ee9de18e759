"""Where a lab keeps its state. One lab per directory; nothing is written outside it but the
shared image cache, so two labs (a test run and the demo) never see each other's hosts."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from fleetgate.site import current_site


def default_lab_dir() -> Path:
    return current_site().lab_dir


@dataclass(frozen=True)
class LabPaths:
    root: Path

    @property
    def lab_id(self) -> str:
        # Short, stable, and unique per directory: container names and labels carry it.
        return hashlib.sha256(str(self.root).encode()).hexdigest()[:6]

    @property
    def marker(self) -> Path:
        """Only a directory carrying this file is ever deleted by `lab down`."""
        return self.root / ".fleetgate-lab"

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    @property
    def ssh_key(self) -> Path:
        return self.root / "ssh" / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.root / "ssh" / "known_hosts"

    @property
    def inventory(self) -> Path:
        return self.root / "inventory.yml"

    @property
    def containers_conf(self) -> Path:
        return self.root / "containers.conf"

    def host_dir(self, host: str) -> Path:
        return self.root / "hosts" / host

    @property
    def runs(self) -> Path:
        return self.root / "runs"
