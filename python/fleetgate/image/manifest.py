"""The image manifest: the image's own node manifest (what node_manifest recorded inside the
image and the in-image gate verified), plus how the image was built, plus a per-component table
of the class's pin beside what the image has.

Written as `manifest.json` beside the artifact. Pure functions: the build gathers the inputs.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from fleetgate.errors import FleetgateError
from fleetgate.spec.schema import ENGINE_PACKAGES, NodeClass

IMAGE_MANIFEST_SCHEMA = 1
# Parts of a class a build may leave out, with --omit, where this machine cannot reach their
# source. The image records each omission; its manifest never claims the part.
OMITTABLE = ("gpu-toolkit",)


class ImageCheckFailed(FleetgateError):
    """The finished image does not hold together (its files disagree with each other)."""


def manifest_digest(node_manifest: dict[str, Any]) -> str:
    """sha256 of a node manifest's canonical JSON: the same for an image's record and for the
    file a host holds, whatever whitespace or key order either was written with."""
    canonical = json.dumps(node_manifest, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def package_list_sha256(packages_txt: str) -> str:
    """Same definition as node_manifest's: sorted `Package=Version` lines, each ending in \\n."""
    lines = sorted(line for line in packages_txt.splitlines() if line)
    return hashlib.sha256("".join(f"{line}\n" for line in lines).encode()).hexdigest()


def _row(component: str, name: str, expected: str | None, verified: str | None,
         *, omitted: bool = False) -> dict[str, Any]:
    status = "omitted" if omitted else ("ok" if expected == verified else "drift")
    return {"component": component, "name": name, "expected": expected, "verified": verified,
            "status": status}


def components(nc: NodeClass, node_manifest: dict[str, Any],
               omitted: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Each component the class pins: its expected version beside the verified one."""
    verified = node_manifest.get("verified") or {}
    kernel = verified.get("kernel") or {}
    packages: dict[str, Any] = verified.get("packages") or {}
    abi = nc.kernel.abi
    rows = [
        _row("kernel", f"linux-image-{abi}", nc.kernel.package_version,
             kernel.get("package_version")),
        _row("kernel-default-boot", "/vmlinuz", abi, kernel.get("default_boot")),
    ]
    for pkg in nc.driver.packages:
        rows.append(_row("driver", pkg, nc.driver.version, packages.get(pkg)))
    dkms = verified.get("dkms") or []
    for mod in nc.dkms:
        hits = [e for e in dkms if e.get("name") == mod.name and e.get("kernel") == abi]
        have = next((f"{e['version']} {e['status']}" for e in hits
                     if e.get("status") == "installed"), None)
        if have is None and hits:
            have = f"{hits[0].get('version')} {hits[0].get('status')}"
        rows.append(_row("dkms", f"{mod.name} for {abi}", f"{mod.version} installed", have))
    rt = nc.runtime
    if rt.engine != "none":
        pkg = ENGINE_PACKAGES[rt.engine]
        rows.append(_row("runtime", pkg, rt.version, packages.get(pkg)))
    if rt.gpu_toolkit != "none":
        rows.append(_row("gpu-toolkit", rt.gpu_toolkit, rt.gpu_toolkit_version,
                         packages.get(rt.gpu_toolkit), omitted="gpu-toolkit" in omitted))
    return rows


def check_image(node_manifest: dict[str, Any], packages_txt: str, nc: NodeClass,
                rows: list[dict[str, Any]]) -> None:
    """Cross-check what the gate copied out of the image before the image is published."""
    if node_manifest.get("class") != nc.name:
        raise ImageCheckFailed(f"image manifest is for class {node_manifest.get('class')!r}",
                               source="image-manifest.json", field="class")
    if node_manifest.get("drift"):
        raise ImageCheckFailed(f"{len(node_manifest['drift'])} drift entries",
                               source="image-manifest.json", field="drift")
    recorded = node_manifest.get("package_list_sha256")
    actual = package_list_sha256(packages_txt)
    if recorded != actual:
        raise ImageCheckFailed(f"package list hash {actual} does not match the manifest's "
                               f"{recorded}", source="packages.txt")
    bad = [r for r in rows if r["status"] == "drift"]
    if bad:
        r = bad[0]
        raise ImageCheckFailed(f"{r['name']}: expected {r['expected']}, image has "
                               f"{r['verified']}", source="image-manifest.json",
                               field=f"components.{r['component']}")


def assemble(node_manifest: dict[str, Any], *, image: dict[str, Any], build: dict[str, Any],
             rows: list[dict[str, Any]]) -> dict[str, Any]:
    """manifest.json: the node manifest as the image carries it, plus image, build and
    components. The node manifest's own keys stay at the top level, unchanged, so tools that
    read /etc/fleetgate/manifest.json read this file the same way."""
    return {**node_manifest, "image_manifest_schema": IMAGE_MANIFEST_SCHEMA, "image": image,
            "build": build, "components": rows}


def node_part(manifest: dict[str, Any]) -> dict[str, Any]:
    """The node manifest inside an image manifest (what /etc/fleetgate/manifest.json holds)."""
    extra = {"image_manifest_schema", "image", "build", "components"}
    return {k: v for k, v in manifest.items() if k not in extra}
