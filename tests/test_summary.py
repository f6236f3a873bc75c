"""``reportgen summary``: rows, JSON objects, flattened CSV, and a run dir that isn't one."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest

from reportgen import cli
from reportgen.categories import ARCHITECTURE_CATEGORIES, CATEGORIES, OPTIONAL_CATEGORIES
from reportgen.commands.summary import csv_columns, flatten_row
from reportgen.render.runtable import combination_row

# needs no torch: the Pages job runs these on the base install (pytest -m torchfree)
pytestmark = pytest.mark.torchfree

DATA = Path(__file__).parent / "data" / "schema"
GOLDEN = json.loads((DATA / "v1" / "combination-ok.json").read_text())
V0_RUN = DATA / "v0" / "cpu-amd-epyc-7b13-2c" / "cpu-default-0a0b0c0d"


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """The v0 fixture run plus a v1 record, so rows come from migrated and current files."""
    target = tmp_path / "run"
    shutil.copytree(V0_RUN, target)
    (target / "combinations" / f"{GOLDEN['id']}.json").write_text(json.dumps(GOLDEN))
    return target


def test_row_of_an_ok_record() -> None:
    row = combination_row(GOLDEN)
    timing = GOLDEN["timing"]
    assert row["latency_ms"] == {"median": timing["median"], "ci_low": timing["ci_low"],
                                 "ci_high": timing["ci_high"], "confidence": timing["confidence"],
                                 "n": timing["n"]}
    assert row["profiler_overhead"] == GOLDEN["profile"]["overhead_ratio"]
    # display order; the record predates the compiled and the architecture categories
    assert list(row["shares"]) == [c for c in CATEGORIES
                                   if c != "compiled" and c not in OPTIONAL_CATEGORIES]
    assert row["compile"] == "none" and row["compile_s"] is None
    assert row["shares"]["attention.core"] == GOLDEN["attribution"]["categories"]["attention.core"]["share"]
    assert row["attn_implementation"] == "sdpa" and row["status"] == "ok" and row["reason"] is None


def test_timing_in_seconds_is_converted_to_ms() -> None:
    record = {**GOLDEN, "timing": {**GOLDEN["timing"], "unit": "s", "median": 0.5}}
    assert combination_row(record)["latency_ms"]["median"] == 500.0


def test_json_keeps_objects(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["summary", str(run_dir), "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in rows] == [
        "bert-base--forward--fp32--sdpa--b1--s128",
        "gpt2--decode--fp32--sdpa--b1--s128",
        "llama-small--prefill--fp32--sdpa--b1--s128",
    ]
    expected_keys = ["id", "model", "scale", "mode", "dtype", "attn_implementation", "batch_size", "seq_len",
                     "device", "compile", "compile_s", "status", "reason", "latency_ms",
                     "profiler_overhead", "shares"]
    for row in rows:
        assert list(row) == expected_keys
    ok, skipped, pending = rows
    assert ok["latency_ms"]["median"] == GOLDEN["timing"]["median"]
    assert ok["shares"]["mlp"] == 0.38
    assert skipped["status"] == "skipped" and skipped["reason"] == "decode needs a KV cache"
    assert skipped["latency_ms"] == {"median": None, "ci_low": None, "ci_high": None, "confidence": None,
                                     "n": None}
    assert pending["status"] == "pending" and pending["model"] == "llama-small"


def test_csv_flattens_with_dotted_columns(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["summary", str(run_dir), "--format", "csv"]) == 0
    reader = csv.DictReader(io.StringIO(capsys.readouterr().out))
    rows = list(reader)
    assert reader.fieldnames is not None
    assert reader.fieldnames[:12] == ["id", "model", "scale", "mode", "dtype", "attn_implementation",
                                      "batch_size", "seq_len", "device", "compile", "status", "reason"]
    assert reader.fieldnames[12:19] == ["latency_ms.median", "latency_ms.ci_low", "latency_ms.ci_high",
                                        "latency_ms.confidence", "latency_ms.n", "profiler_overhead",
                                        "compile_s"]
    assert reader.fieldnames[19:] == [f"shares.{c}" for c in CATEGORIES
                                      if c != "compiled" and c not in OPTIONAL_CATEGORIES]
    ok = rows[0]
    # Full precision: the CSV cell parses back to the stored float exactly.
    assert float(ok["latency_ms.median"]) == GOLDEN["timing"]["median"]
    assert float(ok["shares.attention.core"]) == 0.21
    assert rows[1]["latency_ms.median"] == "" and rows[1]["shares.mlp"] == ""


def _with_categories(**shares: float) -> dict:
    """GOLDEN with ``shares`` (category -> share) added to its attribution."""
    cats = {**GOLDEN["attribution"]["categories"],
            **{c.replace("_", "."): {"ms": 1.0 * v, "share": v} for c, v in shares.items()}}
    return {**GOLDEN, "attribution": {**GOLDEN["attribution"], "categories": cats}}


def test_architecture_categories_only_where_a_row_has_them() -> None:
    # a dense model's newer record holds the mixer and moe.* categories at 0: no columns
    dense = combination_row(_with_categories(mixer=0.0, moe_router=0.0, moe_experts=0.0))
    assert not set(dense["shares"]) & set(ARCHITECTURE_CATEGORIES)
    assert not any(c.startswith(("shares.mixer", "shares.moe")) for c in csv_columns([dense]))
    # beside a mixture-of-experts model, the table gets its columns, in display order
    moe = combination_row(_with_categories(mixer=0.0, moe_router=0.02, moe_experts=0.3, moe_shared=0.05))
    assert list(moe["shares"]) == [c for c in CATEGORIES
                                   if c not in ("compiled", "mixer", "optimizer", "attention.indexer",
                                                "residual")]
    columns = csv_columns([dense, moe])
    assert [c for c in columns if c.startswith("shares.")][4:8] == [
        "shares.mlp", "shares.moe.router", "shares.moe.experts", "shares.moe.shared"]
    assert "shares.mixer" not in columns and "shares.attention.indexer" not in columns


def test_flatten_and_columns_include_unknown_categories() -> None:
    row = combination_row(GOLDEN)
    row["shares"]["zz.custom"] = 0.0
    flat = flatten_row(row)
    assert flat["shares.zz.custom"] == 0.0 and flat["latency_ms.n"] == 30
    assert csv_columns([row])[-1] == "shares.zz.custom"


def test_table_lists_every_combination(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["summary", str(run_dir)]) == 0
    out = capsys.readouterr().out
    for combo_id in ("bert-base--forward--fp32--sdpa--b1--s128", "gpt2--decode--fp32--sdpa--b1--s128"):
        assert combo_id in out
    assert "decode needs a KV cache" in out and "pending" in out


def test_table_states_each_interval_s_level(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One level for every interval: the heading states it; a record of four rounds (87.5%)
    beside them: each interval its own, and no heading claims 95% for all."""
    assert cli.main(["summary", str(run_dir)]) == 0
    assert "95% CI" in capsys.readouterr().out
    four = {**GOLDEN, "id": "gpt2--prefill--fp32--sdpa--b1--s256",
            "combination": {**GOLDEN["combination"], "model": "gpt2", "seq_len": 256},
            "timing": {**GOLDEN["timing"], "confidence": 0.875}}
    (run_dir / "combinations" / f"{four['id']}.json").write_text(json.dumps(four))
    assert cli.main(["summary", str(run_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    row = next(line for line in lines if four["id"] in line)
    assert "87.5% CI" in row
    assert not any("95% CI" in line for line in lines if "combination" in line and "status" in line)


def test_not_a_run_dir_is_a_user_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["summary", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "not a run directory" in err and str(tmp_path) in err


def test_a_runs_root_names_the_runs_under_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["summary", str(DATA / "v0")]) == 2
    assert "cpu-default-0a0b0c0d" in capsys.readouterr().err
