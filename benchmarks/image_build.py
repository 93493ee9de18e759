"""Benchmark `fleetgate image build`: build time per class, cold and warm, artifact size, and
boot-to-SSH of the built lab-vm image. Not a test: it prints a table and JSON.

- cold: an empty rootfs cache (FLEETGATE_CACHE_DIR), so mmdebstrap builds the base again. The
  podman import of the base is skipped when an image of the same recipe is already in podman's
  store (the lab shares it); its cost is measured separately as `import_s` by importing the
  fresh tar under a throwaway tag.
- warm: the cache from the cold run (or the machine's usual cache): no mmdebstrap, no import.
- boot: `fleetgate lab up --containers 0 --vms 1 --image lab-vm:VERSION`; boot-to-SSH is from
  the supervisor's first boot record (qemu starting) to `lab up` returning with SSH answering.

One build at a time: the machine has 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FLEETGATE = str(Path(sys.executable).parent / "fleetgate")
CONF = "[containers]\ndefault_ulimits = [\"nofile=1024:1024\", \"nproc=1000:1000\"]\n" \
       "[engine]\nruntime = \"runc\"\n"


def env_for(**extra: str) -> dict[str, str]:
    return {**os.environ, "FLEETGATE_HOME": str(REPO), "CI": "1",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", **extra}


def build(cls: str, out: Path, env: dict[str, str], *extra: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    proc = subprocess.run([FLEETGATE, "image", "build", cls, "--out", str(out), "--force",
                           *extra], env=env, cwd=REPO, capture_output=True, text=True,
                          check=False)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"build {cls} failed ({proc.returncode}): {proc.stderr.strip()}")
    name = next(p.name for p in out.iterdir() if p.name.startswith(f"{cls}-"))
    manifest = json.loads((out / name / "manifest.json").read_text())
    return {"class": cls, "image": name, "seconds": round(seconds, 1),
            "artifact_mb": round(manifest["image"]["artifact_bytes"] / 1e6, 1)}


def import_seconds(cache: Path) -> float | None:
    tars = sorted((cache / "rootfs").glob("*.tar"))
    if not tars:
        return None
    with tempfile.TemporaryDirectory(prefix="fgbench-") as d:
        conf = Path(d) / "containers.conf"
        conf.write_text(CONF)
        penv = {**os.environ, "CONTAINERS_CONF": str(conf)}
        tag = f"localhost/fleetgate-bench-import:{os.getpid()}"
        t0 = time.perf_counter()
        subprocess.run(["podman", "import", str(tars[-1]), tag], env=penv, check=True,
                       capture_output=True)
        seconds = time.perf_counter() - t0
        subprocess.run(["podman", "rmi", "--force", tag], env=penv, check=False,
                       capture_output=True)
    return round(seconds, 1)


def boot_to_ssh(out: Path, image: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="fgbench-") as d:
        lab = Path(d) / "lab"
        env = env_for(FLEETGATE_LAB_DIR=str(lab), FLEETGATE_STATE_DIR=d,
                      FLEETGATE_IMAGES_DIR=str(out))
        t0 = time.time()
        try:
            proc = subprocess.run([FLEETGATE, "lab", "up", "--containers", "0", "--vms", "1",
                                   "--image", image], env=env, cwd=REPO, capture_output=True,
                                  text=True, check=False)
            t1 = time.time()
            if proc.returncode != 0:
                raise SystemExit(f"lab up --image {image} failed: {proc.stderr.strip()}")
            boots = [json.loads(line) for line in
                     (lab / "hosts" / "lab-v01" / "boots.jsonl").read_text().splitlines()]
            first = next(b for b in boots if b["event"] == "boot")
        finally:
            subprocess.run([FLEETGATE, "lab", "down"], env=env, cwd=REPO, capture_output=True,
                           check=False)
    return {"image": image, "lab_up_s": round(t1 - t0, 1),
            "boot_to_ssh_s": round(t1 - first["ts"], 1), "kernel": first["kernel"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--classes", nargs="+", default=["lab-cpu", "lab-vm"])
    ap.add_argument("--nvidia", action="store_true",
                    help="also build nvidia-h100-535 (warm only; --omit gpu-toolkit)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    results: dict[str, Any] = {"builds": [], "boot": None}
    with tempfile.TemporaryDirectory(prefix="fgbench-img-") as tmp:
        out = Path(tmp) / "images"
        for cls in args.classes:
            cache = Path(tmp) / f"cache-{cls}"
            cold = build(cls, out, env_for(FLEETGATE_CACHE_DIR=str(cache)))
            cold.update(cache="cold", import_s=import_seconds(cache))
            shutil.rmtree(cache, ignore_errors=True)
            warm = build(cls, out, env_for())
            warm.update(cache="warm")
            results["builds"] += [cold, warm]
            print(json.dumps(cold), json.dumps(warm), sep="\n", flush=True)
        if args.nvidia:
            nv = build("nvidia-h100-535", out, env_for(), "--omit", "gpu-toolkit")
            nv.update(cache="warm")
            results["builds"].append(nv)
            print(json.dumps(nv), flush=True)
        vm = next((b["image"] for b in results["builds"] if b["class"] == "lab-vm"), None)
        if vm:
            cls, _, version = vm.rpartition("-")
            results["boot"] = boot_to_ssh(out, f"{cls}:{version}")
    print(f"\n{'class':<18}{'cache':<7}{'build s':>9}{'import s':>10}{'artifact MB':>13}")
    for b in results["builds"]:
        imp = b.get("import_s")
        print(f"{b['class']:<18}{b['cache']:<7}{b['seconds']:>9}{'' if imp is None else imp:>10}"
              f"{b['artifact_mb']:>13}")
    if results["boot"]:
        print(f"\nlab-vm image boot-to-SSH: {results['boot']['boot_to_ssh_s']} s "
              f"(lab up {results['boot']['lab_up_s']} s, {results['boot']['kernel']})")
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
