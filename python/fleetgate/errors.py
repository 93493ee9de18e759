"""Errors that reach an operator as one line: where (file), what (field path), why (reason).

Every bad input in fleetgate surfaces as a FleetgateError; the CLI prints `str(err)` and exits 2,
so nothing downstream ever runs on input that failed validation.
"""

from __future__ import annotations

from pathlib import Path


class FleetgateError(Exception):
    """An expected failure with an operator-facing one-line message."""

    exit_code = 1

    def __init__(self, reason: str, *, source: str | Path | None = None, field: str | None = None):
        self.source = str(source) if source is not None else None
        self.field = field
        self.reason = " ".join(reason.split())  # one line, always
        super().__init__(self.one_line())

    def one_line(self) -> str:
        parts = [p for p in (self.source, self.field) if p]
        return ": ".join([*parts, self.reason])


class BadInput(FleetgateError):
    """Malformed class, inventory, plan, flag or probe output. Exit code 2, nothing executed."""

    exit_code = 2


class LabError(FleetgateError):
    """The local lab could not be brought to the requested state."""

    exit_code = 3


class ToolError(FleetgateError):
    """A local tool (podman, mmdebstrap, qemu, mkfs, ssh-keygen) is missing, failed or timed
    out. The lab and image builds both run them; neither owns the failure."""

    exit_code = 4
