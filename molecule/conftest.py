"""Helpers for the Molecule testinfra suites: every expectation comes from the node class."""

from __future__ import annotations

from typing import Any

import pytest
from testinfra.host import Host

from fleetgate.spec.loader import resolve_class
from fleetgate.spec.schema import NodeClass


def unwrap(value: Any) -> Any:
    """ansible-inventory marks template-unsafe strings as {'__ansible_unsafe': value}."""
    if isinstance(value, dict) and set(value) == {"__ansible_unsafe"}:
        return value["__ansible_unsafe"]
    return value


@pytest.fixture
def node_class(host: Host) -> NodeClass:
    name = unwrap(host.ansible.get_variables()["fleetgate_class"])
    return resolve_class(str(name))[1]
