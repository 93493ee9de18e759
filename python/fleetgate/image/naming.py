"""Image names: one node class version is one image, `<class>-<version>`, and never changes.

`CLASS` or `CLASS:VERSION` on the command line; `<class>-<version>` as a directory name. Class
names may end in digits (nvidia-h100-535), so a directory name is split at its last dash.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fleetgate.errors import BadInput
from fleetgate.spec.schema import CLASS_NAME_RE

_CLASS = CLASS_NAME_RE.strip("^$")
REF_RE = re.compile(rf"^(?P<cls>{_CLASS}):(?P<ver>[0-9]{{1,6}})$|^(?P<bare>{_CLASS})$")
DIR_RE = re.compile(rf"^(?P<cls>{_CLASS})-(?P<ver>[1-9][0-9]{{0,5}})$")


@dataclass(frozen=True)
class ImageRef:
    node_class: str
    version: int | None = None  # None: the newest version there is

    def __str__(self) -> str:
        return self.node_class if self.version is None else f"{self.node_class}:{self.version}"


def image_name(node_class: str, version: int) -> str:
    return f"{node_class}-{version}"


def parse_ref(text: str, *, source: str = "IMAGE") -> ImageRef:
    m = REF_RE.match(text)
    if not m:
        raise BadInput("expected CLASS or CLASS:VERSION (e.g. lab-cpu:1)", source=source,
                       field=repr(text))
    if m.group("bare"):
        return ImageRef(m.group("bare"))
    version = int(m.group("ver"))
    if version < 1:
        raise BadInput("image versions start at 1", source=source, field=repr(text))
    return ImageRef(m.group("cls"), version)


def parse_dir_name(name: str) -> ImageRef | None:
    """`lab-cpu-3` -> lab-cpu:3; anything else (partials, dot dirs, stray files) -> None."""
    m = DIR_RE.match(name)
    return ImageRef(m.group("cls"), int(m.group("ver"))) if m else None
