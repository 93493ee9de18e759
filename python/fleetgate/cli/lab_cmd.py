"""`fleetgate lab`: a real local fleet of SSH hosts (podman containers, qemu VMs) on loopback."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Literal, get_args

import typer

from fleetgate.cli import output as ui
from fleetgate.errors import BadInput
from fleetgate.image.lab_images import LabImages, reimage_source, resolve_lab_images
from fleetgate.isotime import iso
from fleetgate.lab import fleet
from fleetgate.lab.inventory import write_inventory
from fleetgate.lab.paths import LabPaths, default_lab_dir
from fleetgate.lab.state import FaultKind, state_lock
from fleetgate.system.podman import Podman

app = typer.Typer(help="The local lab fleet.", no_args_is_help=True)


@app.callback()
def _lab(
    ctx: typer.Context,
    lab_dir: Annotated[Path | None, typer.Option(
        "--lab-dir", envvar="FLEETGATE_LAB_DIR", help="Lab state directory.")] = None,
) -> None:
    ctx.obj = LabPaths((lab_dir or default_lab_dir()).resolve())


@app.command()
@ui.documented([
    "fleetgate lab up --containers 4",
    "fleetgate lab --lab-dir /tmp/lab up --containers 8",
    "fleetgate lab up --containers 3 --slurm",
    "fleetgate lab up --containers 12 --execution-nodes 2",
], "0 ok, 2 bad input, 3 the lab could not be brought up")
def up(
    ctx: typer.Context,
    containers: Annotated[int, typer.Option(min=0, max=200)] = 6,
    vms: Annotated[int, typer.Option(min=0, max=8)] = 0,
    container_class: str = "lab-cpu",
    vm_class: str = "lab-vm",
    image: Annotated[list[str] | None, typer.Option(
        "--image", metavar="CLASS:VERSION",
        help="Start hosts from a built golden image (repeatable: one container, one VM class)."
    )] = None,
    images_dir: Annotated[Path | None, typer.Option(
        "--images-dir", help="Image store (default: $FLEETGATE_IMAGES_DIR or .fleetgate/images).")]
    = None,
    image_hosts: Annotated[Literal["class", "container", "vm"], typer.Option(
        "--image-hosts",
        help="Which hosts --image starts: the kind its class's lab.kind names, or container or "
             "VM hosts whatever the class says (a GPU class's image as a container host is how "
             "its driver role is tested without a GPU).")] = "class",
    with_slurm: Annotated[bool, typer.Option(
        "--slurm",
        help="Make the container hosts a Slurm cluster (Debian's Slurm 22.05 with MUNGE): "
             "slurmctld on the first, slurmd on each; the inventory marks them "
             "fleetgate_slurm_node / fleetgate_slurm_controller.")] = False,
    execution_nodes: Annotated[int, typer.Option(
        "--execution-nodes", min=0, max=9,
        help="Also start N execution nodes (lab-x01...): ansible-runner workers a plan's "
             "`execution` section sends batches to; inventory group "
             "fleetgate_execution_nodes.")] = 0,
) -> None:
    """Start N container hosts and M VM hosts, wait for SSH on each, write the inventory."""
    paths: LabPaths = ctx.obj
    imgs = LabImages()
    if image:
        imgs = resolve_lab_images(image, Podman(paths.containers_conf), images_root=images_dir,
                                  containers=containers, vms=vms,
                                  as_kind=None if image_hosts == "class" else image_hosts)
    state = fleet.up(paths, containers=containers, vms=vms,
                     container_class=imgs.container_class or container_class,
                     vm_class=imgs.vm_class or vm_class,
                     container_image=imgs.container_image,
                     container_image_id=imgs.container_image_id, vm_rootfs=imgs.vm_rootfs,
                     vm_image=imgs.vm_image, vm_image_id=imgs.vm_image_id,
                     with_slurm=with_slurm, execution_nodes=execution_nodes,
                     note=_progress)
    ui.console.print(f"lab up: {len(state.hosts)} host(s)"
                     + (f", {len(state.execution_nodes)} execution node(s)"
                        if state.execution_nodes else "")
                     + f"; inventory {paths.inventory}"
                     + (f"; Slurm controller {state.slurm.controller}" if state.slurm else ""))


def _progress(message: str) -> None:
    # Timestamped and flushed, on stdout like `rollout start`'s and `image build`'s lines: a
    # CI log shows each stage as it happens; stderr stays for the one-line error.
    print(f"{iso(time.time())} lab up: {message}", flush=True)


@app.command()
@ui.documented([
    "fleetgate lab status",
    "fleetgate lab status --json",
    "fleetgate lab status -o wide",
], "0 ok, 3 lab error")
def status(
    ctx: typer.Context,
    as_json: ui.JsonFlag = False,
    output: ui.OutputOpt = None,
) -> None:
    """Host, kind, class, port, pool, running, reachable over SSH, active faults."""
    out = ui.fmt(as_json, output)
    rows = fleet.status(ctx.obj)
    if out is ui.Output.json:
        ui.print_json([{**s.host.model_dump(), "running": s.running, "reachable": s.reachable}
                       for s in rows])
        return
    ui.print_rows(("host", "kind", "class", "port", "pool", "rack/zone", "running", "ssh",
                   "faults"),
                  [(s.host.name, s.host.kind, s.host.node_class, s.host.port, s.host.pool,
                    f"{s.host.rack}/{s.host.zone}", "yes" if s.running else "no",
                    "ok" if s.reachable else "down", ",".join(s.host.faults) or "-")
                   for s in rows], out)


@app.command()
@ui.documented([
    "fleetgate lab inventory",
], "0 ok, 3 lab error")
def inventory(ctx: typer.Context) -> None:
    """(Re)write the lab's Ansible inventory and print its path."""
    paths: LabPaths = ctx.obj
    print(write_inventory(paths, fleet.require_state(paths)))


@app.command()
@ui.documented([
    "fleetgate lab down",
    "fleetgate lab --lab-dir /tmp/lab down",
], "0 ok, 3 lab error")
def down(ctx: typer.Context) -> None:
    """Remove every host of this lab and its state; leaves no container, process or port."""
    removed = fleet.down(ctx.obj)
    ui.console.print(f"lab down: removed {len(removed)} host(s)")


@app.command()
@ui.documented([
    "fleetgate lab fault lab-c02 unreachable",
], "0 ok, 2 bad input, 3 lab error")
def fault(
    ctx: typer.Context,
    host: Annotated[str, typer.Argument()],
    kind: Annotated[str, typer.Argument(
        help=" | ".join(get_args(FaultKind)))],
) -> None:
    """Inject a real fault into one host."""
    kinds = get_args(FaultKind)
    if kind not in kinds:
        raise BadInput(f"unknown fault kind (known: {', '.join(kinds)})", source="KIND",
                       field=kind)
    fleet.fault(ctx.obj, host, kind)  # type: ignore[arg-type]
    ui.console.print(f"{host}: fault {kind} injected")


@app.command()
@ui.documented([
    "fleetgate lab heal lab-c02",
], "0 ok, 2 bad input, 3 lab error")
def heal(ctx: typer.Context, host: Annotated[str, typer.Argument()]) -> None:
    """Undo every fault on a host and wait until it answers SSH again."""
    healed = fleet.heal_host(ctx.obj, host)
    ui.console.print(f"{host}: healed {', '.join(healed) or 'nothing'}")


@app.command()
@ui.documented([
    "fleetgate lab reimage lab-c02 --image lab-cpu:2",
    "fleetgate lab --lab-dir /tmp/lab reimage lab-c01 --image lab-cpu:1",
], "0 re-imaged or already on the image, 2 bad input (unknown or damaged image), 3 lab error")
def reimage(
    ctx: typer.Context,
    host: Annotated[str, typer.Argument()],
    image: Annotated[str, typer.Option("--image", metavar="CLASS:VERSION",
                                       help="The built golden image to put on the host.")],
    images_dir: Annotated[Path | None, typer.Option(
        "--images-dir", help="Image store (default: $FLEETGATE_IMAGES_DIR or .fleetgate/images).")]
    = None,
) -> None:
    """Re-image one lab host from a golden image, the lab's provider for playbooks/reimage.yml:
    a container host gets a new container, a VM host a new disk, booted. The host keeps its
    name, SSH port and host key; a host already on the image is left alone."""
    paths: LabPaths = ctx.obj
    kind = fleet.require_state(paths).host(host).kind
    # One import of the image however many hosts of a batch ask for it at once.
    with state_lock(paths.state):
        ref, image_id, rootfs = reimage_source(image, Podman(paths.containers_conf),
                                               images_root=images_dir, kind=kind)
    changed = fleet.reimage(paths, host, image=ref, image_id=image_id, vm_rootfs=rootfs)
    ui.console.print(f"{host}: {'re-imaged to' if changed else 'already on'} {image_id}")
