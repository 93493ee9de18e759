"""Errors that reach an operator as one line: where (file), what (field path), why (reason).

Every bad input in fleetgate surfaces as a FleetgateError; the CLI prints `str(err)` and exits 2,
so nothing downstream ever runs on input that failed validation.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError

    M = TypeVar("M", bound=BaseModel)


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

    exit_code = 5  # 4 is "inconclusive" (smoke run, judge, diagnose)


_PLAIN_KEY_RE = re.compile(r"[A-Za-z0-9_-]+")
# How pydantic labels the branch of a union (or a validator wrapping a type) in an error's
# `loc`: ('waves', 'steps', 1, 'function-after[check(), str]'), 'constrained-int'. These are
# pydantic's names for the schema, not the operator's for the field.
_SCHEMA_LABEL_RE = re.compile(
    r"constrained-[a-z]+|[a-z]+(-[a-z]+)*\[.*\]|int|str|float|bool|bytes|none|decimal")
_MODEL_LABEL_RE = re.compile(r"[A-Z][A-Za-z0-9]*")
_TYPE_ERRORS = ("model_type", "model_attributes_type", "literal_error", "is_instance_of")


def field_path(loc: Iterable[int | str]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            # An unknown key is user input: quote anything odd so the line stays one line.
            text = part if _PLAIN_KEY_RE.fullmatch(part) else _short(part)
            out += f".{text}" if out else text
    return out or "(top level)"


def _schema_label(part: object) -> bool:
    return isinstance(part, str) and bool(_SCHEMA_LABEL_RE.fullmatch(part))


def _branch_at(loc: tuple[Any, ...], i: int, errs: list[Any]) -> bool:
    """Whether loc[i] names a union branch: pydantic's label for a type, or a model's class
    name where another error of the same value went down a branch so labelled (`Drain` beside
    `literal['none']`). Two capitalised keys side by side are the operator's (host names)."""
    part = loc[i]
    if _schema_label(part):
        return True
    return isinstance(part, str) and bool(_MODEL_LABEL_RE.fullmatch(part)) and any(
        len(e["loc"]) > i and tuple(e["loc"][:i]) == loc[:i] and _schema_label(e["loc"][i])
        for e in errs)


def user_loc(err: Any, errs: list[Any]) -> tuple[int | str, ...]:
    """An error's `loc` without the parts pydantic adds for union branches."""
    loc = tuple(err["loc"])
    return tuple(p for i, p in enumerate(loc) if not _branch_at(loc, i, errs))


def _is_type_error(err: Any) -> bool:
    # "_parsing": lax mode's way of saying a string is not an int, float, date...
    return bool(err["type"].endswith(("_type", "_parsing")) or err["type"] in _TYPE_ERRORS)


def _union_reason(branches: list[Any]) -> str:
    """One reason for a value no branch of a union took. A branch whose type the value has
    says what is wrong with it (150% is over 100%); if none does, the types it may have."""
    fitting = [e for e in branches if not _is_type_error(e)]
    if fitting:
        return pydantic_reason(fitting[0])
    wanted = [str(e["msg"]).removeprefix("Input should be ") for e in branches]
    got = type(branches[0].get("input")).__name__
    return f"Input should be {' or '.join(dict.fromkeys(wanted))}, got {got}"


def pydantic_reason(err: Any) -> str:
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] in ("extra_forbidden",):
        return "unknown key"
    if err["type"] == "missing":
        return "required field is missing"
    if err["type"].endswith("_type") or err["type"] == "model_type":
        got = type(err.get("input")).__name__
        hint = " (quote version strings in YAML)" if got in ("float", "int") else ""
        return f"{msg}, got {got}{hint}"
    if err["type"] == "string_pattern_mismatch":
        return f"value {_short(err['input'])} is not allowed: {msg}"
    return msg


def _short(value: Any, limit: int = 80) -> str:
    """A value as it appears in an error line: repr'd (so control characters show), capped."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def validation_error(exc: ValidationError, source: str | Path, *, prefix: str = "",
                     what: str = "") -> BadInput:
    """A pydantic ValidationError as one BadInput line: the first error's field and reason,
    with a count of the rest. `prefix` is where the validated part sits in its file;
    `what` names the kind of file ("corrupt lab state") ahead of the reason."""
    errs = exc.errors()
    # A value that fails a union fails every branch: one error per branch, one for the user.
    locs = [user_loc(e, errs) for e in errs]
    first = errs[0]
    branches = [e for e, loc in zip(errs, locs, strict=True) if loc == locs[0]]
    count = len(dict.fromkeys(locs))
    more = f" (and {count - 1} more)" if count > 1 else ""
    loc = field_path(locs[0]) if locs[0] else ""
    if not (prefix and loc):
        field = prefix or loc or "(top level)"
    else:
        field = f"{prefix}{loc}" if loc.startswith("[") else f"{prefix}.{loc}"
    reason = (_union_reason(branches) if len(branches) > 1 else pydantic_reason(first)) + more
    return BadInput(f"{what}: {reason}" if what else reason, source=source, field=field)


def validated(model: type[M], data: Any, source: str | Path, *, prefix: str = "",
              what: str = "") -> M:
    """`model.model_validate(data)`, or its ValidationError as one BadInput line (see
    validation_error): the one call for any document read from a file, so no raw pydantic
    dump reaches an operator."""
    from pydantic import ValidationError  # lazily: this module is imported by every command

    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, source, prefix=prefix, what=what) from None

