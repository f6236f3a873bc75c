"""The module-boundary attribution method, share intervals and the ablation rule."""

from __future__ import annotations

import dataclasses
import random
import statistics
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
from support.clocks import DispatchOpClock
from support.tiny_models import TINY, build
from torch import nn

from reportgen import shares, stats
from reportgen.bench import ablation
from reportgen.categories import CATEGORIES
from reportgen.profile import regions
from reportgen.profile.profiling import profile_step
from reportgen.profile.structure import derive


class FakeClock:
    """A host clock that advances only when the model says so: exact expected times."""

    method = "host-clock"

    def __init__(self) -> None:
        self.t = 0.0

    def begin(self) -> None:
        return None

    def mark(self) -> float:
        return self.t

    def finish(self, step: Any) -> float:
        return self.t

    def resolve(self, marks: Any) -> list[float]:
        return [m - marks[0] for m in marks]


CLOCK = FakeClock()
# ms each part of the toy model takes
EMBED, Q, K, V, CORE, OUT, RESID, NORM, UP, ACT, DOWN, MASK, HARNESS = (
    1.0, 2.0, 3.0, 4.0, 7.0, 5.0, 0.5, 0.25, 6.0, 0.75, 8.0, 1.5, 0.125)


class Proj(nn.Linear):
    def __init__(self, cost: float) -> None:
        super().__init__(4, 4)
        self.cost = cost

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        CLOCK.t += self.cost
        return x


class ToyEmbedding(nn.Embedding):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        CLOCK.t += EMBED
        return torch.ones(x.shape[0], 4)


class ToyNorm(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        CLOCK.t += NORM
        return x


class ToyActivation(nn.GELU):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        CLOCK.t += ACT
        return x


class ToyAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = Proj(Q), Proj(K), Proj(V), Proj(OUT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.q(x), self.k(x), self.v(x)
        CLOCK.t += CORE
        h = torch.softmax(q + k, dim=-1) * v  # a core op: the projections around it settle
        out = self.o(h)
        CLOCK.t += RESID  # after the output projection: other
        return out + x


class ToyMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up, self.act, self.down = Proj(UP), ToyActivation(), Proj(DOWN)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.up(x)))


class ToyBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attention, self.norm, self.mlp = ToyAttention(), ToyNorm(), ToyMLP()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.norm(self.attention(x)))


class ToyModel(nn.Module):
    def __init__(self, layers: int = 2) -> None:
        super().__init__()
        self.embed = ToyEmbedding(10, 4)
        self.layers = nn.ModuleList(ToyBlock() for _ in range(layers))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        CLOCK.t += MASK  # the model's own work outside its modules: other
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        return x


class ToyStep:
    device = torch.device("cpu")
    inputs_info: ClassVar[dict[str, Any]] = {}

    def __init__(self, model: nn.Module) -> None:
        self.model = model

    def __call__(self) -> Any:
        CLOCK.t += HARNESS
        return self.model(torch.tensor([1, 2]))

    def reset(self) -> None:
        return None

    def sync(self) -> None:
        return None


def test_hooks_method_on_a_model_with_known_times() -> None:
    model = ToyModel(layers=2)
    step = ToyStep(model)
    section = regions.hooks_method(model, step, derive(model, step), min_iterations=4, max_iterations=4,
                                   clock=CLOCK)
    ms = {c: v["ms"] for c, v in section["categories"].items()}
    expected = {"embeddings": EMBED, "attention.qkv": 2 * (Q + K + V),
                "attention.core": 2 * CORE, "attention.out": 2 * OUT, "mlp": 2 * (UP + ACT + DOWN),
                "norm": 2 * NORM, "compiled": 0.0, "head": 0.0, "other": MASK + 2 * RESID,
                "overhead": HARNESS, "attention.indexer": 0.0, "mixer": 0.0, "moe.router": 0.0,
                "moe.experts": 0.0, "moe.shared": 0.0, "residual": 0.0,
                "optimizer": 0.0}
    for c in CATEGORIES:
        assert ms[c] == pytest.approx(expected[c]), c
    # attention.core is the attention call less its projections
    call = Q + K + V + CORE + OUT + RESID
    assert ms["attention.core"] == pytest.approx(2 * call - ms["attention.qkv"]
                                                 - ms["attention.out"] - 2 * RESID)
    assert section["forward_ms"] == pytest.approx(sum(expected.values()))
    assert section["iterations"] == 4 and section["clock"] == "host-clock"
    # model, embedding, and per block: itself, attention, 4 projections, norm, MLP and its
    # last projection (the projection and activation before it are the MLP's time either way)
    assert section["calls_per_forward"] == 1 + 1 + 2 * 9
    # a constant share has a zero-width interval
    core = section["categories"]["attention.core"]
    assert core["share_low"] == pytest.approx(core["share"]) == pytest.approx(core["share_high"])
    assert section["other_sources_ms"] == pytest.approx(
        {shares.SOURCES["model"]: MASK, shares.SOURCES["attn"]: 2 * RESID,
         shares.SOURCES["iteration"]: HARNESS})
    # each layer's own time by category, in the order the layers ran: the forward less
    # what lies outside the layers (the embedding, the model's own work, the harness)
    layer = {"attention.qkv": Q + K + V, "attention.core": CORE, "attention.out": OUT, "other": RESID,
             "norm": NORM, "mlp": UP + ACT + DOWN}
    assert [row["layer"] for row in section["per_layer"]] == ["layers.0", "layers.1"]
    for row in section["per_layer"]:
        assert row["categories"] == pytest.approx(layer)
    assert sum(sum(row["categories"].values()) for row in section["per_layer"]) == pytest.approx(
        section["forward_ms"] - EMBED - MASK - HARNESS)


def test_layers_split_calls_by_the_block_around_them() -> None:
    calls = [shares.Call("iteration", 0.0, 10.0, None), shares.Call("model", 0.5, 9.5, 0),
             shares.Call("block", 1.0, 4.0, 1, fqn="b.0"), shares.Call("mixer", 1.5, 3.5, 2, fqn="b.0.m"),
             shares.Call("block", 5.0, 9.0, 1, fqn="b.1"), shares.Call("mixer", 5.0, 8.0, 4, fqn="b.1.m")]
    assert shares.categorise_layers(calls) == {
        "b.0": {**dict.fromkeys(CATEGORIES, 0.0), "mixer": 2.0, "other": 1.0},
        "b.1": {**dict.fromkeys(CATEGORIES, 0.0), "mixer": 3.0, "other": 1.0}}
    # every instant inside a layer lies in that layer's categories once
    whole = shares.categorise(calls)
    assert whole["mixer"] == pytest.approx(5.0)
    assert regions.layer_means([{"b.0": {"mixer": 2.0, "other": 0.0}}, {"b.0": {"mixer": 4.0, "other": 1.0}}]) == [
        {"layer": "b.0", "categories": {"mixer": 3.0, "other": 0.5}}]


def test_hooks_method_with_event_pairs() -> None:
    """The CUDA path: events from a factory, recorded at boundaries, read after a sync."""
    synced: list[int] = []

    class Event:
        def __init__(self, enable_timing: bool) -> None:
            assert enable_timing
            self.at = 0.0

        def record(self) -> None:
            self.at = CLOCK.t

        def elapsed_time(self, other: Event) -> float:
            assert synced, "read before a synchronise"
            return other.at - self.at

    clock = regions._EventClock(Event, lambda: synced.append(1))
    model = ToyModel(layers=1)
    step = ToyStep(model)
    section = regions.hooks_method(model, step, derive(model, step), min_iterations=2, max_iterations=2,
                                   clock=clock)
    assert section["basis"] == "device" and section["clock"] == "cuda-events"
    assert section["categories"]["attention.core"]["ms"] == pytest.approx(CORE)
    assert len(clock.pool) == clock.used  # pooled: no event created twice in an iteration


@pytest.fixture(scope="module")
def tiny_bert() -> Any:
    from reportgen.profile import building
    from reportgen.suite import Combination

    combo = Combination(model="bert-base", scale="tiny", mode="forward", dtype="fp32",
                        attn_implementation="sdpa", batch_size=1, seq_len=32, device="cpu")
    built = building.build(combo, "cpu")
    yield built
    building.free(built)


def test_hooks_categories_sum_to_the_forward(tiny_bert: Any) -> None:
    section = regions.hooks_method(tiny_bert.model, tiny_bert.step, derive(tiny_bert.model, tiny_bert.step),
                                   min_iterations=5,
                                   max_iterations=5)
    cats = section["categories"]
    for i, wall in enumerate(section["iteration_ms"]):
        parts = [cats[c]["per_iteration_ms"][i] for c in CATEGORIES]
        assert all(p >= 0 for p in parts)
        assert sum(parts) == pytest.approx(wall, rel=1e-9)
    assert sum(c["share"] for c in cats.values()) == pytest.approx(1.0)
    for c in ("embeddings", "attention.qkv", "attention.core", "attention.out", "mlp", "norm"):
        assert cats[c]["ms"] > 0, c
    # the hooks' cost: hooked and bare forwards in pairs, a ratio inside its interval (how
    # large it is here is the bench's instrumentation figure, not a test's)
    cost = section["cost"]
    assert cost["pairs"] >= 5 and cost["ratio"] > 0
    assert cost["ratio_low"] <= cost["ratio"] <= cost["ratio_high"]


def test_hooks_cost_against_the_timing_samples_runs_no_bare_forward(tiny_bert: Any) -> None:
    """Given the timing pass's samples, the hooks pass runs hooked forwards only and
    weighs them against those samples (each side resampled alone)."""
    calls: list[int] = []
    step = tiny_bert.step
    original = type(step).__call__

    class Counting(type(step)):  # type: ignore[misc]
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            calls.append(1)
            return original(self, *args, **kwargs)

    step.__class__ = Counting
    try:
        section = regions.hooks_method(tiny_bert.model, step, derive(tiny_bert.model, step),
                                       min_iterations=4, max_iterations=4, bare_ms=[1.0, 1.2, 0.9])
    finally:
        step.__class__ = Counting.__mro__[1]
    cost = section["cost"]
    assert section["iterations"] == 4 and len(calls) == 4 + 1  # four hooked, the structure's own forward
    assert (cost["bare_reference"], cost["bare"], cost["hooked"], cost["pairs"]) == ("timing samples", 3, 4, 0)
    assert cost["bare_ms"] == pytest.approx(1.0)
    assert cost["ratio"] == pytest.approx(cost["hooked_ms"] / 1.0)
    assert cost["ratio_low"] <= cost["ratio"] <= cost["ratio_high"]


def test_profiler_per_iteration_matches_the_whole(tiny_bert: Any, tmp_path: Path) -> None:
    structure = derive(tiny_bert.model, tiny_bert.step)
    profiled = profile_step(tiny_bert.step, tiny_bert.model, iterations=3,
                            trace_path=tmp_path / "t.trace.json.gz", labels=structure.roles)
    rows = profiled["per_iteration"]
    assert [ms for ms, _ in rows] == pytest.approx(profiled["profile"]["per_iteration_ms"])
    section = regions.profiler_method(rows, "cpu")
    whole = profiled["attribution"]["categories"]
    for c in CATEGORIES:
        assert section["categories"][c]["ms"] == pytest.approx(whole[c]["ms"], abs=1e-9), c
        assert section["categories"][c]["share"] == pytest.approx(whole[c]["share"], abs=1e-9)

    hooks = regions.hooks_method(tiny_bert.model, tiny_bert.step, structure, min_iterations=3,
                                 max_iterations=3)
    methods = {"profiler": section, "hooks": hooks}
    on_cpu = regions.attribution_section(profiled["attribution"], methods, "cpu")
    assert on_cpu["headline_method"] == "hooks"
    assert on_cpu["headline_reason"] == shares.HEADLINE_REASON["hooks"]
    assert on_cpu["categories"]["mlp"]["share"] == hooks["categories"]["mlp"]["share"]
    assert on_cpu["forward_ms"] == hooks["forward_ms"]
    assert on_cpu["basis"] == "cpu" and on_cpu["methods"]["profiler"] is section
    on_gpu = regions.attribution_section(profiled["attribution"], methods, "cuda")
    assert on_gpu["headline_method"] == "profiler"
    assert on_gpu["categories"]["mlp"]["share"] == whole["mlp"]["share"]
    rows_ = shares.disagreement(on_cpu)
    mlp = next(r for r in rows_ if r["category"] == "mlp")
    assert mlp["difference"] == pytest.approx(mlp["hooks"] - mlp["profiler"])


# ---------------------------------------------------------------- share intervals


def test_share_interval_comes_from_the_iterations() -> None:
    walls = [10.0, 10.0, 10.0, 10.0, 10.0, 10.0]
    steady = [2.0] * 6
    assert shares.share_interval(steady, walls) == pytest.approx((0.2, 0.2, 0.2))
    varied = [1.0, 3.0, 1.0, 3.0, 1.0, 3.0]
    point, low, high = shares.share_interval(varied, walls)
    assert point == pytest.approx(0.2)
    assert 0.1 <= low < 0.2 < high <= 0.3
    # the share is the ratio of sums, not a mean of per-iteration ratios
    point, _, _ = shares.share_interval([1.0, 9.0], [2.0, 18.0])
    assert point == pytest.approx(0.5)
    point, _, _ = shares.share_interval([1.0, 1.0], [2.0, 8.0])
    assert point == pytest.approx(0.2)
    with pytest.raises(ValueError):
        shares.share_interval([1.0], [2.0, 3.0])


def test_method_section_and_combined_share() -> None:
    per_it = [{"attention.core": 2.0, "attention.qkv": 1.0, "mlp": 7.0},
              {"attention.core": 4.0, "attention.qkv": 1.0, "mlp": 5.0}]
    section = shares.method_section(per_it, [10.0, 10.0], clock="x")
    core = section["categories"]["attention.core"]
    assert core["per_iteration_ms"] == [2.0, 4.0] and core["ms"] == 3.0
    assert core["share"] == pytest.approx(0.3)
    assert core["share_low"] == pytest.approx(0.2) and core["share_high"] == pytest.approx(0.4)
    both = shares.combined_share(section, ["attention.core", "attention.qkv"])
    assert both is not None and both[0] == pytest.approx(0.4)
    assert shares.combined_share({"categories": {}}, ["mlp"]) is None


# ---------------------------------------------------------------- the ablation rule


@pytest.mark.parametrize(("share", "rel", "low", "high", "expected"), [
    (0.20, 0.02, -0.05, 0.08, "pass"),
    (0.20, -0.10, -0.10, 0.10, "pass"),
    (0.20, 0.02, -0.05, 0.15, "fail"),     # the interval reaches past the bound
    (0.20, -0.30, -0.40, -0.20, "fail"),
    (0.049, -0.90, -0.99, -0.80, "below resolution"),
    (0.05, 0.0, -0.01, 0.01, "pass"),
    (0.20, float("nan"), 0.0, 0.0, "fail"),
])
def test_ablation_verdict(share: float, rel: float, low: float, high: float,
                          expected: str) -> None:
    assert ablation.verdict(share, rel, low, high) == expected


def _hooked(n: int, core: float, left: float = 2.0, full: float = 100.0,
            stubbed: float = 82.0) -> list[tuple[float, float, float, float]]:
    return [(full, core, stubbed, left)] * n


def test_ablation_agreement_on_constructed_figures() -> None:
    # forward 100 ms, core attributed 20 ms, of which 2 ms the stand-in cannot remove; the
    # stubbed forward is 82 ms: the drop (18) equals what the stand-in can remove
    full_ms = [100.0, 100.5, 99.5, 100.0]
    ablated_ms = [82.0, 82.41, 81.59, 82.0]
    rounds = [ablation.Round(full_ms, ablated_ms, _hooked(3, 20.0)) for _ in range(3)]
    profiler = (([20.0] * 3, [100.0] * 3), ([2.0] * 3, [82.0] * 3))
    methods = ablation.agreement(rounds, profiler)
    for name in ("hooks", "profiler"):
        row = methods[name]
        assert row["removable_ms"] == pytest.approx(18.0)
        assert row["rel_diff"] == pytest.approx(0.0, abs=1e-9)
        assert row["rel_low"] <= 0.0 <= row["rel_high"]
        assert row["verdict"] == "pass"
    assert methods["hooks"]["round_rel_diffs"] == pytest.approx([0.0] * 3, abs=1e-9)
    # the attributed core is twice what the stub removes
    doubled = [ablation.Round(full_ms, ablated_ms, _hooked(3, 38.0)) for _ in range(3)]
    row = ablation.agreement(doubled)["hooks"]
    assert row["rel_diff"] == pytest.approx(18.0 / 36.0 - 1.0)
    assert row["verdict"] == "fail"
    assert "profiler" not in ablation.agreement(doubled)
    tiny = [ablation.Round(full_ms, ablated_ms, _hooked(3, 3.0, left=0.0)) for _ in range(3)]
    assert ablation.agreement(tiny)["hooks"]["verdict"] == "below resolution"
    assert row["drop_ms"] == pytest.approx(18.0, rel=1e-3)
    assert ablation.figure_status(["pass", "below resolution"]) == "pass"
    assert ablation.figure_status(["pass", "fail"]) == "fail"
    assert ablation.figure_status(["below resolution"]) == "not measured"
    with pytest.raises(ValueError, match="no round"):
        ablation.agreement([ablation.Round(full_ms, ablated_ms, [])])


def test_ablation_interval_spans_the_rounds() -> None:
    # each round agrees tightly with itself, but the rounds disagree with each other (the
    # drop is 14% of the forward in some processes, 22% in others): an interval from the
    # pairs alone would call the pooled estimate precise; drawn over rounds it must not
    rng = random.Random(0)

    def round_(drop: float) -> ablation.Round:
        full = [100.0 * (1 + rng.uniform(-0.01, 0.01)) for _ in range(20)]
        return ablation.Round(full, [f * (1 - drop) for f in full], _hooked(5, 20.0))

    agree = ablation.agreement([round_(0.18) for _ in range(5)])["hooks"]
    spread = ablation.agreement([round_(d) for d in (0.14, 0.22, 0.15, 0.21, 0.18)])["hooks"]
    assert agree["verdict"] == "pass" and agree["rel_high"] - agree["rel_low"] < 0.01
    assert spread["rel_diff"] == pytest.approx(0.0, abs=0.06)
    assert spread["rel_high"] - spread["rel_low"] > 0.2
    assert spread["verdict"] == "fail"
    assert spread["round_rel_diffs"] == pytest.approx([d / 0.18 - 1 for d in (0.14, 0.22, 0.15, 0.21, 0.18)],
                                                      abs=1e-9)


def test_pages_read_both_methods() -> None:
    import pandas as pd

    from reportgen.render import analysis

    prof = shares.method_section([{"attention.core": 2.0, "other": 1.0, "mlp": 7.0}] * 3,
                                 [10.0] * 3, clock="torch.profiler", basis="cpu")
    hooks = shares.method_section([{"attention.core": 3.0, "other": 0.5, "mlp": 6.5}] * 4,
                                  [10.0] * 4, clock="host-clock", basis="cpu",
                                  other_sources_ms={shares.SOURCES["model"]: 0.5},
                                  cost={"ratio": 1.01, "ratio_low": 1.0, "ratio_high": 1.02,
                                        "pairs": 4})
    record = {"attribution": {"methods": {"profiler": prof, "hooks": hooks},
                              "headline_method": "hooks",
                              "headline_reason": shares.HEADLINE_REASON["hooks"]}}
    view = analysis.attribution_methods(record)
    assert view is not None and view["headline"] == "hooks"
    core = next(r for r in view["rows"] if r["category"] == "attention.core")
    assert core["profiler"] == pytest.approx(0.2) and core["hooks"] == pytest.approx(0.3)
    assert core["difference"] == pytest.approx(0.1)
    assert view["other_overhead"] == pytest.approx(0.05)
    assert view["sources"][0]["share"] == pytest.approx(0.05)
    assert analysis.attribution_methods({"attribution": {"categories": {}}}) is None
    rows = pd.DataFrame([{"hardware": "h", "combo_id": "a", "status": "ok",
                          "headline_method": "hooks"},
                         {"hardware": "h", "combo_id": "b", "status": "ok",
                          "headline_method": "profiler"}])
    found = analysis.headline_methods(rows, {("h", "a"): record, ("h", "b"): {}})
    assert [(m["method"], m["count"]) for m in found] == [("hooks", 1), ("profiler", 1)]
    assert found[1]["reason"] == analysis.LEGACY_REASON


def test_claim_share_intervals_come_from_iterations() -> None:
    from reportgen.claims.metrics import _share_interval

    hooks = shares.method_section(
        [{"attention.core": c, "attention.qkv": 1.0, "mlp": 9.0 - c} for c in (2.0, 4.0, 3.0)],
        [10.0] * 3, clock="host-clock", basis="cpu")
    record = {"attribution": {"methods": {"hooks": hooks}, "headline_method": "hooks"},
              "timing": {"median": 10.0, "ci_low": 5.0, "ci_high": 20.0}}
    got = _share_interval(record, ["attention.core", "attention.qkv"], 0.4)
    assert got.value == pytest.approx(0.4)
    assert got.low == pytest.approx(0.3) and got.high == pytest.approx(0.5)
    assert "bootstrap" in got.interval
    # a record without methods keeps the latency-propagated interval
    legacy = _share_interval({"attribution": {}, "timing": record["timing"]}, ["mlp"], 0.5)
    assert legacy.interval == "latency 95% CI propagated"


def test_other_overhead_figure_on_constructed_records() -> None:
    from reportgen.bench.attribution_check import other_overhead

    def record(combo_id: str, mode: str, other: list[float]) -> dict[str, Any]:
        section = shares.method_section(
            [{"other": o, "mlp": 10.0 - o} for o in other], [10.0] * len(other),
            other_sources_ms={shares.SOURCES["model"]: sum(other) / len(other)})
        return {"id": combo_id, "status": "ok", "combination": {"mode": mode},
                "attribution": {"categories": section["categories"], "headline_method": "hooks",
                                "methods": {"hooks": section}}}

    ok = other_overhead([record("a", "forward", [0.5, 0.7, 0.6]),
                         record("b", "decode", [3.0, 3.0])])
    assert ok["status"] == "pass" and ok["value"] == pytest.approx(0.06)
    assert ok["interval"][0] >= 0.05 and ok["interval"][1] <= 0.07
    assert any(shares.SOURCES["model"] in n for n in ok["notes"])  # decode's cause shown
    bad = other_overhead([record("a", "prefill", [1.5, 1.5])])
    assert bad["status"] == "fail" and bad["value"] == pytest.approx(0.15)
    assert other_overhead([record("b", "decode", [3.0])])["status"] == "not measured"


def test_ablation_names_the_cost_the_core_puts_on_its_neighbours() -> None:
    # the stand-in removes 18 ms the clocks call attention.core, and the rest of the
    # forward (78 ms outside the core with it) runs 3 ms faster without it: the drop is 21 ms
    full_ms = [100.0, 100.4, 99.6, 100.0]
    ablated_ms = [f * 0.79 for f in full_ms]
    hooked = [(100.0, 22.0, 79.0, 4.0)] * 4
    row = ablation.agreement([ablation.Round(full_ms, ablated_ms, hooked)] * 3)["hooks"]
    assert row["removable_ms"] == pytest.approx(18.0, rel=1e-3)
    assert row["neighbours_ms"] == pytest.approx(3.0, rel=1e-3)
    assert row["drop_ms"] == pytest.approx(21.0, rel=1e-3)
    assert row["unexplained_ms"] == pytest.approx(0.0, abs=1e-6)
    assert row["rel_diff"] == pytest.approx(21.0 / 18.0 - 1.0)
    # the same drop with the rest of the forward unchanged under the clocks: 3 ms unexplained
    still = [(100.0, 22.0, 82.0, 4.0)] * 4
    row = ablation.agreement([ablation.Round(full_ms, ablated_ms, still)] * 3)["hooks"]
    assert row["neighbours_ms"] == pytest.approx(0.0, abs=1e-9)
    assert row["unexplained_ms"] == pytest.approx(3.0, rel=1e-3)


def test_ablation_pairs_cancel_the_hosts_drift() -> None:
    # the host's speed wanders by up to 40% from pair to pair; within a pair it holds, and
    # the stand-in removes 18% of every forward
    speed = [1.0, 1.4, 0.8, 1.25, 0.9, 1.3, 1.1, 0.85, 1.35, 1.0]
    full_ms = [100.0 * k for k in speed]
    ablated_ms = [82.0 * k for k in speed]
    hooked = [(100.0 * k, 20.0 * k, 82.0 * k, 2.0 * k) for k in speed[:4]]
    row = ablation.agreement([ablation.Round(full_ms, ablated_ms, hooked)] * 2)["hooks"]
    assert row["drop_fraction"] == pytest.approx(0.18)
    assert row["rel_diff"] == pytest.approx(0.0, abs=1e-12)
    assert row["verdict"] == "pass"
    # the same forwards, unpaired, would not agree: the medians alone differ by 24%
    assert 1.0 - statistics.median(ablated_ms) / statistics.median(full_ms[::-1]) == pytest.approx(0.18)
    shuffled = ablation.Round(full_ms, ablated_ms[1:] + ablated_ms[:1], hooked)
    assert ablation.agreement([shuffled] * 2)["hooks"]["verdict"] == "fail"
    with pytest.raises(ValueError, match="paired samples needed, got 10 full and 9 ablated"):
        ablation.relative_drops(full_ms, ablated_ms[:9])


def test_hodges_lehmann() -> None:
    assert stats.hodges_lehmann([1.0, 2.0, 3.0]) == 2.0
    # Walsh averages of (0, 0, 10): 0, 0, 5, 0, 5, 10 -> median 2.5; one outlier moves it less than the mean
    assert stats.hodges_lehmann([0.0, 0.0, 10.0]) == 2.5
    assert stats.hodges_lehmann([0.1, 0.2, 0.3, 0.4, 100.0]) == pytest.approx(0.3)




@pytest.mark.parametrize("name", sorted(TINY))
def test_hooks_method_labels_move_no_op_between_categories(name: str) -> None:
    """Clocked at the structure's labels, every op of a tiny model's forward lands in the
    category it lands in when every module with a role is clocked."""
    model, step = build(name)
    structure = derive(model, step)
    full = dataclasses.replace(structure, labels=structure.roles)
    counted = {}
    for key, labelled in (("all roles", full), ("labels", structure)):
        clock = DispatchOpClock()
        with clock:
            ops, cats = regions.hooked_forward(model, step, clock, labelled)
        counted[key] = cats
        assert sum(cats.values()) == ops > 0
    assert counted["labels"] == counted["all roles"]
    assert all(counted["labels"][c] > 0 for c in ("attention.qkv", "attention.core", "attention.out",
                                                  "mlp", "norm", "embeddings"))
    if name in ("llama", "gpt2", "t5"):  # each has an MLP projection or activation unlabelled
        assert structure.labels != structure.roles
