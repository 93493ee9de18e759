"""What a host is running, read with one POSIX shell command (the probe plays run it with
`raw`) and parsed here: the running kernel, the boot id, the node manifest, the installed
versions of some packages and the contents of some small version files.

Why a shell command and not a module: the controller reads every host before its change,
after it (verify), and after a crash (reconcile). A module starts Python on the host for each
reading; on the lab's containers that made reading 16 hosts take 5.5 s against 1.7 s for this
command (benchmarks/rollout_overhead.py has the figures), as much as a small change itself. It
also still answers on a host whose change broke its Python, which is when reconcile needs it.

The command prints one line per item, file contents base64-encoded, so no content can forge a
line. Names and paths are checked against the plan's own patterns here, again, before they
reach the command; quoting alone is not enough.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import shlex
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from fleetgate.rollout.target import ABS_PATH_RE, Target
from fleetgate.spec.schema import DEB_PACKAGE_RE

MANIFEST_PATH = "/etc/fleetgate/manifest.json"
MANIFEST_LIMIT = 1 << 20  # characters, as the manifest's own reader
FILE_LIMIT = 4096
DPKG_TIMEOUT_S = 60
MAGIC = "fleetgate-hostread 1"
# Where dpkg-query and coreutils live whatever the login PATH of the probe's user.
STD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_PKG = re.compile(DEB_PACKAGE_RE)
_PATH = re.compile(ABS_PATH_RE)


class Wanted(BaseModel):
    """Beyond the kernel, boot id and manifest: which packages and files to read."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    packages: list[str] = Field(default_factory=list)
    files: list[str] = Field(default_factory=list)


def wanted(targets: list[Target]) -> Wanted:
    return Wanted(packages=sorted({p for t in targets for p in t.packages}),
                  files=sorted({f for t in targets for f in t.files}))


def command(want: Wanted, *, manifest_path: str = MANIFEST_PATH) -> str:
    """The shell command that reads `want` (raises ValueError for a name or path that is not
    one a plan may name)."""
    bad = [p for p in want.packages if not _PKG.match(p)]
    bad += [f for f in [manifest_path, *want.files] if not _PATH.match(f)]
    if bad:
        raise ValueError(f"refusing to read unsafe names: {', '.join(map(repr, bad))}")
    q = shlex.quote
    # A file is read up to 4 bytes per character of its limit: decoding here then cuts at the
    # limit exactly where the host-side reader's read(limit) did.
    lines = [
        f"PATH={STD_PATH}",
        'r() { if [ -f "$2" ] && [ -r "$2" ]; then printf "%s " "$1"; '
        'head -c "$3" -- "$2" | base64 -w0; echo; else echo "$1 -"; fi; }',
        f"echo {q(MAGIC)}",
        'echo "k $(uname -r)"',
        f"r b /proc/sys/kernel/random/boot_id {4 * FILE_LIMIT}",
        f"r m {q(manifest_path)} {4 * MANIFEST_LIMIT}",
        *(f"r f{i} {q(f)} {4 * FILE_LIMIT}" for i, f in enumerate(want.files)),
    ]
    if want.packages:
        fmt = r"p\t${Package}\t${Version}\t${db:Status-Status}\n"
        lines.append(f"timeout {DPKG_TIMEOUT_S} dpkg-query -W -f {q(fmt)} "
                     + " ".join(q(p) for p in want.packages) + " 2>/dev/null")
        lines.append('echo "d $?"')
    lines.append("echo end")
    return "\n".join(lines)


def _text(value: str, limit: int) -> str | None:
    """A file as the host-side reader saw it: None when it could not be read; else its text,
    undecodable bytes replaced, newlines made \\n (Python's text mode), cut at `limit`."""
    if value == "-":
        return None
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    text = raw.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")
    return text[:limit]


def parse(stdout: str, want: Wanted) -> dict[str, Any] | None:
    """The host state the command printed; None when its output is not the whole reading
    (another shell's banner is tolerated, a cut-off reading is not)."""
    lines = [line.rstrip("\r") for line in stdout.splitlines()]
    if MAGIC not in lines or "end" not in lines:
        return None
    lines = lines[lines.index(MAGIC) + 1:lines.index("end")]
    items: dict[str, str] = {}
    installed: dict[str, str] = {}
    dpkg_rc = None
    for line in lines:
        if line.startswith("p\t"):
            parts = line.split("\t")
            if len(parts) == 4 and parts[3] == "installed":
                installed[parts[1]] = parts[2]
            continue
        key, _, value = line.partition(" ")
        if key == "d":
            dpkg_rc = value
        else:
            items[key] = value
    if "k" not in items:
        return None
    boot = _text(items.get("b", "-"), FILE_LIMIT)
    manifest_text = _text(items.get("m", "-"), MANIFEST_LIMIT)
    manifest: Any = None
    if manifest_text and manifest_text.strip():
        try:
            manifest = json.loads(manifest_text)
        except ValueError:
            manifest = {"_error": "manifest is not JSON"}
    # rc 1: some package matched nothing; the others are still printed.
    if dpkg_rc not in ("0", "1"):
        installed = {}
    files: dict[str, str | None] = {}
    for i, path in enumerate(want.files):
        text = _text(items.get(f"f{i}", "-"), FILE_LIMIT)
        files[path] = text.strip() if text is not None else None
    return {
        "kernel_release": items["k"],
        "boot_id": boot.strip() if boot is not None else None,
        "manifest": manifest,
        "packages": {p: installed.get(p) for p in want.packages},
        "files": files,
    }


def extravars(want: Wanted) -> dict[str, str]:
    """What the probe plays (rollout-probe.yml, rollout-before.yml) take."""
    return {"fleetgate_hostread_command": command(want)}


def reading(res: Any, want: Wanted) -> dict[str, Any] | None:
    """The host state in one probe task's result, if it holds a whole reading."""
    if not isinstance(res, dict) or res.get("rc") != 0 or not isinstance(res.get("stdout"), str):
        return None
    return parse(res["stdout"], want)


def why_not(res: Any, *, unreachable: bool = False) -> str:
    """Why a probe task's result holds no reading, in one line."""
    res = res if isinstance(res, dict) else {}
    if unreachable:
        return "unreachable: " + _line(res.get("msg"))
    if res.get("rc") != 0:
        return f"failed (rc {res.get('rc')}): " + _line(res.get("stderr") or res.get("msg"))
    return "not a whole reading: " + _line(res.get("stdout"))


def _line(text: Any) -> str:
    return " ".join(str(text or "no output").split())[:500]
