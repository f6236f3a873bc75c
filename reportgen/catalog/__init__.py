"""Today's models as data: one JSON file per model in ``catalog/data/``, each with the
checkpoint's published config values (transformers ``model_type`` and the config.json
fields that build it, the source named), its Hugging Face Hub id, and the publisher's
stated total (and, for a mixture of experts, active) parameter counts, each with its
exact words and address, and whether those words were found at that address (``verified``,
with ``checked`` saying how; a quote not yet found there is listed as unverified).

An entry may also record its ``census``: the total and active parameters, the input
embedding tables and the head, as ``reportgen models`` counts them on the meta device.
The claims about a model's structure read these without torch; the tests build the model
and recount every recorded census, so a recorded figure cannot drift from the model.

No torch here: suite validation and the render side read the catalog without it; the
counting that builds each model on the meta device is ``profile/census.py``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cache
from pathlib import Path
from typing import Any

from reportgen.errors import UserError

DATA_DIR = Path(__file__).parent / "data"
FAMILIES = ("dense", "moe", "hybrid", "state-space", "encoder", "encoder-decoder")
RELATIVE_TOLERANCE = 0.01  # a computed count agrees within 1% of the stated one ...
# ... or within the stated figure's own rounding where that is coarser ("24B": 23.5-24.5B)
# what a publisher's figure counts: every parameter, all but the input embedding tables
# (the head counted: a lookup is no compute), or all but the embeddings and the head
CONVENTIONS = ("all", "without input embeddings", "without embeddings")
_UNITS = {"K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}
_FIGURE = re.compile(r"^\s*(\d+(?:\.(\d+))?)\s*([KMBT])\s*$")


@dataclass(frozen=True)
class Stated:
    """A publisher's parameter count: the figure as written ("8.2B"), the exact words it
    stands in, and where they are."""

    figure: str
    quote: str
    source: str
    counts: str = "all"  # one of CONVENTIONS: the publisher's convention, from their own words
    disagreement: str | None = None  # where the computed count is outside the rule: why, in words
    verified: bool = False  # the quote was found, word for word, at its source
    checked: str | None = None  # how the quote was checked (or why it could not be), in words

    @property
    def value(self) -> float:
        return parse_figure(self.figure)[0]

    @property
    def tolerance(self) -> float:
        """How far a computed count may be from `value` and agree: 1%, or half a unit of
        the figure's last digit where the publisher rounded more coarsely."""
        value, unit = parse_figure(self.figure)
        return max(RELATIVE_TOLERANCE * value, unit / 2)

    def rule(self) -> str:
        """The agreement rule in words ("within 1%" or "within the rounding of 24B")."""
        value, unit = parse_figure(self.figure)
        return "within 1%" if RELATIVE_TOLERANCE * value >= unit / 2 else f"within the rounding of {self.figure}"

    def agrees(self, computed: int) -> bool:
        return abs(computed - self.value) <= self.tolerance


@dataclass(frozen=True)
class Entry:
    """One catalog model."""

    name: str
    hub_id: str
    family: str
    config_source: str
    config: dict[str, Any]
    total: Stated | None = None
    active: Stated | None = None
    stated_missing: str | None = None
    note: str | None = None
    census: dict[str, int] | None = None  # CENSUS_FIELDS, as the meta-device census counts them
    path: Path = field(default=DATA_DIR)

    @property
    def model_type(self) -> str:
        return str(self.config["model_type"])

    def overrides(self) -> dict[str, Any]:
        """The config fields other than ``model_type`` (what ``from_dict`` is given)."""
        return {k: v for k, v in self.config.items() if k != "model_type"}


def parse_figure(text: str) -> tuple[float, float]:
    """("8.2B") -> (8.2e9, 1e8): the value and the unit of its last digit."""
    match = _FIGURE.match(text)
    if not match:
        raise ValueError(f"not a parameter figure: {text!r} (expected e.g. 8.2B, 149M)")
    scale = Decimal(_UNITS[match.group(3)])
    decimals = len(match.group(2) or "")
    return float(Decimal(match.group(1)) * scale), float(scale / 10**decimals)


def _stated(data: Any, where: str) -> Stated | None:
    if data is None:
        return None
    if not isinstance(data, dict) or not {"figure", "quote", "source"} <= set(data) \
            or set(data) - {"figure", "quote", "source", "counts", "disagreement", "verified", "checked"}:
        raise UserError(f"{where}: a stated count has figure, quote and source "
                        "(and counts, disagreement, verified, checked)")
    verified = data.get("verified", False)
    if not isinstance(verified, bool):
        raise UserError(f"{where}: verified must be true or false")
    if not all(isinstance(v, str) and v.strip() for k, v in data.items() if k != "verified"):
        raise UserError(f"{where}: figure, quote, source, counts, disagreement and checked must be non-empty text")
    if verified and "checked" not in data:
        raise UserError(f"{where}: a verified quote says in checked where its words were found")
    try:
        parse_figure(data["figure"])
    except ValueError as exc:
        raise UserError(f"{where}: {exc}") from exc
    counts = data.get("counts", "all")
    if counts not in CONVENTIONS:
        raise UserError(f"{where}: counts {counts!r} is not one of {', '.join(map(repr, CONVENTIONS))}")
    return Stated(figure=data["figure"], quote=data["quote"], source=data["source"], counts=counts,
                  disagreement=data.get("disagreement"), verified=verified, checked=data.get("checked"))


_KEYS = {"name", "hub_id", "family", "config_source", "config", "stated", "stated_missing", "note", "census"}
#: a recorded census: every parameter, those one token runs, the input embedding tables not
#: shared with the head, and the head (`profile.census.Census`)
CENSUS_FIELDS = ("total", "active", "input_embeddings", "head")


def _census(data: Any, where: str) -> dict[str, int] | None:
    if data is None:
        return None
    if not isinstance(data, dict) or set(data) != set(CENSUS_FIELDS):
        raise UserError(f"{where}: a census has exactly {', '.join(CENSUS_FIELDS)}")
    for key in CENSUS_FIELDS:
        value = data[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise UserError(f"{where}.{key}: expected a whole number of parameters, got {value!r}")
    return {k: int(data[k]) for k in CENSUS_FIELDS}


def load_entry(path: Path) -> Entry:
    """One data file, validated: a bad field is a `UserError` naming the file and field."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UserError(f"{path.name}: cannot read catalog entry: {exc}") from exc
    if not isinstance(data, dict):
        raise UserError(f"{path.name}: a catalog entry is a JSON object")
    unknown = set(data) - _KEYS
    missing = {"name", "hub_id", "family", "config_source", "config", "stated"} - set(data)
    if unknown or missing:
        raise UserError(f"{path.name}: unknown fields {sorted(unknown)}, missing {sorted(missing)}")
    if data["name"] != path.stem:
        raise UserError(f"{path.name}: name {data['name']!r} differs from the file name")
    if data["family"] not in FAMILIES:
        raise UserError(f"{path.name}: family {data['family']!r} is not one of {', '.join(FAMILIES)}")
    config = data["config"]
    if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
        raise UserError(f"{path.name}: config needs a model_type")
    stated = data["stated"]
    if not isinstance(stated, dict) or set(stated) - {"total", "active"}:
        raise UserError(f"{path.name}: stated holds total and active only")
    total = _stated(stated.get("total"), f"{path.name}: stated.total")
    active = _stated(stated.get("active"), f"{path.name}: stated.active")
    if total is None and not data.get("stated_missing"):
        raise UserError(f"{path.name}: no stated total and no stated_missing saying why")
    return Entry(name=data["name"], hub_id=data["hub_id"], family=data["family"],
                 config_source=data["config_source"], config=dict(config), total=total, active=active,
                 stated_missing=data.get("stated_missing"), note=data.get("note"),
                 census=_census(data.get("census"), f"{path.name}: census"), path=path)


@cache
def _load_all(directory: str) -> dict[str, Entry]:
    entries = [load_entry(p) for p in sorted(Path(directory).glob("*.json"))]
    return {e.name: e for e in entries}


def catalog(directory: Path = DATA_DIR) -> dict[str, Entry]:
    """Every entry by name, in name order."""
    return dict(_load_all(str(directory)))


def names(directory: Path = DATA_DIR) -> tuple[str, ...]:
    return tuple(catalog(directory))


def is_catalog_name(name: str) -> bool:
    return name in _load_all(str(DATA_DIR))


def entry(name: str) -> Entry:
    """The entry called ``name``; an unknown name is a `UserError` listing the names."""
    entries = catalog()
    if name not in entries:
        raise UserError(f"unknown catalog model {name!r}; the catalog has: {', '.join(entries)}")
    return entries[name]
