"""Hold a play until a file exists: the rollout batch worker's word that it has journalled
what the play read so far (playbooks/rollout-before.yml).

An action plugin, not a module: it runs inside Ansible on the controller, where the worker
writes the file, and costs no Python start on any host. It polls every 10 ms, since every
millisecond it waits is a millisecond of the batch.
"""

from __future__ import annotations

import os
import time
from typing import Any

from ansible.plugins.action import ActionBase

DOCUMENTATION = r"""
action: fleetgate_await_file
short_description: Wait on the controller until a file exists
options:
  path:
    description: The file to wait for, on the controller.
    type: path
    required: true
  timeout:
    description: Seconds to wait before the task fails.
    type: float
    default: 60
author: fleetgate
"""

POLL_S = 0.01


class ActionModule(ActionBase):  # type: ignore[misc]
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec={
            "path": {"type": "path", "required": True},
            "timeout": {"type": "float", "default": 60.0},
        })
        path, timeout = args["path"], args["timeout"]
        deadline = time.monotonic() + timeout
        while not os.path.exists(path):
            if time.monotonic() > deadline:
                result.update(failed=True, msg=f"{path} did not appear within {timeout:g} s")
                return result
            time.sleep(POLL_S)
        result.update(changed=False, msg=f"{path} is there")
        return result
