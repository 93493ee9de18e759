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

from fleetgate.errors import BadInput, validation_error
from fleetgate.inputs import read_input
from fleetgate.site import current_site
from fleetgate.spec import matrix
from fleetgate.spec.schema import CLASS_NAME_RE, NodeClass

CLASS_SUFFIXES = (".yml", ".yaml")
M = TypeVar("M", bound=BaseModel)


MERGE_TAG = "tag:yaml.org,2002:merge"
# Far more than a class, plan or site file needs (under 10 levels, a few hundred nodes), far
# less than what would overflow PyYAML's recursive composer or pydantic behind it.
MAX_DEPTH = 64
MAX_NODES = 100_000


class _TooLarge(yaml.MarkedYAMLError):
    """Nested or aliased beyond MAX_DEPTH / MAX_NODES."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys (YAML's last-one-wins would hide a second pin)
    and documents nested or expanded beyond any real input.

    Depth and size are counted as the document *means* them: an alias counts as the whole
    node it points to, so `&a [*b, *b]` chains cannot build a deep or huge value from a few
    short lines."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._level = 0
        self._measure: dict[int, tuple[int, int]] = {}  # id(node) -> (depth, nodes)

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self._level += 1
        try:
            if self._level > MAX_DEPTH:
                event = self.peek_event()  # type: ignore[no-untyped-call]
                raise _TooLarge(problem=f"nested deeper than {MAX_DEPTH} levels",
                                problem_mark=event.start_mark)
            node = super().compose_node(parent, index)
        finally:
            self._level -= 1
        if node is not None and id(node) not in self._measure:
            children: list[yaml.Node] = []
            if isinstance(node, yaml.SequenceNode):
                children = list(node.value)
            elif isinstance(node, yaml.MappingNode):
                children = [n for pair in node.value for n in pair]
            sizes = [self._measure.get(id(c), (1, 1)) for c in children]
            depth = 1 + max((d for d, _ in sizes), default=0)
            nodes = 1 + sum(n for _, n in sizes)
            if depth > MAX_DEPTH or nodes > MAX_NODES:
                what = (f"nested deeper than {MAX_DEPTH} levels" if depth > MAX_DEPTH
                        else f"more than {MAX_NODES} values once aliases are expanded")
                raise _TooLarge(problem=what, problem_mark=node.start_mark)
            self._measure[id(node)] = (depth, nodes)
        return node


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == MERGE_TAG:
            # `<<: *base` keys are merged (and may be overridden) by construct_mapping below;
            # only keys written in this mapping itself can be duplicates.
            continue
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


def _construct_vault(loader: _UniqueKeyLoader, node: yaml.Node) -> dict[str, str]:
    """`!vault |` as Ansible writes it: a plan's secret_vars take it as {vault: CIPHERTEXT}
    (runner/secret_vars.py); anywhere else a schema refuses the mapping, naming the field."""
    if not isinstance(node, yaml.ScalarNode):
        raise yaml.constructor.ConstructorError(
            None, None, "!vault must tag a string (the ansible-vault ciphertext)",
            node.start_mark)
    return {"vault": str(loader.construct_scalar(node))}


_UniqueKeyLoader.add_constructor("!vault", _construct_vault)


def read_yaml(path: Path) -> Any:
    """Parse one YAML document; syntax errors become `FILE: line L col C: problem`."""
    text = read_input(path)
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except _TooLarge as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}" if mark else ""
        raise BadInput(f"YAML is nested too deeply or too large: {exc.problem}{where}",
                       source=path, field="(top level)") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1} col {mark.column + 1}" if mark else "yaml"
        problem = exc.problem or exc.context or "invalid YAML"
        raise BadInput(f"YAML syntax error: {problem}", source=path, field=where) from None
    except yaml.YAMLError as exc:
        raise BadInput(f"YAML error: {exc}", source=path) from None
    except RecursionError:  # the limits above make this unreachable; kept as the last guard
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
            raise BadInput(f"{v.reason}{more}", source=path, field=v.field)
    return nc


def classes_dir() -> Path:
    # A rollout of a new class version verifies the changed hosts against that version: the
    # same variable (FLEETGATE_CLASSES_DIR) points the vars plugin and the smoke suite at it.
    return current_site().classes_dir


def listed_class(directory: Path, f: Path) -> Path:
    """`f`, a class file found in `directory` (listed or looked up by name), unless it is a
    symlink that leads out of it: a reviewed classes directory cannot pull in a file nobody
    reviewed (the directory itself is checked against the site: site.py)."""
    root = directory.resolve()
    target = f.resolve()
    if not target.is_relative_to(root):
        raise BadInput(f"a symlink leading outside the classes directory {root} ({target})",
                       source=f)
    return f


def class_files(paths: Iterable[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            out.extend(listed_class(p, f) for f in sorted(p.iterdir())
                       if f.suffix in CLASS_SUFFIXES)
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
            return f, load_class(listed_class(where, f))
    raise BadInput(f"unknown class {name_or_path!r} (looked in {where})", source="CLASS")
