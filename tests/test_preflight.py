"""The pre-flight memory check: exact parameter counts from the meta device, the analytic
working set, what is available (recorded /proc/meminfo and cgroup files), and the Skip a
combination that cannot fit raises. CPU only, no network."""

from __future__ import annotations

import contextlib
import gc
import json
import re
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from reportgen.errors import Skip
from reportgen.profile import building, preflight, shrink
from reportgen.traffic import attention_activation_bytes

GIB = 1024**3

# a recorded /proc/meminfo (24 GiB host), MemAvailable edited to 21.9 GiB
MEMINFO_21_9 = """\
MemTotal:       24683584 kB
MemFree:        22585424 kB
MemAvailable:   22963814 kB
Buffers:          194788 kB
Cached:          1393440 kB
SwapCached:            0 kB
Active:           694184 kB
"""
AVAILABLE_21_9 = 22963814 * 1024


def combo(model: str = "llama-small", mode: str = "forward", **kw: Any) -> SimpleNamespace:
    fields = {"model": model, "scale": "tiny", "mode": mode, "dtype": "fp32", "attn_implementation": "sdpa",
              "batch_size": 2, "seq_len": 12, "device": "cpu"}
    fields.update(kw)
    return SimpleNamespace(**fields)


@pytest.fixture
def host(tmp_path: Path) -> dict[str, Path]:
    """Injected paths: a recorded meminfo with 21.9 GiB available and no cgroup limit."""
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(MEMINFO_21_9)
    cgroup = tmp_path / "cgroup"
    cgroup.mkdir()
    return {"meminfo_path": meminfo, "cgroup_root": cgroup, "self_cgroup_path": tmp_path / "no-such-file"}


def test_format_gib() -> None:
    assert preflight.format_gib(27 * GIB) == "27.0 GiB"
    assert preflight.format_gib(AVAILABLE_21_9) == "21.9 GiB"
    assert preflight.format_gib(0) == "0.0 GiB"


# --- the estimate ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["bert-base", "gpt2", "t5-small", "llama-small", "attention-micro"])
def test_meta_parameter_count_equals_the_built_model(name: str) -> None:
    c = combo(name, attn_implementation="naive" if name == "attention-micro" else "sdpa")
    est = preflight.estimate(c)
    built = building.build(c, "cpu")
    try:
        real = sum(p.numel() for p in built.model.parameters())
        real_bytes = sum(t.numel() * t.element_size() for t in [*built.model.parameters(), *built.model.buffers()])
    finally:
        building.free(built)
    assert est["parameters"] == real
    assert est["parts"]["weights"] == real_bytes
    assert est["method"] == "meta-device parameter count + analytic working set"
    assert est["estimate_bytes"] == sum(est["parts"].values())
    assert set(est["parts"]) >= {"weights", "kv_cache", "activations", "attention_scores", "profiler", "runtime"}


@contextlib.contextmanager
def _built_on_meta(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[set[str]]]:
    """The device types of the parameters of each model estimate() builds: a reference
    model's count costs no memory and no time only when they are all on meta."""
    built: list[set[str]] = []
    real = preflight._meta_model

    def spy(combo: Any) -> Any:
        model, *rest = real(combo)
        built.append({p.device.type for p in model.parameters()})
        return (model, *rest)

    monkeypatch.setattr(preflight, "_meta_model", spy)
    yield built


def test_tied_weights_count_once_and_their_build_transient_is_counted() -> None:
    # GPT-2 ties its LM head to the token embedding: built once, allocated twice
    est = preflight.estimate(combo("gpt2", scale="reference", mode="prefill", seq_len=128, batch_size=1))
    assert est["parameters"] == 124_439_808
    assert est["parts"]["build_transient"] == 50257 * 768 * 4
    assert preflight.estimate(combo("bert-base", scale="reference"))["parts"]["build_transient"] == 0


def test_reference_llama_does_not_fit_21_9_gib(host: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    preflight.estimate(combo("llama"))  # tiny: loads the llama modeling code, as the worker's build would
    c = combo("llama", scale="reference", batch_size=1, seq_len=128)  # LlamaConfig() defaults: 6.7B
    with _built_on_meta(monkeypatch) as built:
        est = preflight.estimate(c)
    assert built == [{"meta"}]  # counted from shapes: not a byte of the 27 GB of weights allocated
    assert est["parameters"] == 6_738_415_616
    assert est["estimate_bytes"] > 20 * GIB
    assert est["parts"]["weights"] >= est["parameters"] * 4

    # too big whole: measured with the most of its layers that fit, and the section says why
    section = preflight.check(c, "cpu", **host)
    message = section["reduced"]["reason"]
    match = re.fullmatch(r"measured (\d+) of 32 layers: the whole model needs ~(\d+\.\d) GiB, 21\.9 GiB "
                         r"available \(host memory\)", message)
    assert match, message
    assert float(match.group(2)) == round(est["estimate_bytes"] / GIB, 1) > 20
    layers = int(match.group(1))
    assert section["reduced"] == {"layers": layers, "experts": None, "reason": message}
    assert section["fits"] is True
    assert section["requested_estimate_bytes"] == est["estimate_bytes"]
    assert section["estimate_bytes"] <= preflight.SAFETY_MARGIN * AVAILABLE_21_9
    more = preflight.estimate(combo("llama", scale="reference", batch_size=1, seq_len=128, layers=layers + 1))
    assert more["estimate_bytes"] > preflight.SAFETY_MARGIN * AVAILABLE_21_9  # the most that fit
    assert section["available_bytes"] == AVAILABLE_21_9
    assert str(host["meminfo_path"]) in section["available_source"]
    assert section["parameters"] < est["parameters"]
    assert set(section) == {"estimate_bytes", "parts", "parameters", "available_bytes", "available_source",
                            "reusable_bytes", "fits", "method", "requested_estimate_bytes", "reduced"}
    json.dumps(section)
    # heap a warm worker freed and keeps counts as available to it: with 8 GiB of it, it fits
    roomy = preflight.check(c, "cpu", reusable_bytes=8 * GIB, **host)
    assert roomy["fits"] is True and roomy["available_bytes"] == AVAILABLE_21_9 + 8 * GIB
    assert roomy["reusable_bytes"] == 8 * GIB and "8.0 GiB this worker holds free" in roomy["available_source"]


def test_check_passes_a_small_model(host: dict[str, Path]) -> None:
    section = preflight.check(combo("gpt2"), "cpu", **host)
    assert section["fits"] is True
    assert section["available_bytes"] == AVAILABLE_21_9
    assert 0 < section["estimate_bytes"] < 2 * GIB


def test_a_70b_config_file_is_counted_without_allocating_its_weights(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = {"model_type": "llama", "hidden_size": 8192, "num_hidden_layers": 80, "num_attention_heads": 64,
              "num_key_value_heads": 8, "intermediate_size": 28672, "vocab_size": 128256}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    preflight.estimate(combo("llama"))  # modeling code loaded
    with _built_on_meta(monkeypatch) as built:
        est = preflight.estimate(combo(str(path), scale="reference", dtype="bf16", batch_size=1, seq_len=128))
    assert built == [{"meta"}]
    assert est["parameters"] == 70_553_706_496
    assert est["parts"]["weights"] >= est["parameters"] * 2


def test_kv_cache_for_decode_not_for_forward() -> None:
    forward = preflight.estimate(combo("llama-small", "forward"))
    decode = preflight.estimate(combo("llama-small", "decode"))
    prefill = preflight.estimate(combo("llama-small", "prefill"))
    assert forward["parts"]["kv_cache"] == 0
    # tiny llama-small: 2 layers, 2 kv heads (GQA kept) of 16; one layer's transient copy
    layers, kv_heads, head_dim, batch, length = 2, 2, 16, 2, 12
    assert decode["parts"]["kv_cache"] == 2 * (layers + 1) * kv_heads * head_dim * (length + 1) * batch * 4
    assert prefill["parts"]["kv_cache"] == decode["parts"]["kv_cache"]


def test_encoder_decoder_cache_includes_cross_attention() -> None:
    c = combo("t5-small", "decode")  # build skips it (decode is a causal LM's), the arithmetic holds
    est = preflight.estimate(c)
    layers, heads, head_dim, batch, length = 2, 4, 16, 2, 12
    self_attn = 2 * (layers + 1) * heads * head_dim * (length + 1) * batch * 4
    cross = 2 * layers * heads * head_dim * length * batch * 4
    assert est["parts"]["kv_cache"] == self_attn + cross


def test_attention_scores_follow_measure() -> None:
    eager = combo("gpt2", attn_implementation="eager", seq_len=64)
    sdpa = combo("gpt2", attn_implementation="sdpa", seq_len=64)
    est_eager, est_sdpa = preflight.estimate(eager), preflight.estimate(sdpa)
    info = {"num_heads": shrink.TINY_HEADS}
    assert est_eager["parts"]["attention_scores"] == attention_activation_bytes(info, eager) > 0
    assert est_sdpa["parts"]["attention_scores"] == 0
    assert est_eager["parts"]["activations"] > est_sdpa["parts"]["activations"]  # the transient copy
    # decode: the prefill that fills the cache is the larger pass
    decode = combo("gpt2", "decode", attn_implementation="eager", seq_len=64)
    assert preflight.estimate(decode)["parts"]["attention_scores"] == attention_activation_bytes(
        info, combo("gpt2", "prefill", attn_implementation="eager", seq_len=64))
    for variant, copies in (("naive", 2), ("naive-inplace", 1), ("sdpa-math", 2), ("sdpa-flash", 0)):
        c = combo("attention-micro", attn_implementation=variant, seq_len=256, batch_size=1)
        assert preflight.estimate(c)["parts"]["attention_scores"] == 16 * 256 * 256 * 4 * copies


def test_estimate_takes_a_dict_and_cuda_leaves_the_profiler_on_the_host() -> None:
    c = combo("gpt2")
    est = preflight.estimate(vars(c))
    assert est == preflight.estimate(c)
    on_gpu = preflight.estimate(c, device="cuda")
    assert on_gpu["parts"]["profiler"] == 0
    assert on_gpu["parts"]["weights"] == est["parts"]["weights"]


# --- what is available -----------------------------------------------------------------


def test_available_reads_meminfo(host: dict[str, Path]) -> None:
    avail, source = preflight.available("cpu", **host)
    assert avail == AVAILABLE_21_9
    assert "MemAvailable" in source
    assert preflight.meminfo_available("MemTotal: 10 kB\n") is None


def test_available_respects_a_cgroup_v2_limit(host: dict[str, Path]) -> None:
    root = host["cgroup_root"]
    (root / "memory.max").write_text("4294967296\n")
    (root / "memory.current").write_text("1610612736\n")
    (root / "memory.stat").write_text("anon 1000\nfile 600000000\ninactive_file 536870912\nactive_file 1\n")
    avail, source = preflight.available("cpu", **host)
    assert avail == 4 * GIB - 1610612736 + 536870912  # limit - usage + reclaimable cache
    assert "cgroup v2" in source and "memory.max" in source
    (root / "memory.max").write_text("max\n")
    assert preflight.available("cpu", **host) == (AVAILABLE_21_9, f"{host['meminfo_path']} MemAvailable")


def test_available_follows_this_process_cgroup_v1(host: dict[str, Path], tmp_path: Path) -> None:
    own = host["cgroup_root"] / "memory" / "jobs" / "42"
    own.mkdir(parents=True)
    (own / "memory.limit_in_bytes").write_text(f"{2 * GIB}\n")
    (own / "memory.usage_in_bytes").write_text(f"{GIB}\n")
    # the mount root: no limit (v1 writes 2**63 rounded down to a page)
    (host["cgroup_root"] / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (host["cgroup_root"] / "memory" / "memory.usage_in_bytes").write_text(f"{5 * GIB}\n")
    cgroup_file = tmp_path / "self-cgroup"
    cgroup_file.write_text("9:name=systemd:/\n4:memory:/jobs/42\n0::/\n")
    avail, source = preflight.available("cpu", **{**host, "self_cgroup_path": cgroup_file})
    assert avail == GIB
    assert "cgroup v1" in source and "jobs/42" in source


def test_a_cgroup_limit_turns_into_a_skip(host: dict[str, Path]) -> None:
    root = host["cgroup_root"]
    (root / "memory.max").write_text(f"{256 * 1024**2}\n")
    (root / "memory.current").write_text("0\n")
    with pytest.raises(Skip, match=r"^needs ~\d+\.\d GiB, 0\.2 GiB available") as caught:
        preflight.check(combo("gpt2"), "cpu", **host)
    assert "cgroup v2" in caught.value.preflight["available_source"]  # type: ignore[attr-defined]


def test_available_on_this_host() -> None:
    avail, source = preflight.available("cpu")
    assert avail > 0 and source


# --- against a real forward ------------------------------------------------------------


def _status_bytes(key: str) -> int:
    match = re.search(key + r":\s+(\d+)\s*kB", Path("/proc/self/status").read_text())
    assert match, key
    return int(match.group(1)) * 1024


def _reset_peak_rss() -> bool:
    """Writing 5 to /proc/self/clear_refs resets VmHWM to the current RSS (Linux >= 4.0)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return _status_bytes("VmHWM") <= _status_bytes("VmRSS") + (4 << 20)


def test_estimate_covers_a_real_tiny_forward() -> None:
    c = combo("gpt2", attn_implementation="eager", batch_size=2, seq_len=512)
    est = preflight.estimate(c)
    building.free(building.build(combo("gpt2", attn_implementation="eager"), "cpu"))  # modeling code loaded
    gc.collect()
    status = Path("/proc/self/status")
    if not status.exists() or not _reset_peak_rss():
        built = building.build(c, "cpu")
        try:
            params = sum(p.numel() for p in built.model.parameters())
        finally:
            building.free(built)
        assert est["estimate_bytes"] >= params * 4
        pytest.skip("cannot reset the peak RSS here (/proc/self/clear_refs), so the forward's peak is not measurable")
    base = _status_bytes("VmRSS")
    built = building.build(c, "cpu")  # builds and runs one trial forward
    try:
        built.step()
        params = sum(p.numel() for p in built.model.parameters())
        increase = _status_bytes("VmHWM") - base
    finally:
        building.free(built)
    assert est["estimate_bytes"] >= params * 4
    assert est["estimate_bytes"] >= increase
    # and without the runtime allowance too: tensors and profiler allowance cover it
    assert est["estimate_bytes"] - est["parts"]["runtime"] >= increase


def test_estimate_does_not_touch_the_global_rng() -> None:
    torch.manual_seed(3)
    expected = torch.rand(2)
    torch.manual_seed(3)
    preflight.estimate(combo("llama-small"))
    assert torch.equal(torch.rand(2), expected)


def test_a_model_meta_cannot_build_is_not_refused(host: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(combo: Any) -> Any:
        raise NotImplementedError("Cannot copy out of meta tensor; no data!")

    monkeypatch.setattr(preflight, "_meta_model", broken)
    section = preflight.check(combo("gpt2"), "cpu", **host)
    assert section["fits"] is None and section["estimate_bytes"] is None
    assert "NotImplementedError: Cannot copy out of meta tensor" in section["method"]
    assert section["available_bytes"] == AVAILABLE_21_9


def test_unknown_model_is_a_user_error(host: dict[str, Path]) -> None:
    from reportgen.errors import UserError

    with pytest.raises(UserError, match="unknown model"):
        preflight.check(combo("no-such-model-xyz"), "cpu", **host)


def test_the_cuda_path_reads_free_device_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU's free memory as torch.cuda.mem_get_info reports it (recorded H200 figures:
    139.8 GiB total, 2.5 GiB free after another process took the rest)."""
    total, free = int(139.8 * GIB), int(2.5 * GIB)
    asked: list[int] = []
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda index: asked.append(index) or (free, total))
    assert preflight.available("cuda") == (free, "torch.cuda.mem_get_info(cuda:0) free")
    assert preflight.available("cuda:3") == (free, "torch.cuda.mem_get_info(cuda:3) free")
    assert asked == [0, 3]
    c = combo("llama", scale="reference", batch_size=1, seq_len=128)
    section = preflight.check(c, "cuda", reusable_bytes=8 * GIB)  # a CPU worker's heap is no GPU memory
    # the whole model does not fit; one of its layers at full width does
    assert re.fullmatch(r"measured 1 of 32 layers: the whole model needs ~\d+\.\d GiB, 2\.5 GiB available "
                        r"\(GPU 0 free memory\)", section["reduced"]["reason"])
    assert section["available_bytes"] == free and section["reusable_bytes"] == 0
    assert section["parts"]["profiler"] == 0  # the trace lives in host memory
