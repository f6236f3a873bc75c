"""A model's layers by kind, and configs that keep some of them.

Two layers are of one kind exactly when they cost the same: the same module classes and
parameter shapes, and the same per-layer type where the config declares one (the
attention window of ``layer_types``: sliding, chunked or full). Kinds are read from a
model built on the meta device (no memory, no weights), so a model of any size has them.

``--layers N`` measures N of a model's layers at its full width: `choose_layers` keeps
at least one layer of every kind and fills the rest in the model's proportions, spread
over its depth; `reduce_config` cuts the config to those layers (per-layer lists cut,
layer indices renumbered, the counts, periods and dense prefixes that place a kind of
layer rewritten for the new depth), and `check_reduced` builds the result on meta and
refuses it unless every kept layer is still of its kind. ``--scale tiny`` cuts its depth
through the same list cutting (`tiny_layers`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeGuard

from torch import nn

from reportgen.errors import UserError
from reportgen.profile.structure import LAYER_ROLES, classify

LAYER_NAMES = ("num_hidden_layers", "num_layers", "num_decoder_layers", "encoder_layers",
               "decoder_layers", "n_layer", "num_blocks")
TINY_LAYERS = 2
TINY_MAX_LAYERS = 4  # a hybrid keeps one layer of each kind, up to this many
# the leading dense layers of a model whose other layers are experts
_DENSE_PREFIX_NAMES = ("first_k_dense_replace", "first_k_dense")
_INDEX_SUFFIXES = ("_idxs", "_ids", "_indices")


# --- config access (transformers configs answer through attribute maps and properties) -----


def has(config: Any, name: str) -> bool:
    return name in getattr(config, "attribute_map", {}) or name in vars(config)


def get(config: Any, name: str) -> Any:
    """The attribute, or None where the config cannot answer for the whole model (a
    per-layer attribute read globally raises)."""
    try:
        return getattr(config, name, None)
    except Exception:  # noqa: BLE001 - transformers' per-layer attribute errors
        return None


def first(config: Any, names: tuple[str, ...]) -> Any:
    for name in names:
        if has(config, name):
            value = get(config, name)
            if value is not None:
                return value
    return None


def set_(config: Any, name: str, value: Any) -> None:
    if has(config, name):
        try:
            setattr(config, name, value)
        except Exception:  # noqa: BLE001 - a derived (read-only) attribute keeps its value
            pass


def is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def layer_count(config: Any) -> int | None:
    """The config's layer count (also where a property derives it from a per-layer list)."""
    count = first(config, LAYER_NAMES)
    if count is None:
        count = next((c for c in (get(config, name) for name in LAYER_NAMES) if c is not None), None)
    return count if is_int(count) else None


# --- kinds -------------------------------------------------------------------------------


def layer_stack(model: nn.Module) -> list[str]:
    """The FQNs of the model's main layers, in order: the items of the list of layers that
    the config counts (else the longest such list)."""
    stacks: dict[str, list[str]] = {}
    for fqn, role in classify(model).items():
        if role.role in LAYER_ROLES:
            stacks.setdefault(fqn.rpartition(".")[0], []).append(fqn)
    if not stacks:
        return []
    count = layer_count(_stack_config(getattr(model, "config", None), None))
    matching = [s for s in stacks.values() if len(s) == count]
    return matching[0] if matching else max(stacks.values(), key=len)


def _stack_config(config: Any, length: int | None) -> Any:
    """The config (or sub-config: a multimodal model's text model) whose layer count is
    ``length``, else the one the model's own config names."""
    if config is None:
        return None
    parts = [config] + [get(config, name) for name in getattr(config, "sub_configs", None) or {}]
    parts = [p for p in parts if p is not None and hasattr(p, "to_dict")]
    if length is not None:
        for part in parts:
            if layer_count(part) == length:
                return part
    text = get(config, "text_config")
    return text if text is not None and layer_count(config) is None else config


def per_layer_types(config: Any, count: int) -> list[tuple[str, ...]]:
    """Each layer's declared types: ``layer_types`` (also where a property derives it)
    and every other per-layer list of words the config holds (``attention_layers``,
    ``layers_block_type``)."""
    lists: list[list[Any]] = []
    declared = get(config, "layer_types")
    if isinstance(declared, (list, tuple)) and len(declared) == count:
        lists.append(list(declared))
    for name, value in vars(config).items():
        if (name != "layer_types" and "layer" in name and isinstance(value, (list, tuple, str))
                and len(value) == count and not all(is_int(v) for v in value)):
            lists.append(list(value))
    return [tuple(str(values[i]) for values in lists) for i in range(count)]


def _signature(layer: nn.Module) -> tuple[Any, ...]:
    return tuple((fqn, type(m).__name__, tuple((n, tuple(p.shape)) for n, p in m.named_parameters(recurse=False)))
                 for fqn, m in layer.named_modules())


def _mixer_name(module: nn.Module, types: tuple[str, ...]) -> str:
    cls = type(module).__name__
    own = {name for name, _ in module.named_parameters(recurse=False)}
    # a selective state space keeps its skip (D) beside the decay; gated-delta and
    # linear attention have the decay alone
    if "Mamba" in cls or any("mamba" in t for t in types) or {"A_log", "D"} <= own:
        return "mamba"
    if any(w in cls for w in ("Linear", "Delta", "Lightning")) or "linear_attention" in types:
        return "linear attention"
    if "Conv" in cls:
        return "short convolution"
    if "Rwkv" in cls or "TimeMix" in cls:
        return "time mixing"
    return "token mixer"


def _attention_name(module: nn.Module, types: tuple[str, ...]) -> str:
    words = " ".join(types)
    if "linear" in words:
        # a linear attention the structure, read without a forward, takes for attention
        # by its name (what it computes says mixer: `calls`)
        return "linear attention"
    latent = any("_a_proj" in name or "lora" in name for name, _ in module.named_children())
    name = "latent attention" if latent else "attention"
    if "sliding" in words or "local" in words:
        return f"sliding {name}"
    if "chunked" in words:
        return f"chunked {name}"
    return name


def _kind_name(model: nn.Module, layer_fqn: str, roles: dict[str, Any], types: tuple[str, ...]) -> str:
    """"attention + mlp": the layer's token mixers (softmax attention first), then its
    channel mixer, named from the structural roles of its modules."""
    modules = dict(model.named_modules())
    prefix = layer_fqn + "."
    attention: list[str] = []
    mixers: list[str] = []
    channel = ""
    for fqn, role in roles.items():
        if not fqn.startswith(prefix):
            continue
        if role.role == "attn":
            attention.append(_attention_name(modules[fqn], types))
        elif role.role == "mixer":
            mixers.append(_mixer_name(modules[fqn], types))
        elif role.role in ("moe", "experts") and role.container != "moe":
            channel = "moe"
        elif role.role == "mlp" and not channel:
            channel = "mlp"
    parts = list(dict.fromkeys(attention + mixers)) + ([channel] if channel else [])
    return " + ".join(parts) or "layer"


def layer_kinds(model: nn.Module) -> list[str]:
    """One kind per layer of the model's main layer stack, in order; layers of different
    cost whose names would coincide are told apart by a number ("attention + mlp (2)")."""
    stack = layer_stack(model)
    if not stack:
        return []
    config = _stack_config(getattr(model, "config", None), len(stack))
    types = per_layer_types(config, len(stack)) if config is not None else [()] * len(stack)
    roles = classify(model)
    modules = dict(model.named_modules())
    names: dict[tuple[Any, ...], str] = {}
    taken: Counter[str] = Counter()
    kinds: list[str] = []
    for i, fqn in enumerate(stack):
        key = (_signature(modules[fqn]), types[i])
        if key not in names:
            base = _kind_name(model, fqn, roles, types[i])
            taken[base] += 1
            names[key] = base if taken[base] == 1 else f"{base} ({taken[base]})"
        kinds.append(names[key])
    return kinds


def layer_keys(model: nn.Module) -> list[tuple[Any, ...]]:
    """What makes each layer's kind (its signature and declared types), for comparing a
    reduced model's layers with the full model's."""
    stack = layer_stack(model)
    config = _stack_config(getattr(model, "config", None), len(stack))
    types = per_layer_types(config, len(stack)) if config is not None else [()] * len(stack)
    modules = dict(model.named_modules())
    return [(_signature(modules[fqn]), types[i]) for i, fqn in enumerate(stack)]


def count_kinds(kinds: list[str]) -> dict[str, int]:
    """Layers per kind, in the order the kinds first appear."""
    return dict(Counter(kinds))


# --- choosing ----------------------------------------------------------------------------


def choose_layers(kinds: list[str], n: int, what: str = "the model") -> list[int]:
    """``n`` of the layers (indices, ascending): one of every kind, the rest shared out in
    the model's proportions (largest remainders), each kind's layers spread evenly over
    its occurrences from its first."""
    total = len(kinds)
    counts = count_kinds(kinds)
    needed = len(counts)
    if total == 0:
        raise UserError(f"--layers {n}: {what} has no list of layers to choose from")
    if not is_int(n) or n < needed or n > total:
        if is_int(n) and n > total:
            problem = f"{what} has {total} layers"
        elif is_int(n) and n > 0:
            problem = f"{what} has {needed} kinds of layer ({', '.join(counts)}), one of each is measured"
        else:
            problem = "no layers to measure"
        raise UserError(f"--layers {n}: {problem}; choose between {needed} and {total}")
    share = {kind: 1 for kind in counts}
    spare = n - needed
    if spare:
        quota = {kind: n * c / total for kind, c in counts.items()}
        extra = {kind: max(0, min(counts[kind], math.floor(quota[kind])) - 1) for kind in counts}
        while sum(extra.values()) > spare:  # (the floors of the quotas never exceed n)
            kind = max(extra, key=lambda k: extra[k])
            extra[kind] -= 1
        for kind in counts:
            share[kind] += extra[kind]
        order = sorted(counts, key=lambda k: (-(quota[k] - share[k]), list(counts).index(k)))
        while sum(share.values()) < n:
            for kind in order:
                if sum(share.values()) < n and share[kind] < counts[kind]:
                    share[kind] += 1
    chosen: list[int] = []
    for kind, want in share.items():
        places = [i for i, k in enumerate(kinds) if k == kind]
        chosen += [places[(j * len(places)) // want] for j in range(want)]
    return sorted(chosen)


# --- cutting a config ---------------------------------------------------------------------


def _index_list(value: Any) -> bool:
    """A list of layer indices (ascending, each once), not one value per layer: a list of
    0/1 flags as long as the model is deep (``no_rope_layers``) is cut, not renumbered."""
    return all(is_int(v) for v in value) and all(a < b for a, b in zip(value, value[1:]))


def cut_layers(config: Any, chosen: list[int], old_layers: int) -> None:
    """Keep layers ``chosen`` of ``old_layers``: every layer-count name set, per-layer lists
    cut to them, lists of layer indices renumbered (indices of dropped layers removed)."""
    for name in LAYER_NAMES:
        set_(config, name, len(chosen))
    for name, value in list(vars(config).items()):
        if not isinstance(value, (list, tuple, str)) or "layer" not in name and not name.endswith(
                _INDEX_SUFFIXES):
            continue
        if len(value) == old_layers and not _index_list(value):
            cut = [value[i] for i in chosen]
            setattr(config, name, "".join(cut) if isinstance(value, str) else type(value)(cut))
        elif value and all(is_int(v) and 0 <= v < old_layers for v in value):
            setattr(config, name, type(value)(chosen.index(v) for v in value if v in chosen))


def tiny_selection(config: Any, old_layers: int) -> list[int]:
    """Which of the reference model's layers the tiny one keeps: the first ones, plus the
    first layer of every kind a per-layer list names (a hybrid keeps its attention, state-
    space, dense and expert layers), at least TINY_LAYERS and at most TINY_MAX_LAYERS."""
    lists = [value for name, value in vars(config).items()
             if "layer" in name and isinstance(value, (list, tuple, str)) and len(value) == old_layers
             and not all(is_int(v) for v in value)]
    chosen: list[int] = []
    seen: list[set[Any]] = [set() for _ in lists]
    for i in range(old_layers):
        new = [str(values[i]) not in seen[k] for k, values in enumerate(lists)]
        if any(new) and len(chosen) < TINY_MAX_LAYERS:
            chosen.append(i)
        for k, values in enumerate(lists):
            seen[k].add(str(values[i]))
    for i in range(old_layers):
        if len(chosen) >= TINY_LAYERS:
            break
        if i not in chosen:
            chosen.append(i)
    return sorted(chosen)


def tiny_layers(config: Any, old_layers: Any) -> list[int]:
    """``--scale tiny``'s depth: the layers `tiny_selection` keeps, and layer periods and
    offsets that place a kind of layer (every n-th layer is attention) brought within the
    tiny depth. Returns the reference indices of the layers kept."""
    if not is_int(old_layers):
        for name in LAYER_NAMES:
            set_(config, name, TINY_LAYERS)
        return list(range(TINY_LAYERS))
    chosen = tiny_selection(config, old_layers)
    cut_layers(config, chosen, old_layers)
    for name, value in list(vars(config).items()):
        if "shared_layers" in name and is_int(value) and value >= len(chosen):
            setattr(config, name, 0)  # layers that reuse an earlier layer's cache: none kept
        elif name.endswith("_layer_period") and is_int(value) and value > len(chosen):
            setattr(config, name, len(chosen))
        elif name.endswith("_layer_offset") and is_int(value) and value >= len(chosen):
            setattr(config, name, len(chosen) - 1)
    return chosen


def _refit_period(pattern: list[bool], old: tuple[int, int]) -> tuple[int, int] | None:
    """A (period, offset) that places ``pattern``'s marked layers (layer j marked exactly
    when j % period == offset), the old one first."""
    n = len(pattern)
    candidates = [old] + [(p, o) for p in range(1, max(n, old[0]) + 1) for o in range(p)]
    for period, offset in candidates:
        if all((j % period == offset) == mark for j, mark in enumerate(pattern)):
            return period, offset
    return None


def reduce_config(config: Any, chosen: list[int]) -> None:
    """Cut ``config`` (in place) to layers ``chosen`` of its own, keeping each its kind:
    besides `cut_layers`, a dense prefix (``first_k_dense_replace``) counts the kept dense
    layers, an every-k-th-layer sparsity (``decoder_sparse_step``) becomes the list of
    kept dense layers, and periods and offsets (``attn_layer_period``) are refitted to
    place the kept layers of their kind."""
    old_layers = layer_count(config)
    if old_layers is None:
        raise UserError(f"--layers: the {config.model_type} config does not say how many layers it has")
    periods: dict[str, tuple[int, int]] = {}
    for name, value in vars(config).items():
        stem = name.removesuffix("_layer_period")
        offset = get(config, f"{stem}_layer_offset")
        if name.endswith("_layer_period") and is_int(value) and is_int(offset) and value > 0:
            periods[stem] = (value, offset)
    step = get(config, "decoder_sparse_step")
    dense_only = get(config, "mlp_only_layers")
    cut_layers(config, chosen, old_layers)
    for name in _DENSE_PREFIX_NAMES:
        value = get(config, name) if has(config, name) else None
        if is_int(value):
            set_(config, name, sum(1 for i in chosen if i < value))
    if is_int(step) and step > 1 and isinstance(dense_only, list):
        dense = set(dense_only) | {i for i in range(old_layers) if (i + 1) % step != 0}
        config.decoder_sparse_step = 1
        config.mlp_only_layers = [j for j, i in enumerate(chosen) if i in dense]
    for stem, (period, offset) in periods.items():
        pattern = [i % period == offset for i in chosen]
        fitted = _refit_period(pattern, (period, offset))
        if fitted is None:
            raise UserError(f"--layers {len(chosen)}: the {config.model_type} config places its "
                            f"{stem} layers by a period that cannot place layers {chosen}")
        setattr(config, f"{stem}_layer_period", fitted[0])
        setattr(config, f"{stem}_layer_offset", fitted[1])


def check_reduced(full_keys: list[tuple[Any, ...]], chosen: list[int], reduced_keys: list[tuple[Any, ...]],
                  kinds: list[str], model_type: str) -> None:
    """Refuse a reduced model whose layers are not the chosen layers' kinds, one for one."""
    if len(reduced_keys) != len(chosen):
        raise UserError(f"--layers {len(chosen)}: the reduced {model_type} model has "
                        f"{len(reduced_keys)} layers, not {len(chosen)}")
    for j, i in enumerate(chosen):
        if reduced_keys[j] != full_keys[i]:
            raise UserError(f"--layers {len(chosen)}: the {model_type} config cannot keep layer {i} "
                            f"({kinds[i]}) as it is when cut to layers {chosen}")


# --- the whole reduction -------------------------------------------------------------------


@dataclass(frozen=True)
class Depth:
    """Layers ``chosen`` (indices into the full model's) of a model whose layers are
    ``kinds``, one per layer."""

    chosen: tuple[int, ...]
    kinds: tuple[str, ...]

    @property
    def measured(self) -> dict[str, int]:
        return count_kinds([self.kinds[i] for i in self.chosen])

    @property
    def full(self) -> dict[str, int]:
        return count_kinds(list(self.kinds))


def reduce_depth(config: Any, n: int | None, build_meta: Callable[[Any], nn.Module],
                 what: str = "the model") -> Depth:
    """Cut ``config`` (in place) to ``n`` of its layers (None: all of them, every layer
    named by kind), chosen by kind, after checking on the meta device (``build_meta``
    builds a config's model there) that the cut model's layers are the chosen ones, kind
    for kind."""
    full = build_meta(config)
    kinds = layer_kinds(full)
    keys = layer_keys(full)
    del full
    chosen = choose_layers(kinds, len(kinds) if n is None else n, what)
    stack_config = _stack_config(config, len(kinds))
    reduce_config(stack_config, chosen)
    check_reduced(keys, chosen, layer_keys(build_meta(config)), kinds, str(config.model_type))
    return Depth(tuple(chosen), tuple(kinds))
