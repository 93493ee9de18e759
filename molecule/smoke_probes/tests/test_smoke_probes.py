"""smoke_probes on a real lab host: exactly the role's probe set, executable, versioned."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from testinfra.host import Host

PROBES_DIR = "/opt/fleetgate/probes"
ROLE_PROBES = Path(__file__).resolve().parents[3] / "roles" / "smoke_probes" / "files" / "probes"


def role_probe_set() -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(ROLE_PROBES.iterdir()) if p.is_file()}


def set_version(files: dict[str, bytes]) -> str:
    """`sha256sum -- * | sha256sum` over the set, as the role documents."""
    listing = "".join(f"{hashlib.sha256(data).hexdigest()}  {name}\n"
                      for name, data in sorted(files.items()))
    return hashlib.sha256(listing.encode()).hexdigest()


def test_role_ships_the_readme() -> None:
    readme = role_probe_set()["README.txt"].decode()
    assert "one JSON object" in readme and "timeout" in readme


def test_probe_directory(host: Host) -> None:
    d = host.file(PROBES_DIR)
    assert d.is_directory
    assert (d.user, d.group, d.mode) == ("root", "root", 0o755)


@pytest.mark.parametrize("name", sorted(role_probe_set()))
def test_probe_installed_executable(host: Host, name: str) -> None:
    f = host.file(f"{PROBES_DIR}/{name}")
    assert f.is_file
    assert (f.user, f.mode) == ("root", 0o755)
    assert f.sha256sum == hashlib.sha256(role_probe_set()[name]).hexdigest()


def test_only_the_probe_set_and_version(host: Host) -> None:
    present = set(host.check_output("ls -A %s", PROBES_DIR).split())
    assert present == set(role_probe_set()) | {"VERSION"}


def test_version_is_the_content_hash(host: Host) -> None:
    version = host.file(f"{PROBES_DIR}/VERSION").content_string.strip()
    assert version == set_version(role_probe_set())
    # ...and matches what the host really carries.
    on_host = host.check_output(
        "cd %s && ls -A | grep -vx VERSION | LC_ALL=C sort"
        " | xargs -d '\\n' sha256sum -- | sha256sum", PROBES_DIR)
    assert version == on_host.split()[0]
