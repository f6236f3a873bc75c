"""Studies: extra measurements a suite asks for (``studies = [...]`` in ``[settings]``).

A study runs in a combination's profiled round, after its attribution, on the model and
step already built and warm, and returns one JSON-ready dict that the record keeps at
``studies.<name>``. Each study is a function ``study(built, structure, combo, *, run_dir,
combo_id, budget_s) -> dict`` (``structure``: the model's `structure.Structure`, derived
once for the combination) named in ``REGISTRY`` as ``"module:function"`` and imported only when
asked for. Whatever one study does, the combination keeps its record: a study that raises
is recorded ``{"status": "failed", "reason": "<Type>: <message>"}``, and a name the
vocabulary knows but this install has no code for is ``{"status": "not available"}``.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from reportgen.records.status import FAILED, NOT_AVAILABLE, OK
from reportgen.vocabulary import STUDIES

__all__ = ["REGISTRY", "run_studies", "run_study"]

# Study name (vocabulary.STUDIES) -> "module:function". A name in STUDIES without an
# entry here is recorded as not available.
REGISTRY: dict[str, str] = {
    "instrumentation": "reportgen.profile.instrumentation:study",
    "tools": "reportgen.profile.tools:study",
}

Study = Callable[..., dict[str, Any]]


def _load(target: str) -> Study:
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)  # type: ignore[no-any-return]


def run_study(name: str, built: Any, structure: Any, combo: Any, *, run_dir: Path, combo_id: str,
              budget_s: float) -> dict[str, Any]:
    """Run one study; raises what the study raises (``run_studies`` records it)."""
    if name not in STUDIES:
        raise ValueError(f"unknown study {name!r}; valid: {', '.join(STUDIES)}")
    target = REGISTRY.get(name)
    if target is None:
        return {"status": NOT_AVAILABLE,
                "reason": f"this reportgen has no code for the {name!r} study"}
    result = dict(_load(target)(built, structure, combo, run_dir=Path(run_dir), combo_id=combo_id,
                                budget_s=budget_s))
    result.setdefault("status", OK)
    return result


def run_studies(names: Iterable[str], built: Any, structure: Any, combo: Any, *, run_dir: Path, combo_id: str,
                budget_s: float, reset: Callable[[], None] | None = None) -> dict[str, dict[str, Any]]:
    """Every study in ``names``, in order: ``{name: its dict}``. A study that raises is
    recorded as failed and the next one still runs; ``reset`` (the step's) puts the
    step back in its starting state after a failure (a decode cache cut back)."""
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        try:
            out[name] = run_study(name, built, structure, combo, run_dir=run_dir, combo_id=combo_id,
                                  budget_s=budget_s)
        except Exception as exc:  # noqa: BLE001 - a study never costs the combination
            message = (str(exc).strip().splitlines() or [""])[0]
            out[name] = {"status": FAILED, "reason": f"{type(exc).__name__}: {message}"}
            if reset is not None:
                with contextlib.suppress(Exception):  # the record above says what went wrong
                    reset()
    return out
