"""The profiled pass end to end on tiny models (CPU): trace written, categories match the op table."""

from __future__ import annotations

import contextlib
import gzip
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import torch
from support.tiny_models import TINY, build, toy
from torch import nn

from reportgen.attribution import classify_ops
from reportgen.categories import CATEGORIES
from reportgen.profile.profiling import profile_step, write_gzip_atomic
from reportgen.profile.structure import ModuleRole, classify, derive, label

ATTRIBUTED = ("attention.qkv", "attention.core", "attention.out", "mlp", "norm")


def _profile(name: str, tmp_path: Path, attn: str | None = None) -> tuple[dict, Path]:
    model, step = build(name, attn)
    trace_path = tmp_path / "traces" / f"{name}.trace.json.gz"
    result = profile_step(step, model, iterations=2, warmup=1, trace_path=trace_path,
                          labels=classify(model))
    assert step.calls == 3 and step.resets == 3
    return result, trace_path


def _check_categories_against_ops(result: dict[str, Any]) -> None:
    """Shares are checked against the op table, not against their own sum (the overhead
    remainder makes that 1 by construction): each category's time is the time of its rows
    in the table, and what is left for overhead is neither negative nor the whole forward."""
    att = result["attribution"]
    forward = att["forward_ms"]
    from_ops = {c: 0.0 for c in CATEGORIES}
    for op in result["ops"]:
        from_ops[op["category"]] += op["total_ms"]
    cats = att["categories"]
    for cat in CATEGORIES:
        if cat != "overhead":
            assert cats[cat]["ms"] == pytest.approx(from_ops[cat], rel=1e-9, abs=1e-12), cat
        assert cats[cat]["share"] == pytest.approx(cats[cat]["ms"] / forward, rel=1e-9), cat
    assert from_ops["overhead"] == 0.0
    assert 0.0 <= cats["overhead"]["ms"] < forward


@pytest.mark.parametrize("name", sorted(TINY))
def test_profile_tiny_model(name: str, tmp_path: Path) -> None:
    result, trace_path = _profile(name, tmp_path)
    assert set(result) == {"profile", "attribution", "ops", "memory", "per_iteration"}
    prof = result["profile"]
    assert prof["iterations"] == 2 and len(prof["per_iteration_ms"]) == 2
    # each iteration attributed alone, with its own wall time
    assert [ms for ms, _ in result["per_iteration"]] == pytest.approx(prof["per_iteration_ms"])
    assert all(ms > 0 for ms in prof["per_iteration_ms"])
    assert prof["median_ms"] == pytest.approx(sum(prof["per_iteration_ms"]) / 2)
    assert prof["trace"] == f"traces/{trace_path.name}"
    assert prof["trace_bytes"] == trace_path.stat().st_size
    assert [p.name for p in trace_path.parent.iterdir()] == [trace_path.name]  # no temp files
    # the trace names its place in the run, not the temporary file it was exported to
    import gzip
    import json

    assert json.loads(gzip.decompress(trace_path.read_bytes()))["traceName"] == prof["trace"]

    att = result["attribution"]
    assert att["basis"] == "cpu"
    assert list(att["categories"]) == list(CATEGORIES)
    _check_categories_against_ops(result)
    for cat in ATTRIBUTED:
        assert att["categories"][cat]["ms"] > 0, cat
    assert att["forward_ms"] == pytest.approx(sum(prof["per_iteration_ms"]) / 2)
    blocks = [f for f, i in classify(build(name)[0]).items() if i.role == "block"]
    assert [row["layer"] for row in att["per_layer"]] == blocks
    for row in att["per_layer"]:
        for cat in ("attention.qkv", "attention.core", "attention.out", "mlp"):
            assert row["categories"][cat] > 0, (row["layer"], cat)

    assert result["ops"] and {o["category"] for o in result["ops"]} <= set(CATEGORIES)
    assert set(result["memory"]["by_category_bytes"]) == set(CATEGORIES)
    assert result["memory"]["peak_allocated_bytes"] > 0

    # The gzipped trace is the one analysed: it holds both iterations' ranges.
    trace = json.loads(gzip.decompress(trace_path.read_bytes()))
    names = [e.get("name") for e in trace["traceEvents"]]
    assert names.count("rg|iteration") == 2


@pytest.mark.parametrize("name", ["bert", "gpt2", "t5", "llama", "opt", "bart", "falcon"])
def test_module_categories_agree_with_ops(name: str, tmp_path: Path) -> None:
    _, trace_path = _profile(name, tmp_path)
    model, step = build(name)
    cats = derive(model, step).categories
    rows = classify_ops(json.loads(gzip.decompress(trace_path.read_bytes())))
    seen = {(r["fqn"], r["category"]) for r in rows if r["role"] == "proj"}
    assert seen
    for fqn, category in seen:
        assert cats[fqn] == category, fqn


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_eager_attention_core_ops(name: str, tmp_path: Path) -> None:
    result, trace_path = _profile(name, tmp_path, attn="eager")
    rows = classify_ops(json.loads(gzip.decompress(trace_path.read_bytes())))
    core = {r["name"] for r in rows if r["category"] == "attention.core"}
    assert {"aten::matmul", "aten::softmax"} <= core
    assert "aten::scaled_dot_product_attention" not in core
    _check_categories_against_ops(result)


def test_bad_arguments(tmp_path: Path) -> None:
    model, step = build("bert")
    with pytest.raises(ValueError):
        profile_step(step, model, iterations=0, trace_path=tmp_path / "t.json.gz", labels=None)


def test_write_gzip_atomic(tmp_path: Path) -> None:
    path = tmp_path / "traces" / "x.trace.json.gz"
    size = write_gzip_atomic(path, b'{"traceEvents": []}')
    assert size == path.stat().st_size
    assert gzip.decompress(path.read_bytes()) == b'{"traceEvents": []}'
    # Same input, same bytes: reruns do not churn stored traces.
    first = path.read_bytes()
    write_gzip_atomic(path, b'{"traceEvents": []}')
    assert path.read_bytes() == first
    assert [p.name for p in path.parent.iterdir()] == ["x.trace.json.gz"]


def test_unknown_architecture_profiles(tmp_path: Path) -> None:
    model, step = toy()
    path = tmp_path / "traces" / "toy.trace.json.gz"
    result = profile_step(step, model, iterations=2, warmup=1, trace_path=path, labels=classify(model))
    rows = [r for r in classify_ops(json.loads(gzip.decompress(path.read_bytes())))
            if r["iteration"] == 0 and r["layer"] == "layers.0"]
    by_module = {(r["fqn"], r["name"]): r["category"] for r in rows}
    assert by_module[("layers.0.attn.q", "aten::linear")] == "attention.qkv"
    assert by_module[("layers.0.attn", "aten::softmax")] == "attention.core"
    assert by_module[("layers.0.attn.o1", "aten::linear")] == "attention.out"
    assert by_module[("layers.0.attn.o2", "aten::linear")] == "attention.out"
    assert by_module[("layers.0.attn", "aten::add")] == "other"
    assert by_module[("layers.0", "aten::add")] == "other"
    cats = derive(*toy()).categories
    for (fqn, _), category in by_module.items():
        if fqn.endswith((".q", ".o1", ".o2", ".ff")):
            assert cats[fqn] == category, fqn
    _check_categories_against_ops(result)


@contextlib.contextmanager
def _module_hook_ranges(model: nn.Module, roles: Mapping[str, ModuleRole]) -> Iterator[None]:
    """The reference labelling: a forward pre-hook and a forward hook per labelled module,
    opening and closing its ``rg|<role>|<fqn>`` range (what the profiled pass did first)."""
    modules = dict(model.named_modules())
    handles = []
    for fqn, info in roles.items():
        if info.role is None or fqn not in modules:
            continue
        stack: list[Any] = []

        def pre(_m: nn.Module, _a: Any, name: str = label(info.role, fqn), stack: list[Any] = stack) -> None:
            stack.append(torch.ops.profiler._record_function_enter_new(name, None))

        def post(_m: nn.Module, _a: Any, _o: Any, stack: list[Any] = stack) -> None:
            torch.ops.profiler._record_function_exit._RecordFunction(stack.pop())

        handles += [modules[fqn].register_forward_pre_hook(pre),
                    modules[fqn].register_forward_hook(post, always_call=True)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@pytest.mark.parametrize("name", ["bert", "gpt2", "llama"])
def test_ranges_attribute_every_op_as_module_hooks_do(name: str, tmp_path: Path) -> None:
    """The profiled pass's ranges, at the structure's labels, give every op the category
    and layer that ranges opened by module hooks at every module with a role give it."""
    model, step = build(name)
    structure = derive(model, step)

    def ops(path: Path, labels: Mapping[str, ModuleRole] | None) -> list[tuple[str, str, str | None]]:
        result = profile_step(step, model, iterations=2, warmup=1, trace_path=path, labels=labels)
        assert result["attribution"]["categories"]
        trace = json.loads(gzip.decompress(path.read_bytes()))
        return [(op["name"], op["category"], op["layer"]) for op in classify_ops(trace)]

    with _module_hook_ranges(model, structure.roles):
        reference = ops(tmp_path / "reference.trace.json.gz", None)
    got = ops(tmp_path / "wrapped.trace.json.gz", structure.labels)
    assert got == reference
    assert {c for _, c, _ in got} >= {*ATTRIBUTED, "embeddings", "other"}
    assert {layer for _, _, layer in got} > {None}


@pytest.mark.parametrize("name", ["bert", "llama"])
def test_structure_recorded_as_the_warm_up_forward(name: str, tmp_path: Path) -> None:
    """``first`` runs once, as the warm-up forward the profiler drops: the profiled
    iterations carry the labels it returns, as they do when the structure was recorded
    beforehand, and the trace holds the profiled iterations alone."""
    model, step = build(name)

    def ops(path: Path) -> list[tuple[str, str, str | None]]:
        trace = json.loads(gzip.decompress(path.read_bytes()))
        return [(op["name"], op["category"], op["layer"]) for op in classify_ops(trace)]

    before = derive(model, step)
    calls_before = step.calls
    reference = profile_step(step, model, iterations=2, warmup=1, trace_path=tmp_path / "a.json.gz",
                             labels=before.labels)
    assert step.calls - calls_before == 3
    seen: list[Any] = []

    def first() -> Mapping[str, ModuleRole]:
        seen.append(step.calls)
        structure = derive(model, step)  # a forward of its own, reset by derive
        return structure.labels

    calls_before = step.calls
    folded = profile_step(step, model, iterations=2, warmup=1, trace_path=tmp_path / "b.json.gz",
                          labels=None, first=first)
    assert seen == [calls_before] and step.calls - calls_before == 3
    assert len(folded["profile"]["per_iteration_ms"]) == 2
    assert ops(tmp_path / "b.json.gz") == ops(tmp_path / "a.json.gz")
    assert {c for c, v in folded["attribution"]["categories"].items() if v["ms"] > 0} == \
        {c for c, v in reference["attribution"]["categories"].items() if v["ms"] > 0}
    with pytest.raises(ValueError, match="warmup"):
        profile_step(step, model, iterations=2, warmup=0, trace_path=tmp_path / "c.json.gz", labels=None,
                     first=first)
