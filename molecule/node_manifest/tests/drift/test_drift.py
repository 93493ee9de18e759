"""After side_effect.yml re-pointed /vmlinuz, verify mode must name exactly that drift."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from testinfra.host import Host

from fleetgate.runner.ansible import run
from fleetgate.spec.schema import NodeClass

RunModule = Callable[..., dict[str, Any]]

SCENARIO = Path(__file__).resolve().parents[2]


def boot_abi(host: Host) -> str:
    target = str(host.file("/vmlinuz").linked_to)
    return os.path.basename(target).removeprefix("vmlinuz-")


def test_side_effect_moved_the_default_boot(host: Host, node_class: NodeClass) -> None:
    assert boot_abi(host) != node_class.kernel.abi, "run side_effect.yml first"


def test_verify_mode_names_the_default_boot(host: Host, node_class: NodeClass,
                                            manifest: dict[str, Any],
                                            run_module: RunModule) -> None:
    before = host.file("/etc/fleetgate/manifest.json").sha256sum
    result = run_module(mode="verify", check_running_kernel=False)
    assert result["drift"] == [{"field": "verified.kernel.default_boot",
                                "expected": node_class.kernel.abi, "actual": boot_abi(host)}]
    assert result["manifest"]["drift"] == result["drift"]
    assert "verified.kernel.default_boot" in result["drift_summary"]
    # verify mode writes nothing: the recorded manifest still shows the converged state.
    assert not result["changed"] and not result["written"]
    assert host.file("/etc/fleetgate/manifest.json").sha256sum == before
    assert manifest["verified"]["kernel"]["default_boot"] == node_class.kernel.abi


def test_running_kernel_is_drift_only_when_checked(host: Host, node_class: NodeClass,
                                                   run_module: RunModule) -> None:
    running = host.check_output("uname -r")
    result = run_module(mode="verify", check_running_kernel=True)
    fields = [d["field"] for d in result["drift"]]
    if running == node_class.kernel.abi:
        assert fields == ["verified.kernel.default_boot"]
    else:
        assert fields == ["verified.kernel.default_boot", "verified.kernel.running"]
        assert result["drift"][1]["actual"] == running


def test_role_in_verify_mode_fails_with_one_line(host: Host, tmp_path: Path) -> None:
    # Through fleetgate's own ansible-runner wrapper, as playbooks and rollouts run the role.
    name = host.backend.get_hostname()
    inventory = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "lab" / "inventory.yml"
    result = run(inventory=inventory, playbook=SCENARIO / "verify_mode.yml", limit=name,
                 runs_base=tmp_path, timeout=300)
    assert result.rc != 0
    assert result.hosts[name].outcome == "failed"
    assert result.hosts[name].task == "Fail on drift from the node class"
    events = [json.loads(line) for line in (result.run_dir / "events.jsonl").open()]
    failed = [e["event_data"] for e in events if e.get("event") == "runner_on_failed"]
    assert len(failed) == 1
    msg = failed[0]["res"]["msg"]
    assert "\n" not in msg
    assert msg.startswith(f"node_manifest: {name} drifted from class ")
    assert "verified.kernel.default_boot" in msg
