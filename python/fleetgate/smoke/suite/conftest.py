"""pytest plumbing of the smoke suite: options, check selection, the `smoke` fixture.

Options (besides testinfra's --hosts / --ansible-inventory):
  --fleetgate-results FILE   append one JSON line per host and check (the controller reads it)
  --fleetgate-only a,b       run only these checks
  --fleetgate-probes-dir DIR where the smoke_probes role installed the probes on the hosts
  --fleetgate-resolved FILE  the controller's resolution of --ansible-inventory (its JSON):
                             testinfra reads it instead of starting ansible-inventory again
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetgate.smoke.probeset import PROBES_DIR
from fleetgate.smoke.session import SmokeSession, prime_inventory
from fleetgate.smoke.thresholds import CHECKS, Check


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fleetgate", "fleetgate smoke suite")
    group.addoption("--fleetgate-results", default=None, help="JSON lines output file")
    group.addoption("--fleetgate-only", default=None, help="comma-separated checks to run")
    group.addoption("--fleetgate-probes-dir", default=PROBES_DIR,
                    help="probe directory on the hosts")
    group.addoption("--fleetgate-resolved", default=None,
                    help="the --ansible-inventory source as the controller resolved it (JSON)")


def pytest_configure(config: pytest.Config) -> None:
    # Before testinfra's plugin parametrizes the tests with its hosts (pytest_generate_tests).
    resolved = config.getoption("--fleetgate-resolved")
    source = config.getoption("ansible_inventory", None)
    if resolved and source:
        prime_inventory(str(source), Path(resolved))


def selected_checks(config: pytest.Config) -> list[Check]:
    only = config.getoption("--fleetgate-only")
    if not only:
        return list(CHECKS)
    return [c for c in CHECKS if c in {s.strip() for s in str(only).split(",")}]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    keep = set(selected_checks(config))
    selected: list[pytest.Item] = []
    deselected: list[pytest.Item] = []
    for item in items:
        check = item.path.stem.removeprefix("test_")
        (selected if check in keep else deselected).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = selected


@pytest.fixture(scope="session")
def smoke(request: pytest.FixtureRequest) -> SmokeSession:
    results = request.config.getoption("--fleetgate-results")
    return SmokeSession(Path(results) if results else None,
                        str(request.config.getoption("--fleetgate-probes-dir")))
