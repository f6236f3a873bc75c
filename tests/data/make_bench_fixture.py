"""Write ``bench_fixture/results.json``: a small bench results file (the format
``reportgen.bench.results`` writes) with one figure of every kind, for the Validation page's
golden test, the strict build and the browser test. A few strings are hostile markup that
must render as text. Run ``PYTHONPATH=. python tests/data/make_bench_fixture.py`` to regenerate
(deterministic); the committed file also guards the results format against silent change.
"""

from __future__ import annotations

from pathlib import Path

from reportgen.bench import results as R

HOSTILE = "<script>alert(1)</script>"
RATIO_3 = {"kind": "ratio_within", "target": 0.03}


def figures() -> dict[str, dict]:
    combos = ["bert-base--forward--fp32--sdpa--b1--s128", "gpt2--forward--fp32--sdpa--b1--s128"]
    return {
        "latency_agreement": R.figure(
            "Latency agreement", "Does reportgen's unprofiled median agree with "
            "torch.utils.benchmark on the same model and input?",
            value=1.012, unit="ratio", interval=[0.998, 1.024], interval_kind="bootstrap",
            goal="within 3% of 1", goal_spec=RATIO_3,
            rows=[{"combination": c, "reportgen_ms": 10.0 + i, "timer_ms": 9.9 + i,
                   "ratio": 1.01 + 0.004 * i, "ratio_low": 0.998, "ratio_high": 1.024,
                   "rounds": 5} for i, c in enumerate(combos)]),
        "profiler_overhead": R.figure(
            "Profiler overhead", "How much slower is a profiled iteration?",
            value=1.21, unit="ratio", goal="shown", goal_spec=None,
            rows=[{"combination": c, "unprofiled_ms": 10.0, "profiled_ms": 12.1, "ratio": 1.21}
                  for c in combos]),
        "instrumentation_overhead": R.figure(
            "Instrumentation overhead", "What do reportgen's hooks and ranges cost?",
            value=1.041, unit="ratio", interval=[1.02, 1.06], goal="below 1.03",
            goal_spec={"kind": "below", "target": 1.03},
            notes=["Misses its goal on this host: the hooks cost more at short lengths."],
            rows=[{"combination": c, "bare_ms": 10.0, "instrumented_ms": 10.41,
                   "ratio": 1.041, "ratio_low": 1.02, "ratio_high": 1.06} for c in combos]),
        "attribution_architectures": R.figure(
            "Attribution across architectures", "Do shares sum to 1 and is attention.core "
            "found, without model-specific code?",
            value=0.5, unit="fraction", goal="all architectures", goal_spec={"kind": "all"},
            rows=[{"model_type": "bert", "architecture": "encoder", "class": "BertModel",
                   "share_sum": 1.0, "attention_core_share": 0.21, "ok": True, "error": None},
                  {"model_type": "weird_model", "architecture": "decoder", "class": HOSTILE,
                   "share_sum": None, "attention_core_share": None, "ok": False,
                   "error": "ValueError: <class 'X'> | *not* supported"}]),
        "attribution_ablation": R.figure(
            "Ablation cross-check", "Does removing the attention core save the time "
            "attributed to it?",
            value=-0.04, unit="fraction", goal="within 10%",
            goal_spec={"kind": "rel_within", "target": 0.1},
            rows=[{"combination": combos[0], "forward_ms": 10.0, "ablated_ms": 8.96,
                   "drop_ms": 1.04, "drop_low_ms": 0.98, "drop_high_ms": 1.1,
                   "attributed_ms": 1.0, "rel_diff": -0.04, "stand_in_calls": 12}]),
        "flops_agreement": R.figure(
            "FLOPs, two ways", "Do analytic FLOPs agree with torch.utils.flop_counter?",
            value=1.0, unit="share", goal="every disagreement explained",
            goal_spec={"kind": "all"},
            rows=[{"combination": combos[0], "category": "attention.core", "analytic": 4.0e9,
                   "counted": 0.0, "rel_diff": -1.0,
                   "explanation": "flop_counter has no formula for aten::_scaled_dot_product"},
                  {"combination": combos[0], "category": "mlp", "analytic": 9.0e9,
                   "counted": 9.0e9, "rel_diff": 0.0, "explanation": None}]),
        "trace_agreement": R.figure(
            "Trace read by someone else", "Does an independent reader of the trace give "
            "the same totals?",
            value=0.002, unit="fraction", goal="within 1%",
            goal_spec={"kind": "rel_within", "target": 0.01},
            rows=[{"combination": c, "basis": "cpu", "weighted_rel_diff": 0.002,
                   "total_rel_diff": 0.001, "reader_total_ms": 9.99, "reportgen_total_ms": 10.0,
                   "ops": 40} for c in combos]),
        "harness_efficiency": R.figure(
            "Harness efficiency", "What share of wall time is spent in timed iterations?",
            value=0.41, unit="share", goal="shown", goal_spec=None,
            rows=[{"combination": c, "timed_s": 4.1, "wall_s": 10.0, "share": 0.41}
                  for c in combos]),
        "suite_time": R.figure(
            "Suite time", "How long does the cpu-default suite take?", value=812.0, unit="s",
            goal="shown", goal_spec=None,
            rows=[{"suite": "cpu-default", "combinations": 24, "wall_s": 812.0}]),
        "render_scaling": R.not_measured(
            "Render scaling", "Does render plus strict build grow linearly?",
            "linear in the number of combinations", "skipped in this fixture"),
    }


def main() -> None:
    doc = R.results_document(
        figures(), environment={"hardware": "cpu-synthetic-epyc-2c", "cpu": "Synthetic CPU",
                                "threads": 2, "torch": "2.5.0", "transformers": "4.46.0",
                                "git": {"commit": "0123456789abcdef", "dirty": False}},
        created="2026-12-01T12:00:00Z", quick=True, duration_s=123.4,
        command="python scripts/bench.py --quick")
    R.write_results(Path(__file__).parent / "bench_fixture" / "results.json", doc)


if __name__ == "__main__":
    main()
