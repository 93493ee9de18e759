"""`python -m fleetgate.smoke.on_node SPEC`: the groups of one smoke job, run on the execution
node by the job's play (playbooks/smoke-suite.yml), side by side, with the very code the
controller uses for its own groups (smoke.runner.run_group: the same pytest command, deadline
and kill). smoke/remote.py writes SPEC and reads what this writes in its `out` directory,
which the worker streams back: per group NAME.jsonl (results), NAME.log, NAME.meta.json.
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from fleetgate.runner.inventory import Inventory
from fleetgate.smoke.remote import NodeGroup, NodeSpec
from fleetgate.smoke.runner import new_run_dir, run_group


def run(spec: NodeSpec) -> None:
    out = new_run_dir(Path(spec.out).resolve())  # its groups run from inside it
    answer = Path(spec.answer)
    inv = Inventory((answer.resolve(),), None, json.loads(answer.read_text()))
    # The groups' inventory stand-ins hold the hosts' variables: they stay in the project,
    # which the worker deletes when the job ends, not in `out`, which goes back in the stream
    # (and stays on the node if no controller collects the job).
    stand_ins = Path("stand-ins").resolve()
    stand_ins.mkdir(mode=0o700)

    def one(g: NodeGroup) -> None:
        # The results file is read back on the controller; the meta says how the suite ended.
        _, meta = run_group(g.name, g.hosts, inv.hosts_source(stand_ins, g.hosts, g.name),
                            spec.checks, out, g.budget_s, spec.probes_dir,
                            Path(spec.classes).resolve())
        (out / f"{g.name}.meta.json").write_text(json.dumps(meta))

    with ThreadPoolExecutor(max_workers=len(spec.groups)) as pool:
        list(pool.map(one, spec.groups))


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m fleetgate.smoke.on_node SPEC", file=sys.stderr)
        return 2
    doc: Any = json.loads(Path(argv[0]).read_text())
    run(NodeSpec.model_validate(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
