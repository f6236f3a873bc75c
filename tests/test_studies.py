"""Studies: the suite setting, the plumbing into a combination's record (a study that
fails is recorded, the combination kept), the instrumentation study on a tiny model, its
schema, and the Instrumentation trade-offs page rendered from records."""

from __future__ import annotations

import copy
import html
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jsonschema
import pytest

from reportgen import cli
from reportgen.errors import UserError
from reportgen.records.schema import COMBINATION_KIND, RUN_KIND, json_schema
from reportgen.suite import STUDY_BUDGET_FACTOR, Settings, load_suite, parse_overrides
from reportgen.vocabulary import STUDIES

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = json.loads((ROOT / "tests" / "data" / "schema" / "v1" / "combination-ok.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(json_schema(COMBINATION_KIND))

SUITE = """
name = "s"
[settings]
scale = "tiny"
device = "cpu"
{studies}
[[matrix]]
models = ["gpt2"]
seq_lens = [8]
"""


def _suite(tmp_path: Path, studies: str) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(SUITE.format(studies=studies))
    return path


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


# --- the setting ------------------------------------------------------------------------


def test_studies_setting_is_validated_recorded_and_hashed_only_when_set(tmp_path: Path) -> None:
    plain = load_suite(_suite(tmp_path, ""))
    empty = load_suite(_suite(tmp_path, "studies = []"))
    assert plain.settings.studies == () and plain.hash == empty.hash
    assert "studies" not in plain.spec()["settings"]

    both = load_suite(_suite(tmp_path, 'studies = ["tools", "instrumentation", "tools"]'))
    assert both.settings.studies == ("tools", "instrumentation")  # deduplicated, in order
    assert both.spec()["settings"]["studies"] == ["tools", "instrumentation"]
    assert both.hash != plain.hash
    assert both.settings.study_budget_s == STUDY_BUDGET_FACTOR * both.settings.budget_s
    assert set(STUDIES) == {"instrumentation", "tools"}

    # the flag replaces the suite's list, without renaming the suite
    flagged = load_suite(_suite(tmp_path, ""), parse_overrides({"studies": "instrumentation"}))
    assert flagged.settings.studies == ("instrumentation",) and flagged.name == "s"


@pytest.mark.parametrize(("line", "expected"), [
    ('studies = ["profiling"]', "settings.studies: unknown study 'profiling'; valid: instrumentation, tools"),
    ('studies = "instrumentation"', "settings.studies: expected a list of study names"),
    ("studies = [1]", "settings.studies: expected a string"),
])
def test_bad_studies_in_a_suite_exit_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     line: str, expected: str) -> None:
    path = _suite(tmp_path, line)
    out = tmp_path / "runs"
    assert cli.main(["profile", "--suite", str(path), "--out", str(out)]) == 2
    message = _one_line(capsys.readouterr().err)
    assert expected in message and str(path) in message
    assert not out.exists()


def test_bad_studies_flag_exits_2_naming_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["profile", "--suite", "tiny", "--studies", "instrumentation,nope", "--list"]) == 2
    assert "--studies: unknown study 'nope'; valid: instrumentation, tools" in _one_line(capsys.readouterr().err)
    with pytest.raises(UserError, match="--studies"):
        parse_overrides({"studies": "bogus"})


def test_tasks_carry_studies_only_when_asked(tmp_path: Path) -> None:
    from reportgen.execute import rounds
    from reportgen.execute.job import Job
    from reportgen.records.store import RunStore

    suite = load_suite(_suite(tmp_path, 'studies = ["instrumentation"]'))
    combo = suite.combinations()[0]
    store = RunStore(tmp_path, "cpu-x", suite)
    job = Job(store=store, todo=[combo], settings=suite.settings, git={})
    assert job.task(combo)["options"] == {"studies": ["instrumentation"],
                                          "study_budget_s": STUDY_BUDGET_FACTOR * suite.settings.budget_s}
    assert "options" not in Job(store=store, todo=[combo], settings=Settings(), git={}).task(combo)
    # measured in rounds: the studies travel with every round; measure runs them in the profiled one
    job.settings = Settings(rounds=2, studies=("instrumentation",))
    later = rounds.task(job, rounds.Unit(combo, 1, 2))
    assert later["options"]["studies"] == ["instrumentation"] and later["options"]["profiled"] is False
    assert later["options"]["round_of_several"] is True


# --- plumbing ---------------------------------------------------------------------------

STUDY_CALLS: list[str] = []


def _raising_study(built: Any, structure: Any, combo: Any, *, run_dir: Path, combo_id: str,
                   budget_s: float) -> dict[str, Any]:
    STUDY_CALLS.append(combo_id)
    built.step()  # leaves a decode cache one token longer: run_studies resets it
    raise RuntimeError("the instrument broke\nsecond line")


def _tiny(model: str = "gpt2", mode: str = "forward") -> SimpleNamespace:
    return SimpleNamespace(model=model, scale="tiny", mode=mode, dtype="fp32", attn_implementation="sdpa",
                           batch_size=1, seq_len=8, device="cpu")


def test_a_failing_study_is_recorded_and_the_combination_kept(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from reportgen.execute.record import combination_record
    from reportgen.profile import studies
    from reportgen.profile.measure import measure
    from reportgen.suite import Combination

    monkeypatch.setitem(studies.REGISTRY, "instrumentation", f"{__name__}:_raising_study")
    # an install without the tools study's code: recorded as not available
    monkeypatch.delitem(studies.REGISTRY, "tools")
    STUDY_CALLS.clear()
    sections = measure(_tiny(mode="decode"), run_dir=tmp_path, combo_id="c", budget_s=0.2, profile_iterations=1,
                       studies=["instrumentation", "tools"], study_budget_s=1.0)
    assert STUDY_CALLS == ["c"]
    assert sections["studies"] == {
        "instrumentation": {"status": "failed", "reason": "RuntimeError: the instrument broke"},
        "tools": {"status": "not available", "reason": "this reportgen has no code for the 'tools' study"},
    }
    assert sections["timing"]["median"] > 0 and sections["attribution"]["categories"]

    # an unprofiled round runs no study
    later = measure(_tiny(), run_dir=tmp_path, combo_id="c", budget_s=0.1, profiled=False,
                    studies=["instrumentation"])
    assert "studies" not in later and STUDY_CALLS == ["c"]

    combo = Combination("gpt2", "tiny", "decode", "fp32", "sdpa", 1, 8, "cpu")
    record = combination_record(combo, run_id="cpu-x/s-12345678", status="ok", reason=None,
                                started="2026-01-01T00:00:00Z", finished="2026-01-01T00:00:01Z",
                                duration_s=1.0, git={"commit": None, "dirty": None}, sections=sections)
    assert record["status"] == "ok" and record["studies"]["instrumentation"]["status"] == "failed"
    VALIDATOR.validate(record)


def test_run_study_refuses_names_outside_the_vocabulary() -> None:
    from reportgen.profile.studies import run_studies, run_study

    with pytest.raises(ValueError, match="unknown study"):
        run_study("nope", None, None, None, run_dir=Path("."), combo_id="c", budget_s=1.0)
    assert run_studies(["nope"], None, None, None, run_dir=Path("."), combo_id="c", budget_s=1.0) == {
        "nope": {"status": "failed", "reason": "ValueError: unknown study 'nope'; valid: instrumentation, tools"}}


# --- the instrumentation study ------------------------------------------------------------

CUDA_ONLY = {"profiler-device", "nvtx"}


@pytest.fixture(scope="module")
def bert_study() -> dict[str, Any]:
    import torch

    from reportgen.profile import building, instrumentation
    from reportgen.profile.structure import derive

    built = building.build(_tiny("bert-base"), torch.device("cpu"), seed=0)
    try:
        return instrumentation.study(built, derive(built.model, built.step), _tiny("bert-base"),
                                     run_dir=Path("."), combo_id="c", budget_s=0.5)
    finally:
        building.free(built)


def test_every_cpu_variant_is_measured_and_the_cuda_ones_do_not_apply(bert_study: dict[str, Any]) -> None:
    from reportgen.profile.instrumentation import MIN_PAIRS, VARIANTS

    assert bert_study["status"] == "ok" and bert_study["device"] == "cpu"
    assert bert_study["clock"] == "host-clock"
    rows = {v["name"]: v for v in bert_study["variants"]}
    assert list(rows) == [v.name for v in VARIANTS]
    for name, row in rows.items():
        if name in CUDA_ONLY:
            assert row["status"] == "not applicable", row
            assert "CUDA" in row["reason"] and "cpu" in row["reason"]
            assert row["ratio"] is None and row["n_pairs"] == 0
            continue
        assert row["status"] == "ok", row
        assert row["ratio"] > 0 and row["ci_low"] <= row["ratio"] <= row["ci_high"]
        assert row["confidence"] == 0.95
        assert row["n_pairs"] >= MIN_PAIRS and row["n_pairs"] % 2 == 0
        assert len(row["bare_block_ms"]) == len(row["instrumented_block_ms"]) == row["n_pairs"]
        assert row["bare_ms"] > 0 and row["instrumented_ms"] > 0 and row["session_ms"] >= 0
        assert row["forwards_per_block"] == bert_study["forwards_per_block"] >= 2
    assert rows["profiler-cpu"]["gives"] == ["op_times"]
    assert rows["profiler-stack"]["gives"] == ["op_times", "stacks"]  # no device_kernels on a CPU
    assert rows["hooks-clocks"]["gives"] == ["module_ranges", "category_times"]
    assert rows["hooks-ranges"]["gives"] == []
    # nothing applicable was skipped: the budget went to the eight CPU variants
    assert bert_study["variant_budget_s"] == pytest.approx(0.5 / 8)


def test_the_study_record_matches_the_schema(bert_study: dict[str, Any]) -> None:
    record = copy.deepcopy(GOLDEN)
    record["studies"] = {"instrumentation": bert_study,
                         "tools": {"status": "not available", "reason": "no code"}}
    VALIDATOR.validate(record)

    broken = copy.deepcopy(record)
    broken["studies"]["instrumentation"]["variants"][0]["ratio"] = None  # an ok row needs its figure
    assert not VALIDATOR.is_valid(broken)
    unknown = copy.deepcopy(record)
    unknown["studies"]["profiling"] = {"status": "ok"}
    assert not VALIDATOR.is_valid(unknown)
    no_reason = copy.deepcopy(record)
    no_reason["studies"]["tools"] = {"status": "failed"}
    assert not VALIDATOR.is_valid(no_reason)


def test_an_instrument_that_costs_time_shows_a_significant_ratio() -> None:
    """A known cost (4 ms at the model's entry, on a forward that costs 2 ms) must come out
    as a ratio whose interval lies above 1, of the expected size: on a virtual clock that
    only the forward and the instrument advance, so the host's load cannot move it."""
    import contextlib

    import torch

    from reportgen.profile import instrumentation as inst
    from reportgen.profile.structure import derive

    model = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)
    clock = [0.0]  # ms

    class Step:
        device = torch.device("cpu")
        inputs_info: dict[str, Any] = {}  # noqa: RUF012 - read-only, unused here

        def __call__(self) -> Any:
            clock[0] += 2.0
            return model(x)

        def reset(self) -> None:
            return None

        def sync(self) -> None:
            return None

    class VirtualTimer:
        method = "virtual clock"

        def time(self, step: Any) -> float:
            start = clock[0]
            step()
            return clock[0] - start

    def cost(_m: Any, _a: Any) -> None:
        clock[0] += 4.0

    @contextlib.contextmanager
    def instrumented(ctx: inst.Context) -> Any:
        handle = ctx.model.register_forward_pre_hook(cost)
        try:
            yield None
        finally:
            handle.remove()

    step = Step()
    ctx = inst.Context(model=model, step=step, structure=derive(model, step), cuda=False, compiled=False)
    clock[0] = 0.0  # the structure's recorded forward advanced it
    row = inst.compare(inst.Variant("costly", instrumented, ()), ctx, VirtualTimer(), forwards=2, budget_s=0.0)
    assert row["n_pairs"] == inst.MIN_PAIRS
    assert 1.0 < row["ci_low"] <= row["ratio"] <= row["ci_high"]
    assert row["instrumented_ms"] - row["bare_ms"] == pytest.approx(4.0)
    assert row["ratio"] == pytest.approx(3.0)
    # without the instrument's cost the same comparison finds no difference
    clock[0] = 0.0
    free = inst.Variant("free", lambda _ctx: contextlib.nullcontext(), ())
    same = inst.compare(free, ctx, VirtualTimer(), forwards=2, budget_s=0.0)
    assert same["ratio"] == pytest.approx(1.0) and same["ci_low"] <= 1.0 <= same["ci_high"]


def test_hook_variants_do_not_apply_to_a_compiled_forward() -> None:
    from reportgen.profile.instrumentation import COMPILED, VARIANTS, Context

    ctx = Context(model=None, step=SimpleNamespace(device=SimpleNamespace(type="cuda")),  # type: ignore[arg-type]
                  structure=None, cuda=True, compiled=True)  # type: ignore[arg-type]
    reasons = {v.name: v.not_applicable(ctx) for v in VARIANTS}
    assert {n for n, r in reasons.items() if r == COMPILED} == {"hooks-ranges", "hooks-clocks", "nvtx"}
    assert reasons["profiler-device"] is None and reasons["profiler-reportgen"] is None
    gives = {v.name: v.gives_here(ctx) for v in VARIANTS}
    assert gives["profiler-device"] == ["op_times", "device_kernels"]
    assert "module_ranges" not in gives["profiler-reportgen"]  # no module survives compilation


# --- the page -------------------------------------------------------------------------------

CPU_ROWS = {  # name: (ratio, low, high) or a reason
    "profiler-cpu": (1.1234, 1.0512, 1.1876),
    "profiler-device": "needs a CUDA device; this forward runs on the cpu",
    "profiler-shapes": (1.2, 1.1, 1.3),
    "profiler-memory": (1.25, 1.2, 1.31),
    "profiler-stack": (2.5, 2.2, 2.9),
    "profiler-flops": (1.15, 1.1, 1.2),
    "profiler-reportgen": (1.6, 1.5, 1.7),
    "hooks-ranges": (1.0012, 0.9931, 1.0104),
    "hooks-clocks": (0.9876, 0.9712, 0.9934),
    "nvtx": "needs a CUDA device; this forward runs on the cpu",
}
GIVES = {"profiler-cpu": ["op_times"], "profiler-device": ["op_times", "device_kernels"],
         "profiler-shapes": ["op_times", "shapes"], "profiler-memory": ["op_times", "memory"],
         "profiler-stack": ["op_times", "stacks"], "profiler-flops": ["op_times", "flops"],
         "profiler-reportgen": ["op_times", "shapes", "memory", "flops", "module_ranges", "category_times"],
         "hooks-ranges": [], "hooks-clocks": ["module_ranges", "category_times"], "nvtx": ["module_ranges"]}


def synthetic_study(device: str, rows: dict[str, Any]) -> dict[str, Any]:
    variants = []
    for name, value in rows.items():
        base = {"name": name, "confidence": 0.95, "gives": GIVES[name]}
        if isinstance(value, str):
            variants.append({**base, "status": "not applicable", "reason": value, "ratio": None, "ci_low": None,
                             "ci_high": None, "n_pairs": 0, "bare_ms": None, "instrumented_ms": None,
                             "session_ms": None})
        else:
            ratio, low, high = value
            variants.append({**base, "status": "ok", "reason": None, "ratio": ratio, "ci_low": low, "ci_high": high,
                             "n_pairs": 6, "bare_ms": 10.0, "instrumented_ms": 10.0 * ratio, "session_ms": 3.25,
                             "forwards_per_block": 2, "bare_block_ms": [10.0] * 6,
                             "instrumented_block_ms": [10.0 * ratio] * 6, "duration_s": 1.0})
    return {"status": "ok", "device": device, "clock": "host-clock" if device == "cpu" else "cuda-events",
            "method": "abba-blocks", "confidence": 0.95, "min_pairs": 6, "budget_s": 30.0,
            "variant_budget_s": 3.75, "forwards_per_block": 2, "probe_bare_ms": 10.0, "duration_s": 42.0,
            "variants": variants}


def write_runs(root: Path) -> None:
    """A CPU run whose study measured, and a GPU run with one study that failed and one
    that measured every variant (device kernels included)."""
    gpu_rows = {name: (1.05 + i / 100, 1.0 + i / 100, 1.1 + i / 100) for i, name in enumerate(CPU_ROWS)}
    for hardware, device, studies in (
        ("cpu-test-2c", "cpu", [{"instrumentation": synthetic_study("cpu", CPU_ROWS), "tools": {
            "status": "not available", "reason": "this reportgen has no code for the 'tools' study"}}]),
        ("nvidia-test-1x", "cuda", [{"instrumentation": synthetic_study("cuda", gpu_rows)},
                                    {"instrumentation": {"status": "failed", "reason": "RuntimeError: CUPTI"}}]),
    ):
        run_id = f"{hardware}/studies-12345678"
        run_dir = root / run_id
        (run_dir / "combinations").mkdir(parents=True)
        ids = []
        for i, study in enumerate(studies):
            record = copy.deepcopy(GOLDEN)
            record["combination"] = {**record["combination"], "device": device, "seq_len": 128 * (i + 1)}
            record["id"] = f"bert-base--forward--fp32--sdpa--b1--s{128 * (i + 1)}"
            record["run_id"] = run_id
            record["studies"] = study
            VALIDATOR.validate(record)
            ids.append(record["id"])
            (run_dir / "combinations" / f"{record['id']}.json").write_text(json.dumps(record))
        run = {"kind": RUN_KIND, "schema_version": 1, "run_id": run_id, "hardware": hardware,
               "suite": {"name": "studies"}, "environment": {}, "combinations": ids, "status": "complete"}
        (run_dir / "run.json").write_text(json.dumps(run))


def test_page_from_records(tmp_path: Path) -> None:
    from reportgen.render import render

    runs = tmp_path / "runs"
    write_runs(runs)
    docs = tmp_path / "docs"
    render(runs, docs, svg=False)
    page = (docs / "instrumentation.md").read_text()
    assert page.startswith("---\ntitle: \"Instrumentation trade-offs\"\n---\n# Instrumentation trade-offs\n")
    assert "[Instrumentation trade-offs](instrumentation.md)" in (docs / "index.md").read_text()
    # every measured variant: its ratio, interval, verdict and what it gives
    page = html.unescape(page)
    assert ("| <code>profiler-cpu</code> | <code>op_times</code> | 1.12x [1.05, 1.19] | slower | 10.0 ms | "
            "11.2 ms | 3.25 ms | 6 |") in page
    assert "| <code>hooks-ranges</code> | nothing by itself | 1.00x [0.993, 1.01] | no significant difference |" in page
    assert ("| <code>hooks-clocks</code> | <code>module_ranges</code>, <code>category_times</code> | "
            "0.988x [0.971, 0.993] | faster |") in page
    # what did not apply, and why
    assert "* <code>profiler-device</code>: needs a CUDA device; this forward runs on the cpu." in page
    assert "* <code>nvtx</code>: needs a CUDA device; this forward runs on the cpu." in page
    # the GPU: device kernels, and a study that failed on one combination
    gpu = page[page.index("## GPU"):]
    assert "<code>device_kernels</code>" in gpu
    assert "The study did not run here (failed): RuntimeError: CUPTI." in page
    # one chart per hardware, its data and each table's, downloadable
    charts = docs / "charts"
    spec_data = json.loads((charts / "instrumentation--overhead-cpu-test-2c-chart.json").read_text())
    assert {r["variant"] for r in spec_data} == {n for n, v in CPU_ROWS.items() if not isinstance(v, str)}
    assert all(r["ci_low"] <= r["ratio"] <= r["ci_high"] for r in spec_data)
    table = json.loads((charts / "instrumentation--cpu-test-2c-bert-base-forward-fp32-sdpa-b1-s128.json")
                       .read_text())
    assert [r["variant"] for r in table] == list(CPU_ROWS)
    first = table[0]
    assert (first["ratio"], first["ci_low"], first["ci_high"], first["verdict"]) == (1.1234, 1.0512, 1.1876, "slower")
    assert table[1]["status"] == "not applicable" and table[1]["ratio"] is None
    capabilities = json.loads((charts / "instrumentation--cpu-test-2c-capabilities.json").read_text())
    assert {c["variant"]: (c["measured"], c["not_applicable"]) for c in capabilities}["nvtx"] == (0, 1)
    assert "data-spec=" in page and page.count('class="rg-chart"') == 2


def test_no_page_without_a_study(tmp_path: Path) -> None:
    from reportgen.render import render

    runs = tmp_path / "runs"
    write_runs(runs)
    for path in runs.glob("*/*/combinations/*.json"):
        record = json.loads(path.read_text())
        del record["studies"]
        path.write_text(json.dumps(record))
    render(runs, tmp_path / "docs", svg=False)
    assert not (tmp_path / "docs" / "instrumentation.md").exists()
    assert "instrumentation.md" not in (tmp_path / "docs" / "index.md").read_text()


def test_page_renders_without_torch(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    write_runs(runs)
    code = ("import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None\n"
            "from pathlib import Path\nfrom reportgen.render import render\n"
            "render(Path(sys.argv[1]), Path(sys.argv[2]), svg=False)\n"
            "assert 'torch' not in sys.modules or sys.modules['torch'] is None\n")
    done = subprocess.run([sys.executable, "-c", code, str(runs), str(tmp_path / "docs")], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          check=False, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "docs" / "instrumentation.md").is_file()
