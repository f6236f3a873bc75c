"""A record's fields read by their documented names.

``get(record, "timing.ci_low")`` reads one field by its dotted path (None where a record
lacks it: an older record, a failed one); ``number`` reads a number (NaN where there is
none). They read combination records; ``run_get`` and ``run_number`` read a run record
(run.json) the same way. Every literal path given to them is checked against the record's
JSON Schema (``reportgen/schemas/``) by the tests, through ``declared``: a field read under
a name the records do not carry (``share_ci_low`` for ``share_low``) fails there instead of
reading None forever. A ``*`` segment stands for any key of a map (a category, a method)
or any item of a list; a path whose keys hold dots (categories: ``attention.core``) is
given as a tuple of keys, in which an integer picks a list's item (``("gpus", 0, "name")``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

from reportgen.records.schema import COMBINATION_KIND, json_schema

FieldPath = str | Sequence[str | int]


def _keys(path: FieldPath) -> Sequence[str | int]:
    return path.split(".") if isinstance(path, str) else path


def get(record: Mapping[str, Any] | None, path: FieldPath) -> Any:
    """The field at ``path`` (dots between keys, or the keys as a tuple where a key holds a
    dot: a category such as ``attention.core``; an integer key is a list's item), or None
    where any step is missing."""
    value: Any = record
    for key in _keys(path):
        if isinstance(key, int):
            if not isinstance(value, list | tuple) or not 0 <= key < len(value):
                return None
            value = value[key]
        elif isinstance(value, Mapping):
            value = value.get(key)
        else:
            return None
    return value


def as_number(value: Any) -> float:
    """``value`` as a float, NaN where it is not a number (booleans are not numbers)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan


def number(record: Mapping[str, Any] | None, path: FieldPath) -> float:
    """The number at ``path``, NaN where there is none."""
    return as_number(get(record, path))


def run_get(record: Mapping[str, Any] | None, path: FieldPath) -> Any:
    """`get` for a run record (run.json): its paths are checked against the run schema."""
    return get(record, path)


def run_number(record: Mapping[str, Any] | None, path: FieldPath) -> float:
    """`number` for a run record (run.json): its paths are checked against the run schema."""
    return number(record, path)


@functools.cache
def _schema(kind: str) -> Mapping[str, Any]:
    return json_schema(kind)


def _resolve(node: Mapping[str, Any], root: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The object schemas ``node`` may be: through ``$ref``, ``oneOf``, ``anyOf``, ``allOf``."""
    if "$ref" in node:
        ref = str(node["$ref"])
        target: Any = root
        for part in ref.removeprefix("#/").split("/"):
            target = target[part]
        return _resolve(target, root)
    out: list[Mapping[str, Any]] = [node]
    for key in ("oneOf", "anyOf", "allOf"):
        for sub in node.get(key) or []:
            out.extend(_resolve(sub, root))
    return out


def declared(path: FieldPath, kind: str = COMBINATION_KIND) -> bool:
    """Whether the ``kind`` record's JSON Schema declares the field at ``path`` (an integer
    key, like ``*``, stands for any item of a list)."""
    root = _schema(kind)
    nodes: list[Mapping[str, Any]] = _resolve(root, root)
    for step in _keys(path):
        key = "*" if isinstance(step, int) else step
        found: list[Mapping[str, Any]] = []
        for node in nodes:
            props = node.get("properties") or {}
            if key != "*" and key in props:
                found.extend(_resolve(props[key], root))
            extra = node.get("additionalProperties")
            if isinstance(extra, Mapping) and (key == "*" or key not in props):
                found.extend(_resolve(extra, root))
            items = node.get("items")
            if key == "*" and isinstance(items, Mapping):
                found.extend(_resolve(items, root))
        if not found:
            return False
        nodes = found
    return True
