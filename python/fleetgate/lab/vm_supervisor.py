"""Bootloader-and-power-supply for one lab VM: boot, and boot again after a guest reboot.

Run as `python -m fleetgate.lab.vm_supervisor --dir HOSTDIR --port PORT`. Before every boot it
reads /vmlinuz and /initrd.img from the guest disk (with debugfs, while qemu is not running),
so the guest chooses its next kernel exactly as it would with GRUB's default entry. The kernel's
last console line tells a reboot ("reboot: Restarting system") from a power-off. Each boot is
appended to boots.jsonl for tests and for `lab status`.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

MAX_CRASH_LOOPS = 3


def _debugfs(disk: Path, request: str) -> str:
    out = subprocess.run(["debugfs", "-R", request, str(disk)], capture_output=True, text=True,
                         timeout=60, check=False)
    return out.stdout


def _resolve_link(disk: Path, link: str) -> str:
    stat = _debugfs(disk, f"stat {link}")
    m = re.search(r'Fast link dest: "([^"]+)"', stat)
    if not m:
        raise RuntimeError(f"{link} is not a symlink on the guest disk")
    target = m.group(1)
    return target if target.startswith("/") else "/" + target


def extract_boot_files(disk: Path, out_dir: Path) -> tuple[str, Path, Path]:
    kernel_path = _resolve_link(disk, "/vmlinuz")
    initrd_path = _resolve_link(disk, "/initrd.img")
    kernel, initrd = out_dir / "boot-vmlinuz", out_dir / "boot-initrd.img"
    for src, dst in ((kernel_path, kernel), (initrd_path, initrd)):
        dst.unlink(missing_ok=True)
        _debugfs(disk, f"dump {src} {dst}")
        if not dst.exists() or dst.stat().st_size == 0:
            raise RuntimeError(f"could not read {src} from the guest disk")
    return kernel_path.rsplit("/", 1)[-1], kernel, initrd


def qemu_argv(hdir: Path, port: int, memory: int, kernel: Path, initrd: Path) -> list[str]:
    return [
        "qemu-system-x86_64", "-name", f"fleetgate-{hdir.name},process=fleetgate-{hdir.name}",
        "-accel", "tcg", "-m", str(memory), "-smp", "1", "-nodefaults", "-display", "none",
        "-no-reboot",
        "-kernel", str(kernel), "-initrd", str(initrd),
        "-append", "root=/dev/vda rw console=ttyS0 net.ifnames=0 panic=5",
        # cache=unsafe: a lab disk is thrown away with its lab, and dpkg's fsync per unpacked
        # file (a kernel's headers are about 13,000 files) then costs the host nothing. The
        # guest still writes through on its own reboots: qemu exits with every write in the
        # host's page cache, where the next boot (and debugfs) reads it.
        "-drive", f"file={hdir / 'disk.raw'},format=raw,if=virtio,cache=unsafe",
        "-netdev", f"user,id=n0,hostfwd=tcp:127.0.0.1:{port}-:22",
        "-device", "virtio-net-pci,netdev=n0",
        "-chardev", f"file,id=con,path={hdir / 'console.log'}", "-serial", "chardev:con",
        "-monitor", f"unix:{hdir / 'monitor.sock'},server=on,wait=off",
        "-pidfile", str(hdir / "qemu.pid"),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", type=Path, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--memory", type=int, default=1024)
    args = ap.parse_args(argv)
    hdir: Path = args.dir
    stop_flag = hdir / "stop"
    qemu: subprocess.Popen[bytes] | None = None

    def on_term(signum: int, frame: FrameType | None) -> None:
        stop_flag.touch()
        if qemu is not None and qemu.poll() is None:
            qemu.terminate()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    crashes = 0
    boot = 0
    while not stop_flag.exists():
        try:
            kname, kernel, initrd = extract_boot_files(hdir / "disk.raw", hdir)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            _record(hdir, {"event": "boot-failed", "reason": str(exc)})
            return 1
        boot += 1
        _record(hdir, {"event": "boot", "n": boot, "kernel": kname})
        qemu = subprocess.Popen(qemu_argv(hdir, args.port, args.memory, kernel, initrd),
                                stdin=subprocess.DEVNULL)
        rc = qemu.wait()
        if stop_flag.exists():
            break
        tail = (hdir / "console.log").read_text(errors="replace")[-4000:]
        if "reboot: Power down" in tail:
            _record(hdir, {"event": "poweroff", "n": boot})
            return 0
        if "reboot: Restarting system" in tail:
            crashes = 0
            _record(hdir, {"event": "reboot", "n": boot})
            continue
        crashes += 1
        _record(hdir, {"event": "crash", "n": boot, "rc": rc})
        if crashes >= MAX_CRASH_LOOPS:
            return 1
    _record(hdir, {"event": "stopped", "n": boot})
    return 0


def _record(hdir: Path, event: dict[str, object]) -> None:
    event["ts"] = round(time.time(), 3)
    with (hdir / "boots.jsonl").open("a") as f:
        f.write(json.dumps(event) + "\n")


if __name__ == "__main__":
    sys.exit(main())
