"""`fleetgate image build`: node class -> validated, verified, immutable golden image.

Order matters, and every check that can fail on bad input runs before Packer starts:
1. the class (schema + compatibility matrix), the output directory, the version's immutability,
   Packer and the Docker client on PATH, the vendored packages;
2. the base rootfs (mmdebstrap cache) imported into podman, and `apt-get install --simulate`
   of the pinned kernel inside it;
3. Packer, against a private podman API socket, writing into a hidden staging directory;
4. the staging directory is cross-checked (manifest, package list, checksums) and renamed
   into place. Any failure on the way removes it: no artifact directory is left behind.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from fleetgate.errors import BadInput, FleetgateError
from fleetgate.image import manifest as mf
from fleetgate.image import preflight, store
from fleetgate.image.base import BaseImage, ensure_base_image
from fleetgate.image.naming import image_name
from fleetgate.image.packer_run import BuildTracker, run_packer
from fleetgate.image.podman_api import podman_api
from fleetgate.image.progress import Reporter
from fleetgate.image.provenance import (
    git_state,
    sha256_file,
    sha256sums,
    template_files,
    template_sha256,
)
from fleetgate.image.qemu_base import QemuBase, make_qemu_base
from fleetgate.image.vendor import build_repo
from fleetgate.runner.ansible import state_dir
from fleetgate.site import content_env, content_root
from fleetgate.spec.derive import packer_vars
from fleetgate.spec.loader import resolve_class
from fleetgate.spec.schema import NodeClass
from fleetgate.system.podman import Podman
from fleetgate.system.procs import SLOW_STEP_TIMEOUT_S, log_to

Source = Literal["docker", "qemu"]
BUILD_LABEL = "io.fleetgate.image-build"
ARTIFACTS: dict[str, str] = {"docker": "rootfs.tar", "qemu": "disk.raw"}
PACKER_SOURCES: dict[str, str] = {"docker": "docker.rootfs", "qemu": "qemu.disk"}


class BuildFailed(FleetgateError):
    """Packer or the in-image gate failed; nothing was published."""


@dataclass
class BuildOptions:
    node_class: str
    source: Source = "docker"
    out: Path | None = None
    force: bool = False
    vendor_debs: Path | None = None
    omit: tuple[str, ...] = ()
    accelerator: str = "tcg"
    timeout: float = 7200


@dataclass
class BuildResult:
    image: store.StoredImage
    seconds: float
    phases: dict[str, float] = field(default_factory=dict)


def packer_dir() -> Path:
    return content_root() / "packer"


def build_vars(nc: NodeClass, omit: tuple[str, ...]) -> dict[str, Any]:
    """Build-only Ansible variables: what --omit leaves out, and nothing else."""
    out: dict[str, Any] = {}
    for part in omit:
        if part not in mf.OMITTABLE:
            raise BadInput(f"cannot omit {part!r} (omittable: {', '.join(mf.OMITTABLE)})",
                           source="--omit", field=part)
        if part == "gpu-toolkit":
            if nc.runtime.gpu_toolkit == "none":
                raise BadInput(f"class {nc.name} has no GPU toolkit to omit", source="--omit",
                               field=part)
            runtime = nc.runtime.model_dump()
            runtime.update(gpu_toolkit="none", gpu_toolkit_version=None, cdi=False)
            out.update(container_runtime_gpu_toolkit="none", container_runtime_cdi=False,
                       node_manifest_expected_runtime=runtime)
    return out


def _check_inputs(opts: BuildOptions) -> tuple[Path, NodeClass, Path, Path]:
    class_file, nc = resolve_class(opts.node_class)
    root = store.images_dir(opts.out)
    store.check_writable(root)
    final = store.target_dir(root, nc.name, nc.version, force=opts.force)
    if opts.source not in ARTIFACTS:
        raise BadInput("expected docker or qemu", source="--source", field=opts.source)
    preflight.require_packer()
    if opts.source == "docker":
        preflight.require_docker_cli()
    else:
        preflight.require_tool("qemu-system-x86_64", "install Debian's qemu-system-x86")
        preflight.require_tool("qemu-img", "install Debian's qemu-utils")
    if opts.vendor_debs is not None and not opts.vendor_debs.is_dir():
        raise BadInput("not a directory", source="--vendor-debs", field=str(opts.vendor_debs))
    build_vars(nc, opts.omit)
    return class_file, nc, root, final


def _packer_env(extra: dict[str, str], work: Path) -> dict[str, str]:
    bindir = str(Path(sys.executable).parent)  # ansible-playbook of this environment
    return {
        **os.environ,
        "PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "CHECKPOINT_DISABLE": "1",
        "PACKER_NO_COLOR": "1",
        "PACKER_TMP_DIR": str(work / "packer-tmp"),
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(work / "cp"),
        "ANSIBLE_LOCAL_TEMP": str(work / "ansible-tmp"),
        **content_env(),
        **extra,
    }


def _remove_build_containers(podman: Podman, build_id: str) -> None:
    proc = podman("ps", "-a", "-q", "--filter", f"label={BUILD_LABEL}={build_id}", check=False)
    ids = proc.stdout.split()
    if ids:
        podman("rm", "--force", "--time", "0", *ids, check=False, timeout=120)


def _artifact_manifest(tar: Path) -> dict[str, Any] | None:
    with tarfile.open(tar) as tf:
        for name in ("etc/fleetgate/manifest.json", "./etc/fleetgate/manifest.json"):
            try:
                member = tf.getmember(name)
            except KeyError:
                continue
            f = tf.extractfile(member)
            if f is not None:
                data = json.loads(f.read())
                return data if isinstance(data, dict) else None
    return None


def _packer_version(packer: str) -> str:
    try:
        out = subprocess.run([packer, "version"], capture_output=True, text=True, timeout=30,
                             check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return (out.strip().splitlines() or ["unknown"])[0]


def build_image(opts: BuildOptions, reporter: Reporter) -> BuildResult:
    t0 = time.monotonic()
    phases: dict[str, float] = {}
    class_file, nc, root, final = _check_inputs(opts)
    name = image_name(nc.name, nc.version)
    packer = preflight.require_packer()
    build_id = f"{name}-{uuid.uuid4().hex[:8]}"
    work = Path(tempfile.mkdtemp(prefix="fgimg-"))
    log_path = state_dir() / "image-builds" / f"{build_id}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    podman = Podman(work / "containers.conf")
    staging: Path | None = None
    reporter.begin(f"building image {name} from class {nc.name} ({opts.source} source)")
    reporter.note(f"build log (Packer, apt, mmdebstrap, podman): {log_path}")
    tool_log = ExitStack()  # closed in the finally below, after every step that runs a tool
    tool_log.enter_context(log_to(log_path))
    try:
        t = time.monotonic()
        reporter.note("base image: mmdebstrap rootfs (cached by recipe), imported into podman")
        base = ensure_base_image(podman, nc)
        phases["base_image"] = time.monotonic() - t
        t = time.monotonic()
        reporter.note(f"preflight: apt-get install --simulate "
                      f"{' '.join(preflight.kernel_packages(nc))} in {base.ref}")
        preflight.check_kernel_installable(podman, base.ref, nc, class_file)
        phases["preflight"] = time.monotonic() - t

        upload = work / "fleetgate-upload"
        upload.mkdir()
        vendored = build_repo(opts.vendor_debs, upload / "vendor") if opts.vendor_debs else []
        git = git_state(content_root())
        tdir = packer_dir()
        build_record: dict[str, Any] = {
            "build_id": build_id,
            "git_revision": git.revision,
            "git_dirty": git.dirty,
            "template_sha256": template_sha256(tdir),
            "template_files": [p.name for p in template_files(tdir)],
            "class_file_sha256": sha256_file(class_file),
            "base_image": base.record(),
            "vendored_debs": vendored,
            "omitted": list(opts.omit),
            "packer": _packer_version(packer),
        }
        image_info = {"name": name, "class": nc.name, "class_version": nc.version,
                      "source": opts.source, **build_record}
        (upload / "image.json").write_text(json.dumps(image_info, indent=2, sort_keys=True) + "\n")

        staging = store.new_staging_dir(root, name)
        (work / "class.pkrvars.json").write_text(json.dumps(packer_vars(nc), indent=2))
        bvars: dict[str, Any] = {
            "output_dir": str(staging),
            "work_dir": str(work),
            "build_id": build_id,
            "git_revision": git.revision or "unknown",
            "git_dirty": git.dirty,
            "template_sha256": build_record["template_sha256"],
            "ansible_build_vars_json": json.dumps(build_vars(nc, opts.omit), sort_keys=True),
            "base_image": base.ref,
        }
        qbase: QemuBase | None = None
        if opts.source == "qemu":
            t = time.monotonic()
            reporter.note("qemu base disk: lab VM rootfs with a stock kernel, build key, ext4")
            qbase = make_qemu_base(nc, work / "qemu-base")
            phases["qemu_base"] = time.monotonic() - t
            bvars.update(qbase.packer_vars(opts.accelerator))
            build_record["base_image"] = {**base.record(), "qemu_base": qbase.record()}
        (work / "build.pkrvars.json").write_text(json.dumps(bvars, indent=2))

        argv = [packer, "build", "-machine-readable", f"-only={PACKER_SOURCES[opts.source]}",
                f"-var-file={work / 'class.pkrvars.json'}",
                f"-var-file={work / 'build.pkrvars.json'}", str(tdir)]
        env_extra = {"CONTAINERS_CONF": str(podman.conf)}

        def on_line(level: str, text: str, tracker: BuildTracker) -> None:
            reporter.packer_line(level, text, tracker)

        t = time.monotonic()
        try:
            if opts.source == "docker":
                with podman_api(podman, work / "podman.sock", work / "podman-service.log") as dh:
                    env_extra["DOCKER_HOST"] = dh
                    result = run_packer(argv, env=_packer_env(env_extra, work), cwd=str(work),
                                        on_line=on_line, timeout=opts.timeout,
                                        log_path=str(log_path))
            else:
                result = run_packer(argv, env=_packer_env(env_extra, work), cwd=str(work),
                                    on_line=on_line, timeout=opts.timeout,
                                    log_path=str(log_path))
        finally:
            if opts.source == "docker":
                _remove_build_containers(podman, build_id)
        phases["packer"] = time.monotonic() - t
        if result.timed_out:
            raise BuildFailed(f"packer build timed out after {opts.timeout:.0f}s "
                              f"({result.tracker.stage}); log: {log_path}", source=name)
        if result.rc != 0:
            raise BuildFailed(f"{result.tracker.reason()}; log: {log_path}", source=name)

        t = time.monotonic()
        reporter.note("checking the image and writing manifest.json, sha256sums")
        _finish(staging, nc, opts, base, build_record, name,
                        seconds=time.monotonic() - t0, qemu=qbase is not None)
        # A concurrent build of the same version may have finished first: still immutable.
        store.target_dir(root, nc.name, nc.version, force=opts.force)
        store.publish(staging, final)
        staging = None
        phases["finish"] = time.monotonic() - t
        published = store.read_image(final)
        assert published is not None
        reporter.note(f"image {name} published in {final} (build log: {log_path})")
        return BuildResult(published, time.monotonic() - t0, phases)
    finally:
        tool_log.close()
        reporter.end()
        if staging is not None:
            store.discard(staging)
        shutil.rmtree(work, ignore_errors=True)


def _finish(staging: Path, nc: NodeClass, opts: BuildOptions, base: BaseImage,
            build_record: dict[str, Any], name: str, *, seconds: float,
            qemu: bool) -> dict[str, Any]:
    artifact_name = ARTIFACTS[opts.source]
    if qemu:
        produced = staging / "qemu" / "disk.raw"
        if produced.exists():
            os.replace(produced, staging / artifact_name)
            # Packer writes the disk out in full; give the unused blocks back (same bytes).
            fallocate = shutil.which("fallocate")
            if fallocate:
                subprocess.run([fallocate, "--dig-holes", str(staging / artifact_name)],
                               capture_output=True, timeout=SLOW_STEP_TIMEOUT_S, check=False)
        shutil.rmtree(staging / "qemu", ignore_errors=True)
    artifact = staging / artifact_name
    for needed in (artifact, staging / "image-manifest.json", staging / "packages.txt"):
        if not needed.is_file():
            raise BuildFailed(f"the build did not produce {needed.name}", source=name)
    node_manifest = json.loads((staging / "image-manifest.json").read_text())
    packages_txt = (staging / "packages.txt").read_text()
    rows = mf.components(nc, node_manifest, opts.omit)
    mf.check_image(node_manifest, packages_txt, nc, rows)
    if not qemu:
        inside = _artifact_manifest(artifact)
        if inside != node_manifest:
            raise BuildFailed("the exported root filesystem's /etc/fleetgate/manifest.json "
                              "differs from the one the gate verified", source=name)
    digest = sha256_file(artifact)
    packer_sum = staging / "artifact.sha256"
    if packer_sum.exists():
        theirs = packer_sum.read_text().split()
        if not theirs or theirs[0] != digest:
            raise BuildFailed("Packer's checksum post-processor disagrees with the artifact",
                              source=name)
        packer_sum.unlink()  # folded into sha256sums
    image = {
        "name": name, "class": nc.name, "version": nc.version, "source": opts.source,
        "lab_kind": nc.lab.kind,
        "artifact": artifact_name, "artifact_sha256": digest,
        "artifact_bytes": artifact.stat().st_size,
        "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "build_seconds": round(seconds, 1),
    }
    full = mf.assemble(node_manifest, image=image, build=build_record, rows=rows)
    (staging / store.MANIFEST).write_text(json.dumps(full, indent=2, sort_keys=True) + "\n")
    names = [p.name for p in staging.iterdir() if p.is_file() and p.name != store.SUMS]
    (staging / store.SUMS).write_text(sha256sums(staging, names))
    return full


