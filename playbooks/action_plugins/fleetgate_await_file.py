"""Hold a play until a file exists, on the controller where Ansible runs:
- the rollout batch worker's word that it has journalled what the play read so far;
- the controller's release of a batch run started ahead of its turn (`expect: go`), which
  fails instead, touching no host, when the file says anything else (`cancel`) or the
  controller that holds the run is gone (`owner_pid`, `owner_start`).

See playbooks/rollout-before.yml and rollout/ahead.py. An action plugin, not a module: it
runs inside Ansible on the controller, where the files are written, and costs no Python
start on any host. It polls every 10 ms, since every millisecond it waits is a millisecond
of the batch.
"""

from __future__ import annotations

import os
import time
from typing import Any

from ansible.plugins.action import ActionBase

from fleetgate.system.procs import proc_start

DOCUMENTATION = r"""
action: fleetgate_await_file
short_description: Wait on the controller until a file exists
options:
  path:
    description: The file to wait for, on the controller.
    type: path
    required: true
  expect:
    description: >-
      What the file must say (its content, stripped). Any other content fails the task
      with that content as the reason. Unset, any content will do.
    type: str
  owner_pid:
    description: >-
      A process on the controller whose end fails the wait at once (0, none). The file is
      looked at first, so a file written just before that process ended still counts.
    type: int
    default: 0
  owner_start:
    description: >-
      The start time of owner_pid (field 22 of /proc/PID/stat), so that a recycled pid is
      not mistaken for it.
    type: str
    default: ""
  timeout:
    description: Seconds to wait before the task fails.
    type: float
    default: 60
author: fleetgate
"""

POLL_S = 0.01


def _gone(pid: int, start: str) -> bool:
    now = proc_start(pid)
    return not now or (bool(start) and now != start)


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec={
            "path": {"type": "path", "required": True},
            "expect": {"type": "str"},
            "owner_pid": {"type": "int", "default": 0},
            "owner_start": {"type": "str", "default": ""},
            "timeout": {"type": "float", "default": 60.0},
        })
        path, timeout, owner = args["path"], args["timeout"], args["owner_pid"]
        deadline = time.monotonic() + timeout
        while not os.path.exists(path):
            if owner and _gone(owner, args["owner_start"]):
                result.update(failed=True, msg=f"the controller (pid {owner}) is gone")
                return result
            if time.monotonic() > deadline:
                result.update(failed=True, msg=f"{path} did not appear within {timeout:g} s")
                return result
            time.sleep(POLL_S)
        if args["expect"] is not None:
            with open(path, encoding="utf-8", errors="replace") as f:
                said = f.read().strip()
            if said != args["expect"]:
                result.update(failed=True, msg=f"{path} says {said!r}, not {args['expect']!r}")
                return result
        result.update(changed=False, msg=f"{path} is there")
        return result
