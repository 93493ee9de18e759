"""`fleetgate image`: golden images per node class (Packer + the same roles as live hosts)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from fleetgate.cli import output as ui
from fleetgate.errors import BadInput
from fleetgate.image import store
from fleetgate.image.build import BuildOptions, Source, build_image
from fleetgate.image.naming import parse_ref
from fleetgate.image.progress import make_reporter

app = typer.Typer(help="Golden images: build, list, show.", no_args_is_help=True)

OutOpt = Annotated[Path | None, typer.Option(
    "--out", help="Image store directory (default: $FLEETGATE_IMAGES_DIR or .fleetgate/images).")]


def _size(n: int) -> str:
    return f"{n / 1e6:.0f} MB" if n < 1e9 else f"{n / 1e9:.2f} GB"


@app.command()
@ui.documented([
    "fleetgate image build lab-cpu",
    "fleetgate image build lab-vm --source qemu --accelerator kvm --force",
], "0 built, 1 the build failed (the log says where), 2 bad input")
def build(
    node_class: Annotated[str, typer.Argument(metavar="CLASS", help="Class name or file.")],
    source: Annotated[Source, typer.Option(help="docker: rootfs tar; qemu: bootable disk.")]
    = "docker",
    out: OutOpt = None,
    force: Annotated[bool, typer.Option(help="Rebuild an existing image version.")] = False,
    vendor_debs: Annotated[Path | None, typer.Option(
        "--vendor-debs", help="Directory of .deb files offered to apt during the build.")] = None,
    omit: Annotated[list[str] | None, typer.Option(
        help="Leave out a part this machine cannot fetch (gpu-toolkit); recorded.")] = None,
    accelerator: Annotated[str, typer.Option(help="qemu source: tcg or kvm.")] = "tcg",
    timeout: Annotated[int, typer.Option(min=60, max=86400, help="Seconds Packer may run.")]
    = 7200,
) -> None:
    """Build CLASS's golden image into OUT/<class>-<version>/ (refused if it exists)."""
    if accelerator not in ("tcg", "kvm"):
        raise BadInput("expected tcg or kvm", source="--accelerator", field=accelerator)
    opts = BuildOptions(node_class=node_class, source=source, out=out, force=force,
                        vendor_debs=vendor_debs, omit=tuple(omit or ()),
                        accelerator=accelerator, timeout=timeout)
    result = build_image(opts, make_reporter(ui.console))
    img = result.image
    m = img.manifest["image"]
    phases = ", ".join(f"{k} {v:.0f}s" for k, v in result.phases.items())
    ui.console.print(f"[green]image {img.name}[/green]: {img.path} ({m['artifact']} "
                     f"{_size(int(m['artifact_bytes']))}, {result.seconds:.0f}s: {phases})")


def _summary(img: store.StoredImage) -> dict[str, Any]:
    m = img.manifest
    image, build_info = m.get("image", {}), m.get("build", {})
    return {
        "name": img.name, "class": img.node_class, "version": img.version,
        "source": img.source, "path": str(img.path), "artifact": image.get("artifact"),
        "artifact_bytes": image.get("artifact_bytes"), "built_at": image.get("built_at"),
        "kernel": m.get("expected", {}).get("kernel", {}).get("abi"),
        "git_revision": build_info.get("git_revision"), "git_dirty": build_info.get("git_dirty"),
        "omitted": build_info.get("omitted", []),
    }


@app.command("list")
@ui.documented([
    "fleetgate image list",
    "fleetgate image list --json",
    "fleetgate image list -o wide | grep lab-cpu",
])
def list_(out: OutOpt = None, as_json: ui.JsonFlag = False, output: ui.OutputOpt = None) -> None:
    """Every image in the store, oldest version first."""
    form = ui.fmt(as_json, output)
    images = store.list_images(store.images_dir(out))
    if form is ui.Output.json:
        ui.print_json([_summary(i) for i in images])
        return
    rows = []
    for i in images:
        s = _summary(i)
        rev = str(s["git_revision"] or "?") + ("+dirty" if s["git_dirty"] else "")
        rows.append((i.name, i.node_class, i.version, i.source, s["kernel"],
                     _size(int(s["artifact_bytes"] or 0)), s["built_at"], rev))
    ui.print_rows(("image", "class", "version", "source", "kernel", "size", "built", "git"),
                  rows, form)
    if not images:
        ui.console.print(f"no images in {store.images_dir(out)}")


@app.command()
@ui.documented([
    "fleetgate image show lab-cpu-2",
    "fleetgate image show lab-cpu-2 --json",
])
def show(
    ref: Annotated[str, typer.Argument(metavar="CLASS[:VERSION]")],
    out: OutOpt = None,
    as_json: ui.JsonFlag = False,
    output: ui.OutputOpt = None,
) -> None:
    """One image: its build record and each component's expected beside verified version
    (JSON: the whole manifest.json)."""
    form = ui.fmt(as_json, output)
    img = store.find_image(store.images_dir(out), parse_ref(ref))
    if form is ui.Output.json:
        ui.print_json(img.manifest)
        return
    s = _summary(img)
    b = img.manifest.get("build", {})
    ui.console.print(f"[bold]{ui.esc(img.name)}[/bold]  {ui.esc(img.path)}")
    for key in ("source", "artifact", "built_at", "git_revision"):
        ui.console.print(f"  {key}: {ui.esc(s[key])}")
    ui.console.print(f"  git_dirty: {s['git_dirty']}")
    ui.console.print(f"  template_sha256: {ui.esc(b.get('template_sha256'))}")
    ui.console.print(f"  base_image: {ui.esc(b.get('base_image', {}).get('ref'))}")
    ui.console.print(f"  package_list_sha256: {ui.esc(img.manifest.get('package_list_sha256'))}")
    if s["omitted"]:
        ui.console.print(f"  [yellow]omitted: {ui.esc(', '.join(s['omitted']))}[/yellow]")
    ui.print_rows(("component", "name", "expected", "verified", "status"),
                  [(r["component"], r["name"], r["expected"], r["verified"], r["status"])
                   for r in img.manifest.get("components", [])], form)
