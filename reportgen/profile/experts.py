"""A mixture of experts' routed-expert count, read and reduced through transformers'
names for it (``--experts N`` and the pre-flight's expert reduction).

A model too big for its device even at the fewest layers that keep every kind (a
DeepSeek-V3 MoE layer holds 256 routed experts of 7168 x 2048 x 3: about 45 GB in fp32)
is built with fewer routed experts per layer. Everything a token's work depends on is
kept: the experts each token is routed to (top-k), the router's input width, each
expert's size and the shared experts; so the routed work per token is the same and
only the router's own matmul (one score per expert) shrinks with the count. Group-limited
routing (experts in groups, the top groups first) keeps its groups where the reduced
count still divides into them with each group able to rank two experts and the top
groups holding top-k experts; else it routes over one group of all of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reportgen.errors import UserError
from reportgen.profile.layers import get, has, is_int, set_

# transformers' names for the routed experts per layer and the experts per token
EXPERT_NAMES = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
TOP_K_NAMES = ("num_experts_per_tok", "num_experts_per_token", "experts_per_token", "moe_topk",
               "top_k_experts", "moe_k")
# group-limited routing: the groups, and how many of them a token's experts come from
GROUP_NAMES = ("n_group", "num_expert_group")
TOP_GROUP_NAMES = ("topk_group",)
# the parts of a composite config that may hold a language model's experts
_PARTS = ("text_config",)
# a group ranks its experts by the sum of its two best (DeepSeek-V3's noaux_tc)
_GROUP_RANKED = 2


@dataclass(frozen=True)
class Routing:
    """A config's routed experts per layer and experts per token."""

    experts: int
    top_k: int


def _parts(config: Any) -> list[Any]:
    if config is None:
        return []
    parts = [config] + [get(config, name) for name in _PARTS if has(config, name)]
    return [p for p in parts if p is not None]


def _first_int(parts: list[Any], names: tuple[str, ...]) -> int | None:
    for part in parts:
        for name in names:
            value = get(part, name) if has(part, name) else None
            if is_int(value) and value > 0:
                return int(value)
    return None


def routing(config: Any) -> Routing | None:
    """The routed experts per layer and experts per token of ``config`` (or its language
    model's part), or None for a model without routed experts. A config that names its
    experts but not top-k routes one per token (transformers' default where it has one)."""
    parts = _parts(config)
    experts = _first_int(parts, EXPERT_NAMES)
    if experts is None or experts < 2:
        return None
    return Routing(experts, _first_int(parts, TOP_K_NAMES) or 1)


def valid_range(route: Routing) -> str:
    return f"between {route.top_k} and {route.experts}"


def check(config: Any, n: Any, what: str) -> Routing:
    """``config``'s routing where ``--experts n`` can build it; else `UserError`, one line
    naming the problem and the valid range."""
    route = routing(config)
    if route is None:
        raise UserError(f"--experts {n}: {what} has no routed experts; --experts applies to "
                        "mixture-of-experts models")
    if not is_int(n) or n < 1:
        problem = "no experts to build"
    elif n < route.top_k:
        problem = f"{what} routes each token to {route.top_k} experts, so it needs at least {route.top_k}"
    elif n > route.experts:
        problem = f"{what} has {route.experts} routed experts per layer"
    else:
        return route
    raise UserError(f"--experts {n}: {problem}; choose {valid_range(route)}")


def reduce(config: Any, n: int) -> dict[str, Any]:
    """Set ``config``'s routed experts per layer to ``n`` (in place, every part that names
    them); group-limited routing kept where ``n`` still fits its groups, else one group.
    Returns what changed beyond the count (the groups), for the record."""
    route = routing(config)
    changed: dict[str, Any] = {}
    for part in _parts(config):
        for name in EXPERT_NAMES:
            if has(part, name) and is_int(get(part, name)):
                set_(part, name, n)
        groups = _first_int([part], GROUP_NAMES)
        top_groups = _first_int([part], TOP_GROUP_NAMES) or 1
        if groups is None or groups <= 1 or route is None:
            continue
        per_group = n // groups
        if n % groups == 0 and per_group >= _GROUP_RANKED and per_group * top_groups >= route.top_k:
            continue
        for name in GROUP_NAMES + TOP_GROUP_NAMES:
            if has(part, name) and is_int(get(part, name)):
                set_(part, name, 1)
        changed["groups"] = f"{groups} groups (top {top_groups}) -> 1"
    return changed


def candidates(route: Routing) -> list[int]:
    """The reduced counts the pre-flight tries, largest first: powers of two below the
    model's count down to top-k, twice top-k, and top-k itself."""
    counts = {route.top_k}
    if 2 * route.top_k < route.experts:
        counts.add(2 * route.top_k)
    power = 1
    while power < route.experts:
        if power >= route.top_k:
            counts.add(power)
        power *= 2
    return sorted((c for c in counts if c < route.experts), reverse=True)
