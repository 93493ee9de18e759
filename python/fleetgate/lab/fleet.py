"""Bring a local lab fleet up, report on it, fault it, and take it down without leftovers."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from fleetgate.errors import BadInput, LabError, ToolError
from fleetgate.lab import container_hosts, slurm, vm_hosts
from fleetgate.lab.faults import heal, inject
from fleetgate.lab.inventory import write_inventory
from fleetgate.lab.keys import (
    CONNECT_TIMEOUT_S,
    close_control_masters,
    ensure_client_key,
    host_key,
    new_control_dir,
    ssh_argv,
    write_known_hosts,
)
from fleetgate.lab.paths import LabPaths
from fleetgate.lab.ports import free_port, is_listening
from fleetgate.lab.state import (
    FaultKind,
    LabHost,
    LabState,
    load_state,
    save_state,
    state_lock,
)
from fleetgate.spec.loader import resolve_class
from fleetgate.spec.schema import NodeClass
from fleetgate.system.podman import Podman
from fleetgate.system.procs import log_to, pid_alive, run
from fleetgate.system.recipes import import_base, slurm_recipe, vm_recipe

CONTAINER_SSH_TIMEOUT = 60.0
VM_SSH_TIMEOUT = 300.0  # TCG boots take ~20 s idle, far longer on a busy 2-core machine
# While hosts boot, a line at least this often says which are still awaited: a VM under
# emulation can take minutes, and a CI log that goes quiet looks hung.
WAIT_NOTE_S = 30.0
RACKS = ("rack1", "rack2", "rack3")
ZONE_OF_RACK = {"rack1": "zone-a", "rack2": "zone-a", "rack3": "zone-b"}


@dataclass(frozen=True)
class HostStatus:
    host: LabHost
    running: bool
    reachable: bool


def _pools(n: int) -> list[str]:
    """One canary, then the rest split into two waves (the smaller wave first)."""
    if n == 0:
        return []
    rest = n - 1
    wave1 = rest // 2 or rest
    return ["pool_canary"] + ["pool_wave1"] * wave1 + ["pool_wave2"] * (rest - wave1)


def _plan_hosts(
    paths: LabPaths, n: int, kind: str, nc: NodeClass, image: str, prefix: str, ports: set[int],
    offset: int,
) -> list[LabHost]:
    hosts = []
    for i, pool in enumerate(_pools(n)):
        name = f"{prefix}{i + 1:02d}"
        rack = RACKS[(offset + i) % len(RACKS)]
        hosts.append(LabHost(
            name=name, kind=kind,
            node_class=nc.name, port=free_port(ports), rack=rack, zone=ZONE_OF_RACK[rack],
            pool=pool, image=image,
            runtime_name=container_hosts.container_name(paths, name) if kind == "container"
            else name,
        ))
    return hosts


def ssh_ok(paths: LabPaths, host: LabHost) -> bool:
    try:
        proc = run(ssh_argv(paths, host, "true"), timeout=CONNECT_TIMEOUT_S[host.kind] + 5,
                   check=False)
    except ToolError:
        return False
    return proc.returncode == 0


def wait_for_ssh(paths: LabPaths, host: LabHost, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if is_listening(host.port) and ssh_ok(paths, host):
            return
        if host.kind == "vm" and not pid_alive(host.supervisor_pid):
            raise LabError("VM supervisor exited during boot (see supervisor.log, boots.jsonl)",
                           source=host.name)
        time.sleep(1)
    raise LabError(f"no SSH after {timeout:.0f}s", source=host.name, field=f"port {host.port}")


def up(
    paths: LabPaths,
    *,
    containers: int,
    vms: int,
    container_class: str = "lab-cpu",
    vm_class: str = "lab-vm",
    container_image: str | None = None,
    container_image_id: str | None = None,
    vm_rootfs: Path | None = None,
    vm_image: str | None = None,
    vm_image_id: str | None = None,
    with_slurm: bool = False,
    execution_nodes: int = 0,
    note: Callable[[str], None] = lambda _msg: None,
) -> LabState:
    """Bring a lab up; `note` gets one line per stage (images, each host started, each host
    answering SSH, the Slurm cluster) and a line every WAIT_NOTE_S while hosts boot."""
    if execution_nodes < 0 or execution_nodes > 9:
        raise BadInput("give 0 to 9 execution nodes", source="--execution-nodes")
    if containers < 0 or vms < 0 or containers + vms == 0:
        raise BadInput("need at least one host, and no negative counts", source="--containers")
    if with_slurm and containers == 0:
        raise BadInput("a Slurm cluster runs on container hosts; give --containers 1 or more",
                       source="--slurm")
    if with_slurm and container_image is not None:
        raise BadInput("Slurm hosts start from the lab's Slurm base image, not a golden image; "
                       "drop --image for container hosts or --slurm", source="--slurm")
    existing = load_state(paths.state)
    if existing is not None and existing.hosts:
        raise LabError(f"a lab is already up in {paths.root}; run `fleetgate lab down` first",
                       source=str(paths.state))
    _, cnc = resolve_class(container_class)
    _, vnc = resolve_class(vm_class)
    # A class's lab.kind says how its lab hosts are usually built; an explicit class may still
    # run on the other kind (e.g. a GPU class in a container to build its DKMS modules fast).

    paths.root.mkdir(parents=True, exist_ok=True)
    paths.marker.touch()
    # Beside the lab directory, not in it: a failed `up` takes the lab down again, and the log
    # is what says why.
    with log_to(paths.root.parent / f"{paths.root.name}.up.log") as log:
        note(f"log (podman, mmdebstrap, qemu tools): {log}")
        return _up(paths, containers, vms, cnc, vnc, (container_image, container_image_id),
                   (vm_rootfs, vm_image, vm_image_id), with_slurm, note, execution_nodes)


def _up(paths: LabPaths, containers: int, vms: int, cnc: NodeClass, vnc: NodeClass,
        container: tuple[str | None, str | None],
        vm: tuple[Path | None, str | None, str | None],
        with_slurm: bool, note: Callable[[str], None], execution_nodes: int = 0) -> LabState:
    """`container`: (podman ref, image id) of a golden image for the container hosts;
    `vm`: (rootfs tar, image key, image id) of one for the VM hosts."""
    container_image, container_image_id = container
    vm_rootfs, vm_image, vm_image_id = vm
    ensure_client_key(paths)
    podman = Podman(paths.containers_conf)
    state = LabState(lab_id=paths.lab_id, control_dir=new_control_dir())
    ports: set[int] = set()
    try:
        t0 = time.monotonic()
        if containers:
            image = (import_base(podman, slurm_recipe(cnc)) if with_slurm
                     else container_image or container_hosts.ensure_base_image(podman, cnc))
            note(f"container image {image} ready ({time.monotonic() - t0:.0f}s)")
            planned = _plan_hosts(paths, containers, "container", cnc, image, "lab-c", ports, 0)
            for h in planned:
                h.image_id = container_image_id
            state.hosts += planned
        if vms:
            key = vm_image or vm_recipe(vnc).key()
            planned = _plan_hosts(paths, vms, "vm", vnc, key, "lab-v", ports, containers)
            for h in planned:
                h.image_id = vm_image_id
            state.hosts += planned
        if execution_nodes:
            t0 = time.monotonic()
            ximage = container_hosts.ensure_execution_node_image(podman, cnc)
            note(f"execution-node image {ximage} ready ({time.monotonic() - t0:.0f}s)")
            state.execution_nodes = [LabHost(
                name=f"lab-x{i + 1:02d}", kind="container", node_class=cnc.name,
                port=free_port(ports), rack="", zone="", pool="", image=ximage,
                runtime_name=container_hosts.container_name(paths, f"lab-x{i + 1:02d}"))
                for i in range(execution_nodes)]
        write_known_hosts(paths, {h.port: host_key(paths, h.name)
                                  for h in [*state.hosts, *state.execution_nodes]})
        save_state(paths.state, state)
        for h in state.hosts:
            if h.kind == "container":
                container_hosts.start_container(podman, paths, h)
            else:
                vm_hosts.make_disk(paths, h, vnc, vm_rootfs)
                h.supervisor_pid = vm_hosts.start_vm(paths, h)
            save_state(paths.state, state)
            note(f"{h.name} started ({h.kind}, {h.node_class}, ssh port {h.port})")
        for x in state.execution_nodes:
            container_hosts.start_execution_node(podman, paths, x, state.control_dir)
            save_state(paths.state, state)
            note(f"{x.name} started (execution node, ssh port {x.port})")
        write_inventory(paths, state)
        _wait_all(paths, [*state.hosts, *state.execution_nodes], note)
        if with_slurm:
            t0 = time.monotonic()
            state.slurm = slurm.start(podman, paths,
                                      [h for h in state.hosts if h.kind == "container"])
            save_state(paths.state, state)
            write_inventory(paths, state)
            note(f"Slurm cluster up: slurmctld on {state.slurm.controller}, "
                 f"{len(state.slurm.nodes)} node(s) idle ({time.monotonic() - t0:.0f}s)")
    except BaseException:
        # Never strand half a lab: whatever started is taken down again.
        down(paths)
        raise
    return state


def _wait_all(paths: LabPaths, hosts: list[LabHost], note: Callable[[str], None]) -> None:
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=8) as pool:
        pending: dict[Future[None], LabHost] = {
            pool.submit(wait_for_ssh, paths, h,
                        CONTAINER_SSH_TIMEOUT if h.kind == "container" else VM_SSH_TIMEOUT): h
            for h in hosts}
        while pending:
            done, _ = wait(pending, timeout=WAIT_NOTE_S, return_when=FIRST_COMPLETED)
            for f in done:
                h = pending.pop(f)
                f.result()
                note(f"{h.name} answers SSH ({time.monotonic() - t0:.0f}s)")
            if not done:
                note(f"waiting for SSH on {', '.join(sorted(h.name for h in pending.values()))} "
                     f"({time.monotonic() - t0:.0f}s)")


def require_state(paths: LabPaths) -> LabState:
    state = load_state(paths.state)
    if state is None or not state.hosts:
        raise LabError(f"no lab is up in {paths.root}; run `fleetgate lab up`",
                       source=str(paths.state))
    return state


def status(paths: LabPaths) -> list[HostStatus]:
    state = require_state(paths)
    podman = Podman(paths.containers_conf)

    def one(h: LabHost) -> HostStatus:
        if h.kind == "container":
            out = podman("inspect", "--format", "{{.State.Running}}", h.runtime_name,
                         check=False).stdout.strip()
            running = out == "true"
        else:
            running = pid_alive(h.supervisor_pid)
        reachable = running and is_listening(h.port) and ssh_ok(paths, h)
        return HostStatus(h, running, reachable)

    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(one, [*state.hosts, *state.execution_nodes]))


def down(paths: LabPaths) -> list[str]:
    """Remove every container labelled with this lab, stop every VM, delete the lab dir."""
    removed: list[str] = []
    state = load_state(paths.state) if paths.state.exists() else None
    if shutil.which("podman"):
        removed += container_hosts.remove_containers(Podman(paths.containers_conf), paths)
    vm_hosts_known = [h for h in (state.hosts if state else []) if h.kind == "vm"]
    for h in vm_hosts_known:
        vm_hosts.stop_vm(paths, h)
        removed.append(h.name)
    # VM dirs with no state entry (a crash between start and save) still get stopped.
    hosts_root = paths.root / "hosts"
    if hosts_root.is_dir():
        for hdir in hosts_root.iterdir():
            if (hdir / "qemu.pid").exists():
                ghost = LabHost(name=hdir.name, kind="vm", node_class="unknown", port=1024,
                                rack="", zone="", pool="", image="", runtime_name=hdir.name)
                vm_hosts.stop_vm(paths, ghost)
    close_control_masters(state.control_dir if state else None)
    if paths.marker.exists():
        shutil.rmtree(paths.root)
    return removed


# An execution node shares the machine's network namespace: a network cut there would cut
# the whole machine, so only faults that stay inside its container apply.
EXEC_NODE_FAULTS = ("stop", "throttle-cpu")


def fault(paths: LabPaths, host_name: str, kind: FaultKind) -> LabHost:
    state = require_state(paths)
    host = state.host(host_name)
    if host in state.execution_nodes and kind not in EXEC_NODE_FAULTS:
        raise BadInput(f"an execution node takes only {' or '.join(EXEC_NODE_FAULTS)} (it "
                       "shares the machine's network)", source=host_name, field="fault")
    inject(paths, Podman(paths.containers_conf), host, kind)
    save_state(paths.state, state)
    return host


def heal_host(paths: LabPaths, host_name: str, *, wait: bool = True) -> list[str]:
    state = require_state(paths)
    host = state.host(host_name)
    healed = heal(paths, Podman(paths.containers_conf), host)
    save_state(paths.state, state)
    if wait and healed:
        wait_for_ssh(paths, host, CONTAINER_SSH_TIMEOUT if host.kind == "container"
                     else VM_SSH_TIMEOUT)
    return healed


def reimage(paths: LabPaths, host_name: str, *, image: str, image_id: str,
            vm_rootfs: Path | None = None) -> bool:
    """The lab's re-imaging provider. A container host gets a new container from `image` (a
    podman ref of a golden image); a VM host a new disk from `vm_rootfs` (the image's rootfs
    tar), booted. Either keeps its name, SSH port, host key and authorized key, so the
    inventory and known_hosts stay valid. Idempotent by image id: a running host that already
    reports `image_id` is left alone (False). Each host it makes is recorded in
    hosts/NAME/reimages.jsonl, outside the host: what counts re-images after a crash."""
    podman = Podman(paths.containers_conf)
    with state_lock(paths.state):
        state = require_state(paths)
        host = state.host(host_name)
        if host.kind == "vm" and vm_rootfs is None:
            raise BadInput("a VM host is re-imaged from a VM image's rootfs", source="--image",
                           field=host_name)
        if host.kind == "container":
            running = podman("inspect", "--format", "{{.State.Running}}", host.runtime_name,
                             check=False).stdout.strip() == "true"
        else:
            running = pid_alive(host.supervisor_pid)
        if running and host.image_id == image_id:
            return False
        host.image, host.image_id, host.faults = image, image_id, []
        save_state(paths.state, state)
    # Outside the lock: the other hosts of the batch are re-imaged meanwhile.
    if host.kind == "container":
        podman("rm", "--force", "--time", "0", host.runtime_name, check=False)
        made = container_hosts.start_container(podman, paths, host)
    else:
        vm_hosts.stop_vm(paths, host)
        (paths.host_dir(host.name) / "disk.raw").unlink(missing_ok=True)
        _, nc = resolve_class(host.node_class)
        made = str(vm_hosts.make_disk(paths, host, nc, vm_rootfs))
        pid = vm_hosts.start_vm(paths, host)
        with state_lock(paths.state):
            state = require_state(paths)
            state.host(host_name).supervisor_pid = pid
            save_state(paths.state, state)
        host.supervisor_pid = pid
    with (paths.host_dir(host.name) / "reimages.jsonl").open("a") as log:
        log.write(json.dumps({"event": "reimage", "image_id": image_id, "made": made,
                              "ts": time.time()}) + "\n")
    wait_for_ssh(paths, host, CONTAINER_SSH_TIMEOUT if host.kind == "container"
                 else VM_SSH_TIMEOUT)
    return True
