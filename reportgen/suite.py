"""Suite files (TOML): validation, CLI overrides, expansion into ``Combination``s.

Everything here is checked before anything runs, and a bad value becomes one
``UserError`` line naming the file (or flag), the key, the value and the valid choices.
No torch: the transformers model-type table is only consulted, lazily, for a model name
that is neither a preset nor a path. A Hugging Face Hub id (``org/name[@revision]``) is
resolved here too, once every override is applied: its config is fetched (never weights),
and what was resolved (the commit, the full config) travels with the suite to the workers.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reportgen import catalog
from reportgen.errors import UserError
from reportgen.presets import preset_names
from reportgen.vocabulary import (
    ATTENTION_MICRO,
    ATTN_IMPLEMENTATIONS,
    COMPILE_MODES,
    COMPILE_NONE,
    DEVICES,
    DTYPES,
    MODES,
    SCALES,
    STUDIES,
)

SUITES_DIR = Path(__file__).parent / "suites"


# Matrix keys, in the order combinations are expanded (outermost first after models).
LIST_KEYS: tuple[str, ...] = ("models", "modes", "dtypes", "attn", "batch_sizes", "seq_lens", "compile")
MATRIX_KEYS: tuple[str, ...] = ("models", "scale", "seq_lens", "batch_sizes", "dtypes", "attn", "modes",
                                "compile", "layers", "experts")
REQUIRED_MATRIX_KEYS: tuple[str, ...] = ("models", "seq_lens")
MATRIX_DEFAULTS: dict[str, list[Any]] = {
    "batch_sizes": [1],
    "dtypes": ["fp32"],
    "attn": ["sdpa"],
    "modes": ["forward"],
    "compile": [COMPILE_NONE],
}
TOP_LEVEL_KEYS: tuple[str, ...] = ("name", "description", "settings", "matrix")
SETTINGS_KEYS: tuple[str, ...] = ("budget_s", "profile_iterations", "seed", "scale", "device", "rounds",
                                  "min_rounds", "target", "trust_remote_code", "studies", "layers",
                                  "experts")

# The CLI flag that overrides each key, so a bad flag value names the flag.
OVERRIDE_FLAGS: dict[str, str] = {
    "models": "--models",
    "scale": "--scale",
    "seq_lens": "--seq-lens",
    "batch_sizes": "--batch-sizes",
    "dtypes": "--dtypes",
    "attn": "--attn",
    "modes": "--modes",
    "compile": "--compile",
    "device": "--device",
    "budget_s": "--budget-s",
    "trust_remote_code": "--trust-remote-code",
    "studies": "--studies",
    "layers": "--layers",
    "experts": "--experts",
}

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_SLUG_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")

@dataclass(frozen=True)
class Combination:
    """One point of a suite: what ``measure`` runs and what a record describes."""

    model: str
    scale: str
    mode: str
    dtype: str
    attn_implementation: str
    batch_size: int
    seq_len: int
    device: str
    compile: str = COMPILE_NONE
    # --layers N: N of the model's layers measured at its full width (None: all of them)
    layers: int | None = None
    # --experts N: a mixture of experts built with N of its routed experts per layer (None: all)
    experts: int | None = None
    # a Hub model's resolved source (hub.resolve): handed to the worker, kept out of the id,
    # equality and as_dict (the record's model section carries it)
    source: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    @property
    def id(self) -> str:
        parts = [
            model_slug(self.model),
            self.mode,
            self.dtype,
            self.attn_implementation,
            f"b{self.batch_size}",
            f"s{self.seq_len}",
        ]
        if self.scale == "tiny":
            parts.append("tiny")
        # Only a depth-reduced combination names its depth, so every other id stays what it was.
        if self.layers is not None:
            parts.append(f"{self.layers}l")
        if self.experts is not None:
            parts.append(f"{self.experts}e")
        # Only a compiled combination names its mode, so every eager id stays what it was.
        if self.compile != COMPILE_NONE:
            parts.append(f"compile-{self.compile}")
        return "--".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name != "source" and not (f.name in ("layers", "experts") and getattr(self, f.name) is None)}

    def hash_dict(self) -> dict[str, Any]:
        """What the suite hash sees: an eager combination hashes as it did before the
        compile axis existed, so existing run directories still resume."""
        data = self.as_dict()
        if self.compile == COMPILE_NONE:
            del data["compile"]
        return data


# A study's budget per combination, in timing budgets (``Settings.study_budget_s``).
STUDY_BUDGET_FACTOR = 10.0


@dataclass(frozen=True)
class Settings:
    budget_s: float = 3.0
    profile_iterations: int = 3
    seed: int = 0
    scale: str = "reference"
    device: str = "auto"
    # Each combination is timed in this many rounds, each round a fresh worker process
    # visiting the combinations in a shuffled order; ``budget_s`` is split between them.
    rounds: int = 1
    # Rounds stop early once ``min_rounds`` clean rounds (default: six, or ``rounds`` if
    # fewer) give an interval within ``target`` of the median (relative half-width,
    # default 0.02); every round's timing stops at the target too (execute.rounds.Policy)
    min_rounds: int | None = None
    target: float | None = None
    trust_remote_code: bool = False
    # Studies (vocabulary.STUDIES) run in each combination's profiled round, after its
    # attribution; each gets ``study_budget_s``.
    studies: tuple[str, ...] = ()
    # every matrix entry's default ``layers`` (None: the whole model)
    layers: int | None = None
    # every matrix entry's default ``experts`` (None: every routed expert)
    experts: int | None = None

    @property
    def study_budget_s(self) -> float:
        """Each study's time budget per combination: STUDY_BUDGET_FACTOR timing budgets
        (a study compares several ways of running the forward, each against bare ones)."""
        return STUDY_BUDGET_FACTOR * self.budget_s

    def as_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        if out["rounds"] == 1:
            del out["rounds"]  # the one-round default keeps the hash suites had before rounds
        for key in ("min_rounds", "target"):
            if out[key] is None:
                del out[key]  # absent unless set: suites without them keep their hash
        if not self.trust_remote_code:  # absent unless set: suites without it keep their hash
            del out["trust_remote_code"]
        for key in ("layers", "experts"):
            if out[key] is None:  # absent unless set: suites without it keep their hash
                del out[key]
        if self.studies:  # absent unless asked for: suites without studies keep their hash
            out["studies"] = list(self.studies)
        else:
            del out["studies"]
        return out


@dataclass(frozen=True)
class Suite:
    """A validated suite. ``matrix`` entries have every key filled in."""

    name: str
    source: str
    description: str
    settings: Settings
    matrix: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)
    # Hub model name -> what hub.resolve returned (id, commit, full config)
    sources: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def combinations(self) -> list[Combination]:
        """Cross product of each matrix entry, deduplicated, in first-seen order."""
        seen: dict[Combination, None] = {}
        for entry in self.matrix:
            for model in entry["models"]:
                for mode in entry["modes"]:
                    for dtype in entry["dtypes"]:
                        for attn in entry["attn"]:
                            for batch in entry["batch_sizes"]:
                                for seq in entry["seq_lens"]:
                                    for compile_mode in entry.get("compile", MATRIX_DEFAULTS["compile"]):
                                        combo = Combination(
                                            model=model,
                                            scale=entry["scale"],
                                            mode=mode,
                                            dtype=dtype,
                                            attn_implementation=attn,
                                            batch_size=batch,
                                            seq_len=seq,
                                            device=self.settings.device,
                                            compile=compile_mode,
                                            layers=entry.get("layers"),
                                            experts=entry.get("experts"),
                                            source=self.sources.get(model),
                                        )
                                        seen.setdefault(combo, None)
        return list(seen)

    def spec(self) -> dict[str, Any]:
        """The expanded, validated suite as plain JSON data (stored in run.json)."""
        spec = {
            "name": self.name,
            "description": self.description,
            "settings": self.settings.as_dict(),
            "matrix": [dict(entry) for entry in self.matrix],
            "combinations": [c.as_dict() for c in self.combinations()],
        }
        if self.sources:
            spec["models"] = {name: dict(source) for name, source in self.sources.items()}
        return spec

    @property
    def hash(self) -> str:
        # The description and the way the matrix is split into entries do not change
        # what is measured, so they stay out of the hash: editing prose keeps resume.
        canonical = {
            "name": self.name,
            "settings": self.settings.as_dict(),
            "combinations": [c.hash_dict() for c in self.combinations()],
        }
        if self.sources:
            # the commit a Hub revision resolved to: a new commit upstream is a new run
            canonical["models"] = {name: [s.get("id"), s.get("revision")] for name, s in self.sources.items()}
        text = json.dumps(canonical, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def with_device(self, device: str) -> Suite:
        """The suite with ``auto`` resolved, so the hash names the device measured."""
        return dataclasses.replace(self, settings=dataclasses.replace(self.settings, device=device))


def model_slug(model: str) -> str:
    """A file-name-safe slug; a config path becomes its folder name plus a short hash, a
    Hub id ``Org/Name`` becomes ``org--name``."""
    from reportgen import hub

    if hub.is_hub_id(model):
        return hub.slug(model)
    if "/" in model or model.endswith(".json"):
        path = Path(model)
        stem = path.parent.name if path.name == "config.json" else path.stem
        digest = hashlib.sha256(model.encode()).hexdigest()[:6]
        return f"{_SLUG_UNSAFE.sub('-', stem).strip('-') or 'config'}-{digest}"
    return _SLUG_UNSAFE.sub("-", model)


def builtin_suites() -> list[str]:
    return sorted(p.stem for p in SUITES_DIR.glob("*.toml"))


def default_suite_name(device: str) -> str:
    """gpu-default where CUDA is there to use, cpu-default otherwise."""
    if device == "cpu":
        return "cpu-default"
    import torch  # lazy: suite.py stays importable without torch

    return "gpu-default" if torch.cuda.is_available() else "cpu-default"


def load_suite(
    name_or_path: str | Path,
    overrides: Mapping[str, Any] | None = None,
) -> Suite:
    """Load, validate and override a suite: a built-in name or a path to a TOML file.

    ``overrides`` maps a matrix key (``models``, ``seq_lens``...) or a setting
    (``device``, ``budget_s``, ``scale``) to a value already parsed by
    :func:`parse_overrides`; a matrix key replaces that key in every matrix entry.
    """
    path, source, where = _locate(name_or_path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{where}: invalid TOML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{where}: cannot read suite file: {exc}") from None
    suite = _validate(raw, where=where, source=source, default_name=path.stem, base_dir=path.parent)
    suite = apply_overrides(suite, overrides or {})
    return resolve_hub_models(suite, "--models" if "models" in (overrides or {}) else f"{where}: models")


def resolve_hub_models(suite: Suite, label: str) -> Suite:
    """Resolve every Hub id the suite names (after overrides, so a model replaced by
    ``--models`` is never fetched, and ``trust_remote_code`` from either place applies)."""
    from reportgen import hub

    names = [m for entry in suite.matrix for m in entry["models"] if m not in suite.sources]
    names = [m for m in dict.fromkeys(names) if hub.is_hub_id(m)]
    if not names:
        return suite
    sources = dict(suite.sources)
    for name in names:
        try:
            sources[name] = dict(hub.resolve(name, trust_remote_code=suite.settings.trust_remote_code))
        except UserError as exc:
            raise UserError(f"{label}: {exc}") from None
    return dataclasses.replace(suite, sources=sources)


def _locate(name_or_path: str | Path) -> tuple[Path, str, str]:
    text = str(name_or_path)
    looks_like_path = isinstance(name_or_path, Path) or "/" in text or text.endswith(".toml")
    if not looks_like_path:
        builtin = SUITES_DIR / f"{text}.toml"
        if builtin.is_file():
            return builtin, f"builtin:{text}", f"suites/{text}.toml"
        valid = ", ".join(builtin_suites())
        raise UserError(f"--suite: unknown suite '{text}'; valid: {valid}, or a path to a .toml file")
    path = Path(text)
    if not path.is_file():
        raise UserError(f"--suite: suite file '{text}' does not exist")
    return path, str(path), text


# --- validation -----------------------------------------------------------------------


def _validate(
    raw: Mapping[str, Any], *, where: str, source: str, default_name: str, base_dir: Path
) -> Suite:
    _check_keys(raw, TOP_LEVEL_KEYS, where, "")
    name = raw.get("name", default_name)
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise UserError(
            f"{where}: name: {name!r} is not a valid suite name; valid: letters, digits, '.', '_', '-'"
        )
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise UserError(f"{where}: description: expected a string, got {_type_name(description)}")

    settings_raw = raw.get("settings", {})
    if not isinstance(settings_raw, dict):
        raise UserError(f"{where}: settings: expected a table, got {_type_name(settings_raw)}")
    _check_keys(settings_raw, SETTINGS_KEYS, where, "settings.")
    settings = Settings(
        **{k: _check_setting(k, v, f"{where}: settings.{k}") for k, v in settings_raw.items()}
    )

    matrix_raw = raw.get("matrix")
    if matrix_raw is None:
        raise UserError(f"{where}: matrix: missing; add at least one [[matrix]] table")
    if not isinstance(matrix_raw, list) or not all(isinstance(m, dict) for m in matrix_raw):
        raise UserError(f"{where}: matrix: expected [[matrix]] tables, got {_type_name(matrix_raw)}")
    if not matrix_raw:
        raise UserError(f"{where}: matrix: empty; add at least one [[matrix]] table")

    entries = []
    for index, entry_raw in enumerate(matrix_raw):
        prefix = f"matrix[{index}]."
        _check_keys(entry_raw, MATRIX_KEYS, where, prefix)
        for key in REQUIRED_MATRIX_KEYS:
            if key not in entry_raw:
                raise UserError(f"{where}: {prefix}{key}: missing (required in every [[matrix]] table)")
        entry: dict[str, Any] = {}
        for key in MATRIX_KEYS:
            if key in entry_raw:
                entry[key] = _check_matrix_value(
                    key, entry_raw[key], f"{where}: {prefix}{key}", base_dir=base_dir
                )
            elif key == "scale":
                entry[key] = settings.scale
            elif key in ("layers", "experts"):
                if getattr(settings, key) is not None:
                    entry[key] = getattr(settings, key)
            else:
                entry[key] = list(MATRIX_DEFAULTS[key])
        entries.append(entry)
    return Suite(name=name, source=source, description=description, settings=settings, matrix=tuple(entries))


def _check_keys(table: Mapping[str, Any], valid: Iterable[str], where: str, prefix: str) -> None:
    valid = tuple(valid)
    for key in table:
        if key not in valid:
            raise UserError(f"{where}: {prefix}{key}: unknown key; valid: {', '.join(valid)}")


def _type_name(value: Any) -> str:
    return {dict: "a table", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )


def _check_setting(key: str, value: Any, label: str) -> Any:
    if key == "budget_s":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UserError(f"{label}: expected a number of seconds, got {_type_name(value)} {value!r}")
        if not value > 0:  # also rejects NaN
            raise UserError(f"{label}: {value!r} must be > 0")
        return float(value)
    if key == "target":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UserError(f"{label}: expected a relative half-width such as 0.02, got {_type_name(value)} {value!r}")
        if not 0 < value < 1:
            raise UserError(f"{label}: {value!r} must be between 0 and 1 (0.02: the interval within 2% of the median)")
        return float(value)
    if key in ("layers", "experts"):
        return _count(key, value, label)
    if key in ("profile_iterations", "seed", "rounds", "min_rounds"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise UserError(f"{label}: expected an integer, got {_type_name(value)} {value!r}")
        minimum = 0 if key == "seed" else 1
        if value < minimum:
            raise UserError(f"{label}: {value!r} must be >= {minimum}")
        return value
    if key == "scale":
        return _choice(value, SCALES, "scale", label)
    if key == "device":
        return _choice(value, DEVICES, "device", label)
    if key == "trust_remote_code":
        if not isinstance(value, bool):
            raise UserError(f"{label}: expected true or false, got {_type_name(value)} {value!r}")
        return value
    if key == "studies":
        if not isinstance(value, list):
            raise UserError(f"{label}: expected a list of study names, got {_type_name(value)} {value!r}")
        return tuple(dict.fromkeys(_choice(item, STUDIES, "study", label) for item in value))
    raise AssertionError(key)


def _choice(value: Any, valid: tuple[str, ...], what: str, label: str) -> str:
    if not isinstance(value, str):
        raise UserError(f"{label}: expected a string, got {_type_name(value)} {value!r}")
    if value not in valid:
        raise UserError(f"{label}: unknown {what} {value!r}; valid: {', '.join(valid)}")
    return value


def _count(key: str, value: Any, label: str) -> int:
    """A layer or routed-expert count: how many of each model's layers (or experts per
    layer) to measure; whether the model has that many, of every kind of layer or at
    least as many experts as a token is routed to, is checked against the model before
    anything runs."""
    noun = "layers" if key == "layers" else "experts"
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserError(f"{label}: expected a number of {noun}, got {_type_name(value)} {value!r}")
    if value < 0:
        raise UserError(f"{label}: {value!r} is not a number of {noun}")
    return value  # (0 too: the model's check names its valid range)


def _check_matrix_value(key: str, value: Any, label: str, *, base_dir: Path | None) -> Any:
    if key == "scale":
        return _choice(value, SCALES, "scale", label)
    if key in ("layers", "experts"):
        return _count(key, value, label)
    if not isinstance(value, list):
        raise UserError(f"{label}: expected a list, got {_type_name(value)} {value!r}")
    if not value:
        raise UserError(f"{label}: empty list; give at least one value")
    if key in ("seq_lens", "batch_sizes"):
        for item in value:
            if isinstance(item, bool) or not isinstance(item, int):
                raise UserError(f"{label}: expected integers, got {_type_name(item)} {item!r}")
            if item < 1:
                raise UserError(f"{label}: {item!r} must be >= 1")
        return list(dict.fromkeys(value))
    for item in value:
        if not isinstance(item, str):
            raise UserError(f"{label}: expected strings, got {_type_name(item)} {item!r}")
    if key == "models":
        return list(dict.fromkeys(check_model(m, label, base_dir=base_dir) for m in value))
    valid = {"dtypes": DTYPES, "attn": ATTN_IMPLEMENTATIONS, "modes": MODES, "compile": COMPILE_MODES}[key]
    what = {"dtypes": "dtype", "attn": "attention implementation", "modes": "mode",
            "compile": "compile mode"}[key]
    return list(dict.fromkeys(_choice(item, valid, what, label) for item in value))


def _transformers_model_types() -> tuple[str, ...]:
    # Importing this pulls torch in (transformers 5), so only reach for it when a name is
    # neither a preset nor a path.
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return tuple(CONFIG_MAPPING_NAMES)


def check_model(name: str, label: str, *, base_dir: Path | None = None) -> str:
    """A preset, ``attention-micro``, a transformers model type, a config.json path, or a
    Hugging Face Hub id (its form only: `resolve_hub_models` fetches it)."""
    from reportgen import hub

    presets = preset_names()
    if name in presets or name == ATTENTION_MICRO or catalog.is_catalog_name(name):
        return name
    if "/" in name or name.endswith(".json"):
        for candidate in [Path(name)] + ([base_dir / name] if base_dir is not None else []):
            config = candidate / "config.json" if candidate.is_dir() else candidate
            if config.is_file() and config.suffix == ".json":
                return str(config)
        if hub.is_hub_id(name):
            return name
        raise UserError(f"{label}: model config '{name}' does not exist; give a path to a config.json "
                        "or a Hugging Face Hub id (org/name or org/name@revision)")
    model_types = _transformers_model_types()
    if name in model_types:
        return name
    close = difflib.get_close_matches(name, list(presets) + list(catalog.names()) + list(model_types), n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    raise UserError(
        f"{label}: unknown model {name!r}{hint}; valid: {', '.join(presets)}, {ATTENTION_MICRO}, "
        "a catalog model (reportgen models), a transformers model type (bert, llama, ...), a path to a config.json "
        "or a Hugging Face Hub id (org/name[@revision])"
    )


# --- CLI overrides --------------------------------------------------------------------


def parse_overrides(raw: Mapping[str, str | float | None]) -> dict[str, Any]:
    """Parse and validate CLI flag values (comma-separated lists) keyed like the suite.

    Keys are those of ``OVERRIDE_FLAGS``; ``None`` means the flag was not given.
    """
    parsed: dict[str, Any] = {}
    for key, value in raw.items():
        if value is None:
            continue
        flag = OVERRIDE_FLAGS[key]
        if key == "trust_remote_code":
            parsed[key] = _check_setting(key, value, flag)
        elif key in ("scale", "device"):
            parsed[key] = _choice(str(value).strip(), SCALES if key == "scale" else DEVICES, key, flag)
        elif key == "budget_s":
            parsed[key] = _check_setting(key, _number(value, flag), flag)
        elif key in ("layers", "experts"):
            parsed[key] = _count(key, _integer(str(value).strip(), flag), flag)
        elif key == "studies":
            parsed[key] = _check_setting(key, [t.strip() for t in str(value).split(",") if t.strip()], flag)
        else:
            texts = [item.strip() for item in str(value).split(",") if item.strip()]
            items: list[Any] = texts
            if key in ("seq_lens", "batch_sizes"):
                items = [_integer(item, flag) for item in texts]
            parsed[key] = _check_matrix_value(key, items, flag, base_dir=None)
    return parsed


def _integer(text: str, flag: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise UserError(f"{flag}: expected integers, got {text!r}") from None


def _number(value: str | float, flag: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise UserError(f"{flag}: expected a number of seconds, got {value!r}") from None


def apply_overrides(suite: Suite, overrides: Mapping[str, Any]) -> Suite:
    """Replace matrix keys in every entry and settings; values must be pre-validated."""
    if not overrides:
        return suite
    settings_changes = {k: v for k, v in overrides.items() if k in SETTINGS_KEYS}
    matrix_changes = {k: v for k, v in overrides.items() if k in MATRIX_KEYS}
    matrix = tuple({**entry, **matrix_changes} for entry in suite.matrix)
    settings = dataclasses.replace(suite.settings, **settings_changes)
    changed = dataclasses.replace(suite, settings=settings, matrix=matrix)
    # Flags that replace what is measured make another suite: named and described for
    # what it measured, never as the suite it started from.
    # A flag that repeats what every entry already says (`--compile none` on an eager
    # suite) changes nothing and keeps the suite's name.
    measured = {k: v for k, v in overrides.items()
                if (k in MATRIX_KEYS or k == "scale")
                and any(entry.get(k) != v for entry in suite.matrix)}
    if measured:
        flags = " ".join(f"{OVERRIDE_FLAGS[k]} {','.join(map(str, v)) if isinstance(v, list) else v}"
                         for k, v in measured.items())
        changed = dataclasses.replace(changed, name=CUSTOM_SUITE, description=f"{suite.name} with {flags}")
    return changed


CUSTOM_SUITE = "custom"
"""The name of a suite whose matrix or scale CLI flags replaced; its description says
which suite and which flags."""
