"""Release sets: which torch and transformers releases a history measures, and which
release set a run measured.

A history (``reportgen history``) measures one suite once per release set, each in a
virtual environment of its own; every such run is a series of its own
(``<suite>-<hash8>-torch<version>-transformers<version>``) and its run.json names the
release set (``release``), so runs of several releases never pool, and the site's other
pages keep reading the runs of the current release.

Standard library only: the command, the executor and the pages all read it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reportgen.errors import UserError

LIBRARIES = ("torch", "transformers")
_VERSION = re.compile(r"\d+(\.\d+){0,3}")
_FINAL = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?(?:\.(\d+))?")
_LAST = re.compile(r"last:(\d+)")


def version_key(version: str) -> tuple[int, ...]:
    """A version's numeric release parts, for ordering (``2.13.0+cpu`` -> (2, 13, 0));
    a version without any (``main``) sorts first."""
    match = re.match(r"\d+(?:\.\d+)*", version.strip())
    return tuple(int(p) for p in match.group(0).split(".")) if match else ()


def public(version: str) -> str:
    """A version without its local label: ``2.13.0+cpu`` -> ``2.13.0``."""
    return version.split("+", 1)[0]


def is_final(version: str) -> bool:
    """A final release (no ``rc``, ``dev``, ``a``/``b`` or local label)."""
    return _FINAL.fullmatch(version) is not None


def minor(version: str) -> str:
    parts = version_key(version)
    return ".".join(str(p) for p in parts[:2])


def parse_spec(text: str | None, flag: str) -> list[str] | int | None:
    """A release flag's value: a comma-separated list of versions (``5.15,5.20.1``), or
    ``last:N``, the N newest releases (an int). A wrong value is a UserError naming
    ``flag``."""
    if text is None:
        return None
    value = text.strip()
    last = _LAST.fullmatch(value)
    if last:
        n = int(last.group(1))
        if n < 1:
            raise UserError(f"{flag}: last:N needs N of 1 or more, not {value!r}")
        return n
    items = [v.strip() for v in value.split(",")]
    if not value or any(not v for v in items):
        raise UserError(f"{flag}: expected versions separated by commas (e.g. 5.15,5.20) or last:N, not {text!r}")
    for item in items:
        if not _VERSION.fullmatch(item):
            raise UserError(f"{flag}: {item!r} is not a release version (e.g. 5.20 or 5.20.1)")
    return list(dict.fromkeys(items))


def releases(available: Iterable[str]) -> list[str]:
    """The newest patch of every minor release among ``available`` (final releases only),
    oldest first: ``5.20.0, 5.20.2, 5.21.0`` -> ``5.20.2, 5.21.0``."""
    newest: dict[str, str] = {}
    for version in available:
        v = public(version)
        if not is_final(v):
            continue
        key = minor(v)
        if key not in newest or version_key(v) > version_key(newest[key]):
            newest[key] = v
    return sorted(newest.values(), key=version_key)


def resolve(spec: Sequence[str] | int, available: Sequence[str] | None, library: str) -> tuple[list[str], list[str]]:
    """The versions to install for one library's flag, oldest first, and one line for
    each asked-for version that is not released.

    ``5.20`` is the newest patch of 5.20 among ``available`` (the package index's
    versions); ``5.20.1`` that exact release; ``last:N`` (an int) the N newest minor
    releases. Without ``available`` (the index could not be read) the versions are taken
    as given (``5.20`` installs as ``5.20.*``) and ``last:N`` cannot be resolved."""
    if isinstance(spec, int):
        if available is None:
            raise UserError(f"--{library}: last:{spec} needs {library}'s releases from the package index, "
                            "which could not be read; name the versions instead")
        return releases(available)[-spec:], []
    if available is None:
        return sorted(spec, key=version_key), []
    finals = [public(v) for v in available if is_final(public(v))]
    out: list[str] = []
    missing: list[str] = []
    for item in spec:
        depth = len(version_key(item))
        if depth >= 3:  # that exact release
            matches = [v for v in finals if version_key(v) == version_key(item)]
        else:  # the newest patch of that release
            matches = [v for v in finals if version_key(v)[:depth] == version_key(item)]
        if not matches:
            missing.append(f"{library} {item}: no such release on the package index; skipped")
            continue
        out.append(max(matches, key=version_key))
    return sorted(dict.fromkeys(out), key=version_key), missing


@dataclass(frozen=True)
class ReleaseSet:
    """One torch release and one transformers release, measured together."""

    torch: str
    transformers: str

    @property
    def name(self) -> str:
        """The virtual environment's directory name: ``2.13.0-5.20.0``."""
        return f"{self.torch}-{self.transformers}"

    @property
    def label(self) -> str:
        return f"torch {self.torch}, transformers {self.transformers}"

    def as_dict(self) -> dict[str, str]:
        return {"torch": self.torch, "transformers": self.transformers}

    @property
    def key(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return (version_key(self.torch), version_key(self.transformers))


def release_sets(torch: Sequence[str], transformers: Sequence[str]) -> list[ReleaseSet]:
    """Every pairing of the torch and transformers versions, oldest first."""
    sets = [ReleaseSet(t, x) for t in torch for x in transformers]
    return sorted(dict.fromkeys(sets), key=lambda s: s.key)


def run_base(suite: str, suite_hash: str, release: Mapping[str, str]) -> str:
    """The series a release set's run of a suite belongs to (its run directory's name)."""
    return f"{suite}-{suite_hash[:8]}-torch{release['torch']}-transformers{release['transformers']}"


def release_of(run: Mapping[str, Any]) -> dict[str, str | None]:
    """The torch and transformers versions a run measured with: its environment's."""
    libs = ((run.get("environment") or {}).get("libraries") or {})
    out: dict[str, str | None] = {}
    for lib in LIBRARIES:
        value = libs.get(lib)
        out[lib] = public(str(value)) if value else None
    return out


def is_history(run: Mapping[str, Any]) -> bool:
    """Whether a run measured one release set of a history (``reportgen history``)."""
    return isinstance(run.get("release"), Mapping)
