"""smoke_probes on a real lab host: exactly the role's probe set (with fleetgate's parsers),
executable, versioned, its dependencies installed, and the probes answering."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from testinfra.host import Host

from fleetgate.smoke.probeset import probe_files, set_version

PROBES_DIR = "/opt/fleetgate/probes"
ROLE_PROBES = Path(__file__).resolve().parents[3] / "roles" / "smoke_probes" / "files" / "probes"


def role_probe_set() -> dict[str, bytes]:
    return probe_files(ROLE_PROBES)


def test_role_ships_the_probes_and_the_parsers() -> None:
    files = role_probe_set()
    assert {"discovery.py", "stack.py", "gemm.py", "comms.py", "inference.py",
            "fleetgate_probe.py", "fleetgate_parsers.py", "README.txt"} <= set(files)
    readme = files["README.txt"].decode()
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


def test_cpu_backend_dependencies(host: Host) -> None:
    assert host.package("python3-numpy").is_installed
    assert host.run("/usr/bin/python3 -c 'import numpy'").rc == 0


@pytest.mark.parametrize("probe", ["discovery", "stack", "inference"])
def test_probes_answer_with_one_json_object(host: Host, probe: str) -> None:
    out = host.run("/usr/bin/python3 -B %s/%s.py --backend cpu --timeout 30", PROBES_DIR, probe)
    doc = json.loads(out.stdout)
    assert out.rc == 0 and doc["status"] == "ok" and doc["probe"] == probe


def test_only_the_probe_set_and_version(host: Host) -> None:
    # After the probes ran: no __pycache__ or other leftovers in the directory.
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
