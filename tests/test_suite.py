"""Suite files: validation before anything runs, CLI overrides, expansion, built-ins."""

from __future__ import annotations

from pathlib import Path

import pytest

from reportgen import cli
from reportgen.errors import UserError
from reportgen.suite import SUITES_DIR, Combination, load_suite, parse_overrides

GOOD = """
name = "mini"
description = "two models"

[settings]
budget_s = 0.5
device = "cpu"

[[matrix]]
models = ["bert-base"]
seq_lens = [16, 32]
dtypes = ["fp32"]
attn = ["eager", "sdpa"]
modes = ["forward"]
"""

MATRIX = '[[matrix]]\nmodels = ["bert-base"]\nseq_lens = [16]\n'

# (suite text, substrings the one error line must contain: the key and the bad value)
BAD_SUITES = {
    "unknown-top-key": ('colour = "red"\n' + MATRIX, ["colour", "unknown key", "valid: name"]),
    "unknown-matrix-key": (MATRIX + 'heads = [4]\n', ["matrix[0].heads", "unknown key", "valid: models"]),
    "unknown-setting": ('[settings]\nwarmup = 3\n' + MATRIX, ["settings.warmup", "unknown key"]),
    "bad-type-list": ('[[matrix]]\nmodels = "bert-base"\nseq_lens = [16]\n', ["matrix[0].models", "expected a list"]),
    "bad-type-int": ('[[matrix]]\nmodels = ["bert-base"]\nseq_lens = ["16"]\n',
                     ["matrix[0].seq_lens", "expected integers", "'16'"]),
    "bad-type-bool": ('[[matrix]]\nmodels = ["bert-base"]\nseq_lens = [true]\n', ["matrix[0].seq_lens", "True"]),
    "bad-type-budget": ('[settings]\nbudget_s = "fast"\n' + MATRIX, ["settings.budget_s", "'fast'"]),
    "unknown-model": ('[[matrix]]\nmodels = ["bert-bass"]\nseq_lens = [16]\n',
                      ["matrix[0].models", "'bert-bass'", "bert-base"]),
    "missing-config-path": ('[[matrix]]\nmodels = ["nowhere/config.json"]\nseq_lens = [16]\n',
                            ["matrix[0].models", "nowhere/config.json"]),
    "unknown-dtype": (MATRIX + 'dtypes = ["fp8"]\n', ["matrix[0].dtypes", "'fp8'", "valid: fp32, fp16, bf16"]),
    "unknown-attn": (MATRIX + 'attn = ["flash3"]\n', ["matrix[0].attn", "'flash3'", "sdpa-flash"]),
    "unknown-mode": (MATRIX + 'modes = ["fit"]\n', ["matrix[0].modes", "'fit'", "prefill"]),
    "unknown-device": ('[settings]\ndevice = "tpu"\n' + MATRIX, ["settings.device", "'tpu'", "auto, cpu, cuda"]),
    "unknown-scale": (MATRIX + 'scale = "huge"\n', ["matrix[0].scale", "'huge'", "tiny, reference"]),
    "seq-len-zero": ('[[matrix]]\nmodels = ["bert-base"]\nseq_lens = [0]\n', ["matrix[0].seq_lens", "0", ">= 1"]),
    "batch-negative": (MATRIX + 'batch_sizes = [-1]\n', ["matrix[0].batch_sizes", "-1", ">= 1"]),
    "empty-list": (MATRIX + 'dtypes = []\n', ["matrix[0].dtypes", "empty"]),
    "budget-zero": ('[settings]\nbudget_s = 0\n' + MATRIX, ["settings.budget_s", "0", "> 0"]),
    "budget-nan": ('[settings]\nbudget_s = nan\n' + MATRIX, ["settings.budget_s", "nan"]),
    "iterations-zero": ('[settings]\nprofile_iterations = 0\n' + MATRIX, ["settings.profile_iterations", ">= 1"]),
    "no-matrix": ('name = "x"\n', ["matrix", "missing"]),
    "missing-seq-lens": ('[[matrix]]\nmodels = ["bert-base"]\n', ["matrix[0].seq_lens", "missing"]),
    "second-entry": (MATRIX + MATRIX + 'dtypes = ["fp8"]\n', ["matrix[1].dtypes", "'fp8'"]),
    "bad-name": ('name = "a b"\n' + MATRIX, ["name", "'a b'"]),
    "bad-toml": ('[[matrix]\nmodels = ["bert-base"\n', ["invalid TOML"]),
}


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("reportgen: error: ")
    return lines[0]


@pytest.mark.parametrize("case", sorted(BAD_SUITES))
def test_bad_suite_exits_2_with_one_line_and_writes_nothing(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text, expected = BAD_SUITES[case]
    suite_file = tmp_path / "x.toml"
    suite_file.write_text(text)
    out = tmp_path / "runs"
    code = cli.main(["profile", "--suite", str(suite_file), "--out", str(out), "--device", "cpu"])
    assert code == 2
    line = _one_line(capsys.readouterr().err)
    assert str(suite_file) in line
    for fragment in expected:
        assert fragment in line
    assert not out.exists()


BAD_FLAGS = {
    "dtypes": (["--dtypes", "fp32,fp8"], ["--dtypes", "'fp8'", "valid: fp32, fp16, bf16"]),
    "attn": (["--attn", "nope"], ["--attn", "'nope'"]),
    "modes": (["--modes", "fit"], ["--modes", "'fit'"]),
    "device": (["--device", "tpu"], ["--device", "'tpu'", "auto, cpu, cuda"]),
    "scale": (["--scale", "big"], ["--scale", "'big'"]),
    "models": (["--models", "gpt9"], ["--models", "'gpt9'"]),
    "seq-lens-text": (["--seq-lens", "128,abc"], ["--seq-lens", "'abc'"]),
    "seq-lens-zero": (["--seq-lens", "0"], ["--seq-lens", ">= 1"]),
    "batch-sizes-empty": (["--batch-sizes", ","], ["--batch-sizes", "empty"]),
    "budget": (["--budget-s", "-1"], ["--budget-s", "> 0"]),
    "budget-text": (["--budget-s", "soon"], ["--budget-s", "'soon'"]),
    "unknown-suite": (["--suite", "nosuch"], ["--suite", "'nosuch'", "tiny"]),
    "missing-file": (["--suite", "nowhere/x.toml"], ["--suite", "nowhere/x.toml", "does not exist"]),
}


@pytest.mark.parametrize("case", sorted(BAD_FLAGS))
def test_bad_flag_exits_2_naming_the_flag(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    flags, expected = BAD_FLAGS[case]
    out = tmp_path / "runs"
    argv = ["profile", "--out", str(out)] + (["--suite", "tiny"] if "--suite" not in flags else []) + flags
    assert cli.main(argv) == 2
    line = _one_line(capsys.readouterr().err)
    for fragment in expected:
        assert fragment in line
    assert not out.exists()


def test_cuda_on_a_cpu_host_is_refused_before_writing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    out = tmp_path / "runs"
    assert cli.main(["profile", "--suite", "tiny", "--device", "cuda", "--out", str(out)]) == 2
    assert "--device" in _one_line(capsys.readouterr().err)
    assert not out.exists()


def test_out_that_is_a_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "runs"
    out.write_text("")
    assert cli.main(["profile", "--suite", "tiny", "--device", "cpu", "--out", str(out)]) == 2
    assert "--out" in _one_line(capsys.readouterr().err)


@pytest.mark.parametrize("path", sorted(SUITES_DIR.glob("*.toml")), ids=lambda p: p.stem)
def test_builtin_suite_loads_and_expands(path: Path) -> None:
    by_name = load_suite(path.stem)
    by_path = load_suite(path)
    assert by_name.name == path.stem
    assert by_name.source == f"builtin:{path.stem}"
    assert by_name.hash == by_path.hash
    combos = by_name.combinations()
    assert combos
    assert len({c.id for c in combos}) == len(combos)
    assert by_name.description.strip()


def test_builtin_suite_sizes() -> None:
    assert len(load_suite("cpu-default").combinations()) == 24
    tiny = load_suite("tiny").combinations()
    assert all(c.scale == "tiny" and c.id.endswith("--tiny") for c in tiny)
    causal = {c.model for c in tiny if c.mode != "forward"}
    assert causal == {"gpt2", "llama-small"}


def test_the_long_context_suite_draws_a_line_per_model_and_mode_and_states_its_level() -> None:
    """cpu-long measures every model and mode it holds at three or more lengths (a line on
    the home page's chart), with fewer layers than each model has, and its description
    states the level its rounds allow."""
    from reportgen.intervals import achieved_confidence
    from reportgen.render.longcontext import MIN_LENGTHS

    suite = load_suite("cpu-long")
    combos = suite.combinations()
    assert len(combos) == 18 and {c.device for c in combos} == {"cpu"}
    lengths: dict[tuple[str, str], set[int]] = {}
    for c in combos:
        lengths.setdefault((c.model, c.mode), set()).add(c.seq_len)
        assert c.scale == "reference" and c.layers is not None
    assert all(len(seqs) >= MIN_LENGTHS for seqs in lengths.values())
    assert max(c.seq_len for c in combos) == 8192
    level = achieved_confidence(suite.settings.rounds)
    assert f"{100 * level:g}%" in " ".join(suite.description.split())


def test_combination_id_and_dict() -> None:
    combo = Combination("bert-base", "reference", "forward", "fp32", "sdpa", 1, 128, "cpu")
    assert combo.id == "bert-base--forward--fp32--sdpa--b1--s128"
    tiny = Combination("gpt2", "tiny", "decode", "bf16", "eager", 2, 16, "cuda")
    assert tiny.id == "gpt2--decode--bf16--eager--b2--s16--tiny"
    assert combo.as_dict() == {
        "model": "bert-base", "scale": "reference", "mode": "forward", "dtype": "fp32",
        "attn_implementation": "sdpa", "batch_size": 1, "seq_len": 128, "device": "cpu",
        "compile": "none",
    }


def test_expansion_is_deduplicated_and_stable(tmp_path: Path) -> None:
    suite_file = tmp_path / "dup.toml"
    suite_file.write_text(GOOD + "\n" + '[[matrix]]\nmodels = ["bert-base", "gpt2"]\nseq_lens = [32]\n')
    ids = [c.id for c in load_suite(suite_file).combinations()]
    assert ids == [
        "bert-base--forward--fp32--eager--b1--s16",
        "bert-base--forward--fp32--eager--b1--s32",
        "bert-base--forward--fp32--sdpa--b1--s16",
        "bert-base--forward--fp32--sdpa--b1--s32",
        "gpt2--forward--fp32--sdpa--b1--s32",
    ]


def test_overrides_replace_the_key_in_every_entry() -> None:
    overrides = parse_overrides(
        {"models": "gpt2", "seq_lens": "8,8,4", "dtypes": "bf16", "modes": "prefill,decode",
         "attn": None, "batch_sizes": "2", "scale": "tiny", "device": "cpu", "budget_s": "0.1"}
    )
    suite = load_suite("tiny", overrides)
    combos = suite.combinations()
    assert {c.model for c in combos} == {"gpt2"}
    assert {c.seq_len for c in combos} == {8, 4}
    assert {c.dtype for c in combos} == {"bf16"}
    assert {c.mode for c in combos} == {"prefill", "decode"}
    assert {c.attn_implementation for c in combos} == {"eager", "sdpa"}  # not overridden
    assert {c.batch_size for c in combos} == {2}
    assert suite.settings.budget_s == 0.1 and suite.settings.device == "cpu"
    # Two entries collapse to the same combinations once models is overridden.
    assert len(combos) == 2 * 2 * 2


def test_overrides_change_the_hash_and_description_does_not(tmp_path: Path) -> None:
    a = tmp_path / "a.toml"
    b = tmp_path / "b.toml"
    a.write_text(GOOD)
    b.write_text(GOOD.replace("two models", "other prose"))
    assert load_suite(a).hash == load_suite(b).hash
    assert load_suite(a, parse_overrides({"seq_lens": "64"})).hash != load_suite(a).hash
    assert load_suite(a).with_device("cpu").hash == load_suite(a).hash  # already cpu
    assert load_suite(a).with_device("cuda").hash != load_suite(a).hash


def test_list_prints_overridden_ids_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "runs"
    argv = ["profile", "--suite", "tiny", "--models", "bert-base", "--seq-lens", "16", "--attn", "sdpa",
            "--modes", "forward", "--device", "cpu", "--out", str(out), "--list"]
    assert cli.main(argv) == 0
    assert capsys.readouterr().out.split() == ["bert-base--forward--fp32--sdpa--b1--s16--tiny"]
    assert not out.exists()


def test_model_forms(tmp_path: Path) -> None:
    config = tmp_path / "mymodel" / "config.json"
    config.parent.mkdir()
    config.write_text('{"model_type": "bert"}')
    overrides = parse_overrides({"models": f"attention-micro,llama,{config.parent}"})
    suite = load_suite("tiny", overrides)
    models = {c.model for c in suite.combinations()}
    assert models == {"attention-micro", "llama", str(config)}
    path_ids = [c.id for c in suite.combinations() if c.model == str(config)]
    assert all(i.startswith("mymodel-") and "/" not in i for i in path_ids)


def test_default_suite_follows_the_device() -> None:
    from reportgen.suite import default_suite_name

    assert default_suite_name("cpu") == "cpu-default"
    torch = pytest.importorskip("torch")
    expected = "gpu-default" if torch.cuda.is_available() else "cpu-default"
    assert default_suite_name("auto") == expected


def test_suite_module_does_not_import_torch() -> None:
    import subprocess
    import sys

    code = ("import sys, reportgen.suite, reportgen.records.schema, reportgen.records.store, "
            "reportgen.commands.summary; print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_user_error_is_raised_for_library_callers(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"matrix\[0\]\.dtypes: unknown dtype 'fp8'; valid: fp32, fp16, bf16"):
        suite_file = tmp_path / "x.toml"
        suite_file.write_text(MATRIX + 'dtypes = ["fp8"]\n')
        load_suite(suite_file)
