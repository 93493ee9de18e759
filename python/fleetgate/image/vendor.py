"""Vendored packages: a directory of .deb files offered to apt inside the build.

Out-of-tree kernel modules (a vendor's DKMS package, a site's own module) often come as .deb
files and not from any archive. `fleetgate image build --vendor-debs DIR` turns DIR into a flat
apt repository that the build adds before golden.yml runs and removes after, so a class can
pin such a package by name like any other. Each file's SHA-256 goes into the image manifest.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from fleetgate.errors import BadInput
from fleetgate.image.provenance import sha256_file
from fleetgate.system.procs import require_tool, run


def stanza(control: str, filename: str, size: int, sha256: str) -> str:
    """One Packages entry: the package's control fields plus where apt finds the file."""
    fields = control.strip("\n")
    return f"{fields}\nFilename: ./{filename}\nSize: {size}\nSHA256: {sha256}\n"


def build_repo(src: Path, dest: Path) -> list[dict[str, str]]:
    if not src.is_dir():
        raise BadInput("not a directory", source="--vendor-debs", field=str(src))
    debs = sorted(p for p in src.iterdir() if p.suffix == ".deb" and p.is_file())
    if not debs:
        raise BadInput("no .deb files in it", source="--vendor-debs", field=str(src))
    dpkg_deb = require_tool("dpkg-deb", "dpkg")
    dest.mkdir(parents=True)
    entries: list[str] = []
    record: list[dict[str, str]] = []
    for deb in debs:
        proc = run([dpkg_deb, "--field", str(deb)], timeout=60, check=False)
        if proc.returncode != 0:
            raise BadInput("not a Debian package (dpkg-deb cannot read it)",
                           source="--vendor-debs", field=deb.name)
        fields = dict(line.split(": ", 1) for line in proc.stdout.splitlines()
                      if ": " in line and not line.startswith(" "))
        digest = sha256_file(deb)
        shutil.copy2(deb, dest / deb.name)
        entries.append(stanza(proc.stdout, deb.name, deb.stat().st_size, digest))
        record.append({"file": deb.name, "package": fields.get("Package", "?"),
                       "version": fields.get("Version", "?"), "sha256": digest})
    (dest / "Packages").write_text("\n".join(entries))
    return record
