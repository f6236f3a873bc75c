"""Why a step between two releases happened, where it was found: ``runs/causes.yaml``.

A history (``reportgen history``) finds steps: a combination's median moves between two
neighbouring releases by more than the host's drift. The numbers say *that* it moved and
which categories did; the cause is found by reading: the release's notes, a pull request
they name, the model's code between the two releases. Each cause found is one entry::

    - library: torch            # the library whose release brought the change
      release: "2.6.0"          # the first release with it
      combinations: "bert-base--*--sdpa--*"   # the combination ids it explains (a glob)
      cause: >-
        What changed, in a sentence a reader can check at the source.
      source:
        title: PyTorch 2.6 release notes
        url: https://github.com/pytorch/pytorch/releases/tag/v2.6.0

A History page names an entry's cause beside every step it explains (a step from release
A to release B is explained by an entry whose release is after A and at most B); a step
without one is said to be unexplained, with the new release's notes linked.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from reportgen.errors import UserError
from reportgen.records.releases import LIBRARIES, version_key

FILE = "causes.yaml"
_FIELDS = {"library", "release", "combinations", "cause", "source"}
NOTES = {"torch": "https://github.com/pytorch/pytorch/releases/tag/v{version}",
         "transformers": "https://github.com/huggingface/transformers/releases/tag/v{version}"}


@dataclass(frozen=True)
class Cause:
    library: str
    release: str
    combinations: str
    cause: str
    source_title: str
    source_url: str

    def explains(self, library: str, base: str, new: str, combo_id: str) -> bool:
        """Whether this cause falls in the step from ``base`` to ``new`` of ``library``."""
        return (library == self.library
                and version_key(base) < version_key(self.release) <= version_key(new)
                and fnmatch.fnmatchcase(combo_id, self.combinations))


def notes_url(library: str, version: str) -> str:
    """The release notes of one release of torch or transformers."""
    return NOTES[library].format(version=version)


def _entry(item: Any, where: str) -> Cause:
    if not isinstance(item, dict):
        raise UserError(f"{where}: expected a mapping with {', '.join(sorted(_FIELDS))}")
    unknown = set(item) - _FIELDS
    if unknown:
        raise UserError(f"{where}.{sorted(unknown)[0]}: unknown field; valid: {', '.join(sorted(_FIELDS))}")
    missing = _FIELDS - set(item)
    if missing:
        raise UserError(f"{where}: missing {', '.join(sorted(missing))}")
    if item["library"] not in LIBRARIES:
        raise UserError(f"{where}.library: {item['library']!r} is not one of {', '.join(LIBRARIES)}")
    release = str(item["release"])
    if not version_key(release):
        raise UserError(f"{where}.release: {release!r} is not a release number")
    source = item["source"]
    if not isinstance(source, dict) or not {"title", "url"} <= set(source):
        raise UserError(f"{where}.source: expected a mapping with title and url")
    if not str(source["url"]).startswith("https://"):
        raise UserError(f"{where}.source.url: {source['url']!r} is not an https address")
    for key in ("combinations", "cause"):
        if not isinstance(item[key], str) or not item[key].strip():
            raise UserError(f"{where}.{key}: expected a non-empty string")
    return Cause(str(item["library"]), release, item["combinations"], " ".join(item["cause"].split()),
                 str(source["title"]), str(source["url"]))


def load_causes(runs_root: Path | str) -> list[Cause]:
    """The causes recorded beside the runs (``<runs>/causes.yaml``; none without the file).
    A malformed file is one line naming the entry and field (``UserError``)."""
    path = Path(runs_root) / FILE
    if not path.is_file():
        return []
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark is not None else ""
        raise UserError(f"{path}: not valid YAML{at}") from None
    if data is None:
        return []
    if not isinstance(data, list):
        raise UserError(f"{path}: expected a list of causes")
    return [_entry(item, f"{path}: [{i}]") for i, item in enumerate(data)]


def cause_of(causes: list[Cause], library: str, base: str, new: str, combo_id: str) -> Cause | None:
    """The recorded cause of one step, if any."""
    return next((c for c in causes if c.explains(library, base, new, combo_id)), None)
