"""A model name resolved (`resolve`): a preset (the table: `reportgen.presets`),
``attention-micro``, a transformers model type, a local config.json or a Hugging Face Hub
id, as a `ModelSpec` that makes its transformers config at a scale, and with
``--layers`` the plan of the cut (`DepthPlan`).

Nothing here downloads weights: a Hub model's config.json is fetched alone
(`reportgen.hub`).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reportgen.errors import UserError
from reportgen.presets import PRESETS, preset_names
from reportgen.profile import experts as experts_mod
from reportgen.profile.autoclass import architecture, meta_model
from reportgen.profile.layers import Depth, reduce_depth
from reportgen.profile.shrink import shrink_config
from reportgen.vocabulary import ATTENTION_MICRO, SCALES

MICRO = ATTENTION_MICRO


@dataclass(frozen=True, eq=False)
class ModelSpec:
    """A resolved model name: where its config comes from."""

    name: str
    model_type: str
    source: str  # "preset" | "catalog" | "model_type" | "config_file" | "hub" | "micro"
    overrides: Mapping[str, Any] = field(default_factory=dict)
    hub: Mapping[str, Any] | None = None  # source="hub": what `hub.resolve` returned

    @classmethod
    def from_hub(cls, name: str, hub: Mapping[str, Any]) -> ModelSpec:
        overrides = {k: v for k, v in hub["config"].items() if k != "model_type"}
        return cls(name=name, model_type=hub["model_type"], source="hub", overrides=overrides, hub=hub)

    @property
    def remote_code(self) -> bool:
        return bool(self.hub and self.hub.get("remote_code"))

    def make_config(self, scale: str = "reference", min_positions: int = 0, layers: int | None = None,
                    experts: int | None = None) -> Any:
        """The transformers config at ``scale``; ``min_positions`` is the longest sequence
        the model will see (tiny configs grow their position tables to fit it); ``layers``
        keeps that many of the model's layers, chosen by kind, and ``experts`` that many
        routed experts per layer (`depth_config`)."""
        return self.depth_config(scale, min_positions, layers, experts)[0]

    def depth_config(self, scale: str = "reference", min_positions: int = 0, layers: int | None = None,
                     experts: int | None = None) -> tuple[Any, DepthPlan | None]:
        """`make_config`, and with ``layers`` or ``experts`` the plan of the cut: which
        layers of which kinds, how many routed experts, and the config of the whole model
        at the same widths."""
        if self.source == "micro":
            raise UserError(f"{MICRO} has no transformers config")
        if scale not in SCALES:
            raise UserError(f"unknown scale {scale!r}; choose from {', '.join(SCALES)}")
        from transformers import CONFIG_MAPPING

        if self.remote_code:
            from reportgen import hub

            config = hub.load_remote_config(dict(self.hub or {}))
        elif self.source in ("config_file", "hub", "catalog"):
            config = CONFIG_MAPPING[self.model_type].from_dict(dict(self.overrides))
        else:
            config = CONFIG_MAPPING[self.model_type](**dict(self.overrides))
        if layers is not None or experts is not None:
            return config, plan_depth(config, layers, self.name, scale, min_positions, experts)
        if scale == "tiny":
            shrink_config(config, min_positions=min_positions)
        return config, None


@dataclass(frozen=True)
class DepthPlan:
    """``--layers`` and ``--experts``: the layers kept (`layers.Depth`), the whole model's
    config at the widths measured (for its exact parameter and FLOP counts) and, with
    fewer routed experts, their counts (``measured``, ``full``, ``top_k``; ``groups`` where
    group-limited routing became one group)."""

    depth: Depth
    full_config: Any
    experts: dict[str, Any] | None = None


def plan_depth(config: Any, n: int | None, name: str, scale: str, min_positions: int,
               experts: int | None = None) -> DepthPlan:
    """Cut ``config`` (in place) to ``n`` of its layers (None: all), chosen by kind and
    checked on the meta device, and to ``experts`` routed experts per layer (None: all);
    at ``--scale tiny`` the widths shrink after the cut, the depth stays, and the experts
    are counted against the tiny model's."""
    if architecture(config) == "encoder-decoder":
        flag = f"--layers {n}" if n is not None else f"--experts {experts}"
        raise UserError(f"{flag}: {name} is an encoder-decoder model; {flag.split()[0]} measures models "
                        "with one stack of layers")
    full = copy.deepcopy(config)
    reduced = None
    if experts is not None and scale != "tiny":
        # before the cut, so the meta builds that choose the layers hold the fewer experts
        reduced = _reduce_experts(config, full, experts, name)
    depth = reduce_depth(config, n, meta_model, what=name)
    if scale == "tiny":
        for part in (config, full):
            shrink_config(part, min_positions=min_positions, depth=False)
        if experts is not None:  # counted against the tiny model's experts
            reduced = _reduce_experts(config, full, experts, name)
    return DepthPlan(depth, full, reduced)


def _reduce_experts(config: Any, full: Any, n: int, name: str) -> dict[str, Any]:
    """``config`` (in place) with ``n`` routed experts per layer, checked against ``full``'s."""
    route = experts_mod.check(full, n, name)
    reduced: dict[str, Any] = {"measured": int(n), "full": route.experts, "top_k": route.top_k}
    if n < route.experts:
        reduced.update(experts_mod.reduce(config, n))
    return reduced


def check_layers(combos: Any) -> None:
    """Refuse, before anything runs, a ``--layers`` count a model cannot be measured at
    (none, more than it has, fewer than its kinds of layer), or an ``--experts`` count
    (none, fewer than a token is routed to, more than it has, a model without routed
    experts): one line, with the valid range. Built on the meta device: no memory, no
    weights."""
    seen: set[tuple[Any, ...]] = set()
    for combo in combos:
        n, e = getattr(combo, "layers", None), getattr(combo, "experts", None)
        key = (combo.model, combo.scale, n, e)
        if (n is None and e is None) or key in seen:
            continue
        seen.add(key)
        if combo.model == MICRO:
            flag = f"--layers {n}" if n is not None else f"--experts {e}"
            raise UserError(f"{flag}: {MICRO} is a single attention call, not a stack of layers")
        try:
            spec_of(combo).depth_config(combo.scale, layers=n, experts=e)
        except UserError:
            raise
        except Exception:  # noqa: BLE001 - a config that does not build fails its combination, recorded
            continue



def model_choices() -> list[str]:
    """The preset names (any transformers model type, config.json path or Hub id also resolves)."""
    return list(preset_names())


def spec_of(combo: Any) -> ModelSpec:
    """The spec a combination measures: a Hub model from the source resolved when the suite
    was validated (carried by the combination, so no Hub access here), else by name."""
    source = getattr(combo, "source", None)
    if source:
        return ModelSpec.from_hub(combo.model, source)
    return resolve(combo.model)


def resolve(name: str, *, trust_remote_code: bool = False) -> ModelSpec:
    """A preset, ``attention-micro``, a transformers model type, a path to a config.json,
    or a Hugging Face Hub id (``org/name[@revision]``, its config fetched alone)."""
    if name == MICRO:
        return ModelSpec(name=name, model_type=MICRO, source="micro")
    if name in PRESETS:
        model_type, overrides = PRESETS[name]
        return ModelSpec(name=name, model_type=model_type, source="preset", overrides=dict(overrides))
    from reportgen import catalog

    if catalog.is_catalog_name(name):  # a catalog model: its published config.json values
        found = catalog.entry(name)
        return ModelSpec(name=name, model_type=found.model_type, source="catalog", overrides=found.overrides())
    from transformers import CONFIG_MAPPING

    if name in CONFIG_MAPPING:  # before paths: a folder named like a type must not shadow it
        return ModelSpec(name=name, model_type=name, source="model_type")
    path = Path(name)
    if name.endswith(".json") or path.is_dir():
        file = path / "config.json" if path.is_dir() else path
        if not file.is_file():
            raise UserError(f"model config file not found: {file}")
        try:
            data = json.loads(file.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise UserError(f"cannot read model config {file}: {exc}") from exc
        file_type: Any = data.get("model_type") if isinstance(data, dict) else None
        if file_type not in CONFIG_MAPPING:
            raise UserError(f"{file}: model_type {file_type!r} is not a transformers model type")
        data = {k: v for k, v in data.items() if k != "model_type"}
        return ModelSpec(name=name, model_type=file_type, source="config_file", overrides=data)
    from reportgen import hub

    if hub.is_hub_id(name):
        return ModelSpec.from_hub(name, hub.resolve(name, trust_remote_code=trust_remote_code))
    raise UserError(
        f"unknown model {name!r}; choose a preset ({', '.join(model_choices())}), {MICRO}, "
        "a transformers model type (e.g. bert, llama, opt, bart), a path to a config.json "
        "or a Hugging Face Hub id (org/name[@revision])"
    )
