"""Models named by their Hugging Face Hub id, against a Hub cache laid out on disk by the
test (the layout huggingface_hub writes) with HF_HUB_OFFLINE=1: no network anywhere."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from reportgen import cli
from reportgen.schema import COMBINATION_KIND, RUN_KIND, iter_runs, json_schema
from reportgen.suite import load_suite, model_slug, parse_overrides

ROOT = Path(__file__).parent.parent
MAIN = "1f3c2b9a8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a"
TAGGED = "9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d"
# the shape Qwen2.5-7B's config.json gives (written here, never fetched)
QWEN = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
        "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
        "num_key_value_heads": 4, "vocab_size": 152064, "max_position_embeddings": 131072,
        "rope_theta": 1000000.0, "rms_norm_eps": 1e-06, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "bos_token_id": 151643, "eos_token_id": 151643}
REMOTE = {"model_type": "acme_custom", "hidden_size": 64, "num_hidden_layers": 2,
          "auto_map": {"AutoConfig": "configuration_acme.AcmeConfig",
                       "AutoModelForCausalLM": "modeling_acme.AcmeForCausalLM"}}
TINY = ["--scale", "tiny", "--seq-lens", "16", "--modes", "forward", "--attn", "sdpa", "--device", "cpu",
        "--budget-s", "0.2"]


def lay_out(cache: Path, repo: str, commit: str, config: dict[str, Any], refs: tuple[str, ...] = ("main",)) -> Path:
    """One repository in a Hub cache, as huggingface_hub stores a downloaded config.json:
    the file under blobs/ by its hash, a snapshot per commit linking to it, refs naming the commit."""
    folder = cache / ("models--" + repo.replace("/", "--"))
    data = json.dumps(config, indent=2).encode()
    blob = folder / "blobs" / hashlib.sha256(data).hexdigest()
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(data)
    snapshot = folder / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    (snapshot / "config.json").symlink_to(os.path.relpath(blob, snapshot))
    for ref in refs:
        (folder / "refs" / ref).parent.mkdir(parents=True, exist_ok=True)
        (folder / "refs" / ref).write_text(commit)
    return snapshot / "config.json"


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HF_HOME in tmp_path, offline, no token; for this process (huggingface_hub reads its
    settings once, at import) and for the processes it starts (the environment)."""
    from huggingface_hub import constants

    home = tmp_path / "hf"
    cache = home / "hub"
    cache.mkdir(parents=True)
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HOME", str(home))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    lay_out(cache, "Qwen/Qwen2.5-7B", MAIN, QWEN)
    lay_out(cache, "Qwen/Qwen2.5-7B", TAGGED, {**QWEN, "num_hidden_layers": 4}, refs=("v1.0",))
    lay_out(cache, "acme/custom", MAIN, REMOTE)
    return cache


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def test_profile_a_hub_model_end_to_end(hub: Path, tmp_path: Path) -> None:
    """A fresh process, as a user runs it: the environment alone points it at the cache."""
    out = tmp_path / "runs"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "reportgen", "profile", "--models", "Qwen/Qwen2.5-7B", *TINY,
                           "--out", str(out)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stderr
    (run,) = list(iter_runs(out))
    record = json.loads((run.path / "combinations" / "qwen--qwen2.5-7b--forward--fp32--sdpa--b1--s16--tiny.json")
                        .read_text())
    jsonschema.Draft202012Validator(json_schema(COMBINATION_KIND)).validate(record)
    jsonschema.Draft202012Validator(json_schema(RUN_KIND)).validate(run.record)
    assert record["status"] == "ok", record["reason"]
    assert record["combination"]["model"] == "Qwen/Qwen2.5-7B"
    model = record["model"]
    assert model["name"] == "Qwen/Qwen2.5-7B" and model["model_type"] == "qwen2"
    assert model["source"]["kind"] == "hub" and model["source"]["id"] == "Qwen/Qwen2.5-7B"
    assert model["source"]["revision"] == MAIN and model["source"]["requested_revision"] is None
    assert model["source"]["config"] == QWEN  # the full config.json, so the run rebuilds without the Hub
    # --scale tiny shrank it as it shrinks a preset
    assert (model["num_layers"], model["hidden_size"], model["num_kv_heads"]) == (2, 64, 2)
    assert run.record["suite"]["spec"]["models"]["Qwen/Qwen2.5-7B"]["revision"] == MAIN


def test_revision_by_ref_and_by_commit(hub: Path) -> None:
    names = f"Qwen/Qwen2.5-7B,Qwen/Qwen2.5-7B@v1.0,Qwen/Qwen2.5-7B@{TAGGED}"
    suite = load_suite("tiny", parse_overrides({"models": names, "device": "cpu"}))
    sources = suite.sources
    assert sources["Qwen/Qwen2.5-7B"]["revision"] == MAIN
    assert sources["Qwen/Qwen2.5-7B@v1.0"]["revision"] == TAGGED
    assert sources["Qwen/Qwen2.5-7B@v1.0"]["requested_revision"] == "v1.0"
    assert sources[f"Qwen/Qwen2.5-7B@{TAGGED}"]["revision"] == TAGGED
    assert sources["Qwen/Qwen2.5-7B@v1.0"]["config"]["num_hidden_layers"] == 4
    assert sources["Qwen/Qwen2.5-7B"]["config"]["num_hidden_layers"] == 28
    ids = {c.id.split("--forward")[0] for c in suite.combinations() if c.mode == "forward"}
    assert ids == {"qwen--qwen2.5-7b", "qwen--qwen2.5-7b--at-v1.0", f"qwen--qwen2.5-7b--at-{TAGGED[:12]}"}
    # every combination carries its model's source to the worker
    assert all(c.source is sources[c.model] for c in suite.combinations())


def test_slugs_are_safe_and_distinct() -> None:
    names = ["Qwen/Qwen2.5-7B", "meta-llama/Llama-3.1-8B", "Qwen/Qwen2.5-7B@refs/pr/1", "Qwen/Qwen2.5-7B@refs-pr-1"]
    slugs = [model_slug(n) for n in names]
    assert slugs[:2] == ["qwen--qwen2.5-7b", "meta-llama--llama-3.1-8b"]
    assert len(set(slugs)) == len(slugs)
    assert all(set(s) <= set("abcdefghijklmnopqrstuvwxyz0123456789.-_ABCDEFGHIJKLMNOPQRSTUVWXYZ") for s in slugs)


def test_workers_need_no_hub_and_the_estimate_matches_the_config_file(hub: Path, tmp_path: Path) -> None:
    """What the suite resolved is all a worker needs: with the cache gone the model still
    builds, and the pre-flight estimate equals that of the same config given as a file."""
    import shutil

    from reportgen.profile import models, preflight

    (combo,) = [c for c in load_suite("tiny", parse_overrides({"models": "Qwen/Qwen2.5-7B", "device": "cpu",
                                                                "modes": "prefill", "seq_lens": "16",
                                                                "attn": "sdpa", "dtypes": "fp32"}))
                .combinations()]
    file = tmp_path / "qwen" / "config.json"
    file.parent.mkdir()
    file.write_text(json.dumps(QWEN))
    (as_file,) = load_suite("tiny", parse_overrides({"models": str(file), "device": "cpu", "modes": "prefill",
                                                     "seq_lens": "16", "attn": "sdpa", "dtypes": "fp32",
                                                     "scale": "reference"})).combinations()
    shutil.rmtree(hub)
    reference = type(combo)(**{**combo.as_dict(), "scale": "reference"}, source=combo.source)
    hub_estimate = preflight.estimate(reference, device="cpu")
    assert hub_estimate["parameters"] == preflight.estimate(as_file, device="cpu")["parameters"]
    assert hub_estimate["parameters"] > 7_000_000_000  # Qwen2.5-7B's shape: 7.6B
    built = models.build(combo, "cpu")
    try:
        assert built.info["source"]["revision"] == MAIN and built.info["num_layers"] == 2
    finally:
        models.free(built)


def _hub_error(kind: str) -> Exception:
    import httpx2
    from huggingface_hub import errors

    status = {"GatedRepoError": 403, "RepositoryNotFoundError": 404, "RevisionNotFoundError": 404}[kind]
    response = httpx2.Response(status, request=httpx2.Request("HEAD", "https://huggingface.co/x/resolve/main/config.json"))
    return getattr(errors, kind)(f"{status} Client Error.", response=response)


# case -> (--models, extra flags, Hub error raised instead of looking in the cache, fragments of the line)
BAD: dict[str, tuple[str, list[str], str | None, list[str]]] = {
    "offline-missing": ("acme/absent", [], None, ["acme/absent", "not in the local Hub cache", "HF_HUB_OFFLINE",
                                                  "run once online"]),
    "offline-unknown-revision": ("Qwen/Qwen2.5-7B@v9", [], None, ["Qwen/Qwen2.5-7B@v9", "revision 'v9'",
                                                                  "cached: main, v1.0"]),
    "unknown-id": ("acme/no-such-model", [], "RepositoryNotFoundError", ["acme/no-such-model",
                                                                         "no such model", "check the id"]),
    "unknown-revision": ("Qwen/Qwen2.5-7B@v9", [], "RevisionNotFoundError", ["no revision 'v9'"]),
    "gated": ("meta-llama/Llama-3.1-8B", [], "GatedRepoError", ["meta-llama/Llama-3.1-8B", "gated",
                                                                "set HF_TOKEN"]),
    "remote-code": ("acme/custom", [], None, ["acme/custom", "configuration_acme.AcmeConfig",
                                              "--trust-remote-code"]),
    "remote-code-trusted-offline": ("acme/custom", ["--trust-remote-code"], None,
                                    ["acme/custom", "configuration_acme.AcmeConfig", "could not be loaded",
                                     "configuration_acme.py is not in the local Hub cache"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_hub_model_is_one_line_exit_2_nothing_written(
    case: str, hub: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    name, flags, raised, fragments = BAD[case]
    if raised is not None:
        import huggingface_hub

        def refuse(*args: Any, **kwargs: Any) -> str:
            raise _hub_error(raised)

        monkeypatch.setattr(huggingface_hub, "hf_hub_download", refuse)
    out = tmp_path / "runs"
    assert cli.main(["profile", "--models", name, *flags, *TINY, "--out", str(out)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("reportgen: error: --models: ")
    for fragment in fragments:
        assert fragment in line
    assert not out.exists()


def test_suite_file_names_hub_models_and_trusts_remote_code(hub: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    suite_file = tmp_path / "hub.toml"
    suite_file.write_text('[[matrix]]\nmodels = ["acme/custom"]\nseq_lens = [16]\n')
    out = tmp_path / "runs"
    assert cli.main(["profile", "--suite", str(suite_file), "--device", "cpu", "--out", str(out)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(f"reportgen: error: {suite_file}: models: acme/custom:") and "trust_remote_code" in line
    suite_file.write_text('[settings]\ntrust_remote_code = true\n[[matrix]]\nmodels = ["acme/custom"]\nseq_lens = [16]\n')
    assert cli.main(["profile", "--suite", str(suite_file), "--device", "cpu", "--out", str(out)]) == 2
    assert "could not be loaded" in _one_line(capsys.readouterr().err)
    assert not out.exists()
    suite_file.write_text('[settings]\ntrust_remote_code = "yes"\n[[matrix]]\nmodels = ["bert-base"]\nseq_lens = [16]\n')
    assert cli.main(["profile", "--suite", str(suite_file), "--device", "cpu", "--list"]) == 2
    assert "settings.trust_remote_code: expected true or false" in _one_line(capsys.readouterr().err)
    suite_file.write_text('[[matrix]]\nmodels = ["Qwen/Qwen2.5-7B@v1.0"]\nseq_lens = [16]\n')
    assert cli.main(["profile", "--suite", str(suite_file), "--device", "cpu", "--list"]) == 0
    assert capsys.readouterr().out.split() == ["qwen--qwen2.5-7b--at-v1.0--forward--fp32--sdpa--b1--s16"]


def test_a_hub_model_keeps_other_suites_hashes(hub: Path) -> None:
    """Suites without Hub models hash as before (their runs resume); a new commit upstream
    is a new run."""
    plain = load_suite("tiny", parse_overrides({"device": "cpu"}))
    assert "trust_remote_code" not in plain.spec()["settings"] and "models" not in plain.spec()
    one = load_suite("tiny", parse_overrides({"models": "Qwen/Qwen2.5-7B", "device": "cpu"}))
    other = load_suite("tiny", parse_overrides({"models": "Qwen/Qwen2.5-7B@v1.0", "device": "cpu"}))
    moved = type(one)(**{**one.__dict__, "sources": {"Qwen/Qwen2.5-7B": {**one.sources["Qwen/Qwen2.5-7B"],
                                                                         "revision": TAGGED}}})
    assert len({one.hash, other.hash, moved.hash}) == 3


def test_a_repository_causal_lm_is_a_decoder() -> None:
    """A config class from a repository is unknown to transformers' mappings; its auto_map
    says which model classes it brings."""
    from transformers import PretrainedConfig

    from reportgen.profile import models

    config = PretrainedConfig()
    config.auto_map = dict(REMOTE["auto_map"])
    assert models.architecture(config) == "decoder"
    config.auto_map = {"AutoConfig": "c.C", "AutoModel": "m.M"}
    assert models.architecture(config) == "encoder"
