"""podman as the container engine of the lab and of image builds, always under a
CONTAINERS_CONF fleetgate writes itself.

Rootful podman here needs runc (crun fails) and explicit ulimits; see DESIGN.md.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from fleetgate.system.procs import require_tool, run

CONTAINERS_CONF = """\
# Written by fleetgate lab. Rootful podman on these hosts needs runc and explicit ulimits.
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1000:1000"]

[engine]
runtime = "runc"
"""

# Everything fleetgate leaves in podman carries this label (lab containers, imported images),
# so cleanup can find it; the value predates the system layer and stays for existing stores.
LABEL = "io.fleetgate.lab"


class Podman:
    def __init__(self, conf: Path):
        self.binary = require_tool("podman", "podman")
        self.conf = conf
        if not conf.exists() or conf.read_text() != CONTAINERS_CONF:
            conf.parent.mkdir(parents=True, exist_ok=True)
            conf.write_text(CONTAINERS_CONF)
        self.env = {**os.environ, "CONTAINERS_CONF": str(conf)}

    def __call__(
        self, *args: str, timeout: float = 120, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return run([self.binary, *args], timeout=timeout, env=self.env, check=check)

    def image_exists(self, ref: str) -> bool:
        return self("image", "exists", ref, check=False).returncode == 0

    def container_pid(self, name: str) -> int:
        out = self("inspect", "--format", "{{.State.Pid}}", name).stdout.strip()
        return int(out)

    def containers_with_label(self, value: str) -> list[str]:
        out = self("ps", "-a", "--filter", f"label={LABEL}={value}", "--format", "{{.Names}}")
        return [n for n in out.stdout.split() if n]
