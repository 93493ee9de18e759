"""Load node-class files and turn every way they can be wrong into one BadInput line.

The line always reads `FILE: FIELD: REASON`. Nothing downstream (Packer, Ansible, the lab) ever
sees a class that did not pass through `load_class`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from fleetgate.errors import BadInput, read_input, validation_error
from fleetgate.site import current_site
from fleetgate.spec import matrix
from fleetgate.spec.schema import CLASS_NAME_RE, NodeClass

CLASS_SUFFIXES = (".yml", ".yaml")
M = TypeVar("M", bound=BaseModel)


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys: YAML's last-one-wins would hide a second pin."""


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        try:
            duplicate = key in seen
            seen.add(key)
        except TypeError:  # a list/dict/set key: a clean YAML error, not a traceback
            raise yaml.constructor.ConstructorError(
                None, None, "found unhashable key", key_node.start_mark
            ) from None
        if duplicate:
            mark = key_node.start_mark
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} at line {mark.line + 1}", mark
            )
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping
)


def read_yaml(path: Path) -> Any:
    """Parse one YAML document; syntax errors become `FILE: line L col C: problem`."""
    text = read_input(path)
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1} col {mark.column + 1}" if mark else "yaml"
        problem = exc.problem or exc.context or "invalid YAML"
        raise BadInput(f"YAML syntax error: {problem}", source=path, field=where) from None
    except yaml.YAMLError as exc:
        raise BadInput(f"YAML error: {exc}", source=path) from None
    except RecursionError:  # PyYAML composes nested collections recursively
        raise BadInput("YAML is nested too deeply", source=path, field="(top level)") from None


def load_model(path: Path, model: type[M], what: str) -> M:
    """A YAML mapping validated as `model`; anything else is one line of BadInput."""
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise BadInput(f"a {what} must be a YAML mapping", source=path, field="(top level)")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, path) from None


def load_class(path: Path, *, check_matrix: bool = True) -> NodeClass:
    nc = load_model(path, NodeClass, "node class")
    if path.stem != nc.name:
        raise BadInput(f"class {nc.name!r} must live in {nc.name}.yml", source=path, field="name")
    if check_matrix:
        violations = matrix.check(nc)
        if violations:
            v = violations[0]
            more = f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""
            raise BadInput(f"matrix rule {v.rule}: {v.message}{more}", source=path, field=v.field)
    return nc


def classes_dir() -> Path:
    # A rollout of a new class version verifies the changed hosts against that version: the
    # same variable (FLEETGATE_CLASSES_DIR) points the vars plugin and the smoke suite at it.
    return current_site().classes_dir


def class_files(paths: Iterable[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out.extend(sorted(f for f in p.iterdir() if f.suffix in CLASS_SUFFIXES))
        elif p.exists():
            out.append(p)
        else:
            raise BadInput("no such file or directory", source=p)
    if not out:
        raise BadInput("no class files found", source=", ".join(str(p) for p in paths))
    return out


def load_all(paths: Iterable[Path]) -> dict[str, tuple[Path, NodeClass]]:
    """Load every class; a name defined twice is an error naming both files."""
    seen: dict[str, tuple[Path, NodeClass]] = {}
    for f in class_files(paths):
        nc = load_class(f)
        if nc.name in seen:
            raise BadInput(f"duplicate class name {nc.name!r}, also defined in {seen[nc.name][0]}",
                           source=f, field="name")
        seen[nc.name] = (f, nc)
    return seen


def resolve_class(name_or_path: str, directory: Path | None = None) -> tuple[Path, NodeClass]:
    """Accept a class name (looked up in inventory/classes, or `directory`) or a path to a
    class file."""
    candidate = Path(name_or_path)
    if candidate.suffix in CLASS_SUFFIXES:
        return candidate, load_class(candidate)
    if not re.fullmatch(CLASS_NAME_RE, name_or_path):
        raise BadInput("not a valid class name", source="CLASS", field=repr(name_or_path))
    where = directory or classes_dir()
    for suffix in CLASS_SUFFIXES:
        f = where / f"{name_or_path}{suffix}"
        if f.exists():
            return f, load_class(f)
    raise BadInput(f"unknown class (looked in {where})", source="CLASS", field=name_or_path)
