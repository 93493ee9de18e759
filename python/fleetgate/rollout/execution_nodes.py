"""Which execution node runs which hosts: the plan's affinity (failure-domain value -> node),
checked against the inventory when a plan is made and whenever its artifact is loaded.

A batch is split by node (`by_node`), one worker per part, all running at once: the node
that dies takes only its own domain's part of the batch with it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from fleetgate.errors import BadInput
from fleetgate.rollout.plan import Execution, RolloutPlan
from fleetgate.rollout.waves import Host
from fleetgate.runner.inventory import EXEC_NODES_GROUP, Inventory, resolve_inventory
from fleetgate.runner.remote import RemoteNode, few, member_node, node_from_hostvars


def node_of(ex: Execution, host: Host) -> str:
    value = host.domains.get(ex.domain, "")
    node = ex.nodes.get(value)
    if node is None:
        raise BadInput(f"host {host.name} has {ex.domain}={value or '(none)'}, which no "
                       "execution node serves", source="plan", field="execution.nodes")
    return node


def check(plan: RolloutPlan, hosts: Mapping[str, Host], inv: Inventory, *,
          source: Path | str, prefix: str = "") -> None:
    """Every targeted host's domain value has a node, every node named is in the inventory
    group fleetgate_execution_nodes, and no node is also a target. One line each, naming the
    plan file and field."""
    ex = plan.execution
    if ex is None:
        return
    field = f"{prefix}execution.nodes"
    unserved: dict[str, list[str]] = {}
    for h in hosts.values():
        value = h.domains.get(ex.domain, "")
        if value not in ex.nodes:
            unserved.setdefault(value or "(none)", []).append(h.name)
    if unserved:
        value, names = sorted(unserved.items())[0]
        raise BadInput(f"{ex.domain}={value} (hosts {few(names)}) has no execution node; "
                       f"nodes serve {ex.domain}={', '.join(sorted(ex.nodes))}",
                       source=source, field=field)
    for value, node in sorted(ex.nodes.items()):
        member_node(inv, node, source=source, field=f"{field}.{value}")
        if node in hosts:
            raise BadInput(f"{node} is an execution node and also a target of the plan; "
                           "exclude it from the targets", source=source,
                           field=f"{field}.{value}")


def by_node(ex: Execution, hosts: Mapping[str, Host], names: Iterable[str]
            ) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for h in names:
        out.setdefault(node_of(ex, hosts[h]), []).append(h)
    return out


def remote_node(inventory: Path, name: str) -> RemoteNode:
    """The node's connection values as the inventory has them now (resolved once per
    process)."""
    inv = resolve_inventory(inventory)
    if name not in inv.hostvars:
        raise BadInput(f"execution node {name} is no longer in the inventory",
                       source=inv.label, field=EXEC_NODES_GROUP)
    return node_from_hostvars(name, inv.hostvars[name], source=inv.label)
