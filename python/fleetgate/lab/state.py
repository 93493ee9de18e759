"""The lab's record of its hosts, written atomically after every change."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from fleetgate.errors import BadInput, validation_error
from fleetgate.inputs import read_input

# Where a host made from a golden image reads the image id (`<name>:<artifact sha256>`) the
# lab's provider gives it; rollout/image_change.py reads the same path on every host.
IMAGE_ID_FILE = "/etc/fleetgate/image-id"
HOST_NAME_RE = r"^[a-z][a-z0-9-]{0,30}$"
HostName = Annotated[str, StringConstraints(pattern=HOST_NAME_RE)]
FaultKind = Literal["stop", "throttle-cpu", "cut-network", "hang-probe", "nccl-bad-nic",
                    "drift-package"]


class LabHost(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: HostName
    kind: Literal["container", "vm"]
    node_class: str
    port: Annotated[int, Field(ge=1024, le=65535)]
    rack: str
    zone: str
    pool: str
    image: str  # podman image ref, or the VM's base-rootfs cache key
    # The golden image a host was started or re-imaged from, `<name>:<artifact sha256>`; the
    # host reads it at /etc/fleetgate/image-id, as a cloud host reads its AMI from metadata.
    image_id: str | None = None
    runtime_name: str  # podman container name, or the VM's directory name
    supervisor_pid: int | None = None  # VM hosts only
    faults: list[FaultKind] = Field(default_factory=list)


class SlurmCluster(BaseModel):
    """`lab up --slurm`: slurmctld on `controller`, slurmd on every one of `nodes`."""

    model_config = ConfigDict(extra="forbid")

    controller: HostName
    nodes: list[HostName]


class LabState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    lab_id: str
    control_dir: str | None = None
    hosts: list[LabHost] = Field(default_factory=list)
    slurm: SlurmCluster | None = None
    # `lab up --execution-nodes N`: ansible-runner workers, not rollout targets.
    execution_nodes: list[LabHost] = Field(default_factory=list)

    def host(self, name: str) -> LabHost:
        for h in [*self.hosts, *self.execution_nodes]:
            if h.name == name:
                return h
        known = ", ".join(h.name for h in [*self.hosts, *self.execution_nodes]) or "none"
        raise BadInput(f"no such lab host (hosts: {known})", source="HOST", field=name)


def load_state(path: Path) -> LabState | None:
    if not path.exists():
        return None
    try:
        return LabState.model_validate_json(read_input(path))
    except ValidationError as exc:
        raise validation_error(exc, path, what="corrupt lab state") from None


def save_state(path: Path, state: LabState) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state.model_dump(), indent=2))
    os.replace(tmp, path)


@contextmanager
def state_lock(path: Path) -> Iterator[None]:
    """Held across a read-modify-write of the lab state by processes that may run at once
    (playbooks/reimage.yml re-images a batch's hosts in parallel, each through its own
    `fleetgate lab reimage`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield
