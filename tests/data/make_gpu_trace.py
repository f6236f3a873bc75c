"""Write ``gpu_trace.json``: a small CUDA trace in the event format torch.profiler
exports (Kineto / CUPTI), for testing the device-side attribution without a GPU.

The field layout follows traces recorded by torch.profiler on CUDA devices (checked
against public recorded traces: HolisticTraceAnalysis ``tests/data/call_stack`` and
Kineto ``docs/traces``): host ``cpu_op``/``user_annotation`` complete events with
``External id``; ``cuda_runtime`` launches with ``correlation`` and ``cbid``; ``kernel``,
``gpu_memcpy`` and ``gpu_memset`` events on ``pid`` = device, ``tid`` = stream, sharing
the launch's ``correlation``; ``ac2g`` flow arrows; ``gpu_user_annotation`` mirrors of the
host ranges; ``[memory]`` instants with ``Device Type`` 1 for CUDA.

The timeline (microseconds from each iteration's start) is chosen so that every expected
number in ``tests/test_attribution.py`` can be worked out by hand; see the comments
there. Run ``python tests/data/make_gpu_trace.py`` to regenerate (deterministic).

It also writes ``gpu_trace_threads.json`` (``build_threads``): the same format with work
launched from three host threads onto three streams, as a forward that hands part of its
work to other threads records it; see ``THREADS`` below.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PID, TID = 4242, 4242
DEVICE_PID, STREAM, SIDE_STREAM = 0, 7, 8
ORIGIN = 1_700_000_000.0
ITERATION_STRIDE = 1000.0
MEM_BASE = 1_048_576

# (label, start, end) host ranges of one iteration, relative to the iteration start.
RANGES = [
    ("rg|embed|model.embed_tokens", 10, 40),
    ("rg|block|model.layers.0", 50, 400),
    ("rg|norm|model.layers.0.input_layernorm", 55, 75),
    ("rg|attn|model.layers.0.self_attn", 80, 250),
    ("rg|proj|model.layers.0.self_attn.qkv_proj", 85, 110),
    ("rg|proj|model.layers.0.self_attn.o_proj", 175, 200),
    ("rg|mlp|model.layers.0.mlp", 260, 390),
    ("rg|proj|model.layers.0.mlp.fc1", 262, 290),
    ("rg|act|model.layers.0.mlp.act_fn", 295, 310),
    ("rg|proj|model.layers.0.mlp.fc2", 315, 345),
    ("rg|head|lm_head", 410, 460),
]

GEMM = "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_warpgroupsize1x1x1"
# Outermost ops: (name, start, end, nested op or None, launches).
# A launch: (runtime name, start, end, device kind, device name, stream, dev start, dev dur).
OPS: list[tuple[str, float, float, str | None, list[tuple[Any, ...]]]] = [
    ("aten::embedding", 12, 30, "aten::index_select", [
        ("cudaLaunchKernel", 20, 25, "kernel", "indexSelectLargeIndex", STREAM, 30, 8),
        ("cudaMemsetAsync", 26, 29, "gpu_memset", "Memset (Device)", SIDE_STREAM, 60, 10)]),
    ("aten::layer_norm", 57, 72, "aten::native_layer_norm", [
        ("cudaLaunchKernel", 60, 65, "kernel", "vectorized_layer_norm_kernel", STREAM, 66, 6)]),
    ("aten::linear", 87, 108, "aten::addmm", [
        ("cudaLaunchKernel", 95, 100, "kernel", GEMM, STREAM, 100, 20)]),
    ("aten::scaled_dot_product_attention", 115, 160, "aten::_scaled_dot_product_flash_attention", [
        ("cudaLaunchKernel", 125, 130, "kernel", "flash_fwd_kernel", STREAM, 131, 30)]),
    ("aten::transpose", 165, 170, "aten::as_strided", []),
    ("aten::linear", 177, 198, "aten::addmm", [
        ("cudaLaunchKernel", 185, 190, "kernel", GEMM, STREAM, 191, 10)]),
    ("aten::add", 210, 225, None, [
        ("cudaLaunchKernel", 215, 220, "kernel", "vectorized_elementwise_kernel<add>", STREAM,
         221, 4)]),
    ("aten::linear", 264, 288, "aten::addmm", [
        ("cudaLaunchKernel", 270, 275, "kernel", GEMM, STREAM, 276, 25)]),
    ("aten::gelu", 297, 308, None, [
        ("cudaLaunchKernel", 300, 305, "kernel", "GeluCUDAKernelImpl", STREAM, 306, 5)]),
    ("aten::linear", 317, 343, "aten::addmm", [
        ("cudaLaunchKernel", 325, 330, "kernel", GEMM, STREAM, 331, 25)]),
    ("aten::add", 350, 365, None, [
        ("cudaLaunchKernel", 355, 360, "kernel", "vectorized_elementwise_kernel<add>", STREAM,
         361, 4)]),
    ("aten::linear", 412, 458, "aten::mm", [
        ("cudaLaunchKernel", 420, 425, "kernel", GEMM, STREAM, 426, 15),
        ("cudaMemcpyAsync", 440, 450, "gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", STREAM,
         451, 3)]),
]
# (ts, bytes, device type): allocations and frees inside an iteration.
MEMORY = [(13, 4096, 1), (14, 64, 0), (120, 8192, 1), (155, -8192, 1), (415, 16000, 1),
          (470, -4096, 1)]
CBID = {"cudaLaunchKernel": 211, "cudaMemcpyAsync": 41, "cudaMemsetAsync": 51,
        "cudaDeviceSynchronize": 165}


def build() -> dict[str, Any]:
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "ts": ORIGIN, "pid": PID, "tid": 0,
         "args": {"name": "python"}},
        {"name": "process_labels", "ph": "M", "ts": ORIGIN, "pid": PID, "tid": 0,
         "args": {"labels": "CPU"}},
        {"name": "process_name", "ph": "M", "ts": ORIGIN, "pid": DEVICE_PID, "tid": 0,
         "args": {"name": "python"}},
        {"name": "process_labels", "ph": "M", "ts": ORIGIN, "pid": DEVICE_PID, "tid": 0,
         "args": {"labels": "GPU 0"}},
        {"name": "thread_name", "ph": "M", "ts": ORIGIN, "pid": DEVICE_PID, "tid": STREAM,
         "args": {"name": "stream 7 "}},
        {"name": "thread_name", "ph": "M", "ts": ORIGIN, "pid": DEVICE_PID, "tid": SIDE_STREAM,
         "args": {"name": "stream 8 "}},
        {"name": "thread_name", "ph": "M", "ts": ORIGIN, "pid": PID, "tid": TID,
         "args": {"name": "thread 4242 (python)"}},
    ]
    ext = 0
    corr = 1000
    ev_idx = 0
    allocated = MEM_BASE

    def next_ids() -> tuple[int, int]:
        nonlocal ext, ev_idx
        ext += 1
        ev_idx += 1
        return ext, ev_idx

    def host(cat: str, name: str, ts: float, dur: float, **extra: Any) -> int:
        e, idx = next_ids()
        args: dict[str, Any] = {"External id": e, "Record function id": 0, "Ev Idx": idx}
        args.update(extra)
        events.append({"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": TID,
                       "ts": ts, "dur": dur, "args": args})
        return e

    def launch(owner_ext: int, spec: tuple[Any, ...], base: float) -> None:
        nonlocal corr
        runtime, start, end, kind, name, stream, dev_start, dev_dur = spec
        corr += 1
        events.append({"ph": "X", "cat": "cuda_runtime", "name": runtime, "pid": PID,
                       "tid": TID, "ts": base + start, "dur": float(end - start),
                       "args": {"External id": owner_ext, "cbid": CBID[runtime],
                                "correlation": corr}})
        events.append({"ph": "s", "id": corr, "pid": PID, "tid": TID, "ts": base + start,
                       "cat": "ac2g", "name": "ac2g"})
        args: dict[str, Any] = {"External id": owner_ext, "device": 0, "context": 1,
                                "stream": stream, "correlation": corr}
        if kind == "kernel":
            args = {"External id": owner_ext, "queued": 0, "device": 0, "context": 1,
                    "stream": stream, "correlation": corr, "registers per thread": 64,
                    "shared memory": 0, "blocks per SM": 0.25, "warps per SM": 1.0,
                    "grid": [33, 1, 1], "block": [128, 1, 1],
                    "est. achieved occupancy %": 6}
        elif kind == "gpu_memcpy":
            args.update({"bytes": 64000, "memory bandwidth (GB/s)": 21.3})
        else:
            args.update({"bytes": 4096, "memory bandwidth (GB/s)": 0.4})
        events.append({"ph": "X", "cat": kind, "name": name, "pid": DEVICE_PID, "tid": stream,
                       "ts": base + dev_start, "dur": float(dev_dur), "args": args})
        events.append({"ph": "f", "id": corr, "pid": DEVICE_PID, "tid": stream,
                       "ts": base + dev_start, "cat": "ac2g", "name": "ac2g", "bp": "e"})

    for iteration in range(2):
        base = ORIGIN + iteration * ITERATION_STRIDE
        host("user_annotation", f"ProfilerStep#{iteration + 1}", base - 5, 620.0)
        host("user_annotation", "rg|iteration", base, 500.0)
        for label, start, end in RANGES:
            e = host("user_annotation", label, base + start, float(end - start))
            events.append({"ph": "X", "cat": "gpu_user_annotation", "name": label,
                           "pid": DEVICE_PID, "tid": STREAM, "ts": base + start + 20,
                           "dur": float(end - start), "args": {"External id": e}})
        for name, start, end, nested, launches in OPS:
            owner = host("cpu_op", name, base + start, float(end - start),
                         **{"Input Dims": [[1, 16, 64], [64, 64]], "Input type": ["float", "float"]})
            if nested is not None:
                owner = host("cpu_op", nested, base + start + 1, float(end - start - 2))
            for spec in launches:
                launch(owner, spec, base)
        # The step's sync: a runtime call outside any op, launching nothing.
        corr += 1
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize",
                       "pid": PID, "tid": TID, "ts": base + 470, "dur": 28.0,
                       "args": {"cbid": CBID["cudaDeviceSynchronize"], "correlation": corr}})
        for ts, size, device_type in MEMORY:
            _, idx = next_ids()
            if device_type == 1:
                allocated += size
            events.append({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]",
                           "pid": PID, "tid": TID, "ts": base + ts,
                           "args": {"Total Reserved": 2 * MEM_BASE,
                                    "Total Allocated": allocated if device_type == 1 else 64,
                                    "Bytes": size, "Device Id": 0 if device_type == 1 else -1,
                                    "Device Type": device_type, "Addr": 139_000_000 + idx,
                                    "Ev Idx": idx}})
        # The step's reset between iterations: outside the range, so its kernel is not
        # part of any forward.
        reset = host("cpu_op", "aten::zero_", base + 560, 10.0)
        launch(reset, ("cudaLaunchKernel", 562, 566, "kernel", "FillFunctor", STREAM, 570, 2),
               base)
    events.sort(key=lambda e: (e["ts"], e.get("ph") == "M"))
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3",
                              "totalGlobalMem": 85024112640, "computeMajor": 9,
                              "computeMinor": 0, "maxThreadsPerBlock": 1024,
                              "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536,
                              "warpSize": 32, "sharedMemPerBlock": 49152, "numSms": 132}],
        "cupti_version": 24, "cuda_runtime_version": 12040, "cuda_driver_version": 12040,
        "record_shapes": 1, "profile_memory": 1, "with_flops": 1,
        "displayTimeUnit": "ms", "baseTimeNanoseconds": 1_700_000_000_000_000_000,
        "traceEvents": events,
        "traceName": "gpu_trace.json",
    }


# --- several host threads, several streams --------------------------------------------

MAIN, WORKER, HELPER = 4242, 4250, 4251  # host threads: the forward's, a labelled one, a bare one
S7, S8, S9 = 7, 8, 9                      # streams
THREAD_ITERATION_US = 300.0
# Per thread: ranges (label, start, end) and ops (name, start, end, launches); a launch is
# (runtime, start, end, device kind, device name, stream, device start, device duration).
# Microseconds from the iteration's start; the expected figures in tests/test_attribution.py
# are worked out from these by hand.
THREADS: dict[int, dict[str, list[tuple[Any, ...]]]] = {
    MAIN: {
        "ranges": [("rg|embed|model.embed_tokens", 10, 40),
                   ("rg|block|model.layers.0", 50, 250),
                   ("rg|attn|model.layers.0.self_attn", 55, 200),
                   ("rg|proj|model.layers.0.self_attn.qkv_proj", 60, 80),
                   ("rg|proj|model.layers.0.self_attn.o_proj", 160, 190)],
        "ops": [("aten::embedding", 12, 30, [
                    ("cudaLaunchKernel", 15, 18, "kernel", "indexSelectLargeIndex", S7, 40, 10)]),
                ("aten::linear", 62, 78, [
                    ("cudaLaunchKernel", 65, 68, "kernel", GEMM, S7, 80, 20)]),
                ("aten::scaled_dot_product_attention", 110, 150, [
                    ("cudaLaunchKernel", 115, 118, "kernel", "flash_fwd_kernel", S7, 120, 40)]),
                ("aten::linear", 162, 188, [
                    ("cudaLaunchKernel", 165, 168, "kernel", GEMM, S7, 175, 10)]),
                ("aten::add", 255, 265, [
                    ("cudaLaunchKernel", 258, 260, "kernel", "vectorized_elementwise_kernel<add>",
                     S7, 264, 4)])],
    },
    WORKER: {  # a module run on another thread, with its hooks' ranges on that thread
        "ranges": [("rg|head|lm_head", 120, 180)],
        "ops": [("aten::linear", 125, 170, [
                    ("cudaLaunchKernel", 130, 133, "kernel", GEMM, S8, 140, 30)]),
                # after the iteration's end: not part of the forward
                ("aten::zero_", 320, 330, [
                    ("cudaLaunchKernel", 321, 324, "kernel", "FillFunctor", S8, 325, 3)])],
    },
    HELPER: {  # a library's own thread: no ranges
        "ranges": [],
        "ops": [("aten::copy_", 200, 220, [
                    ("cudaMemcpyAsync", 205, 208, "gpu_memcpy", "Memcpy HtoD (Pinned -> Device)",
                     S8, 210, 6)]),
                ("aten::fill_", 230, 240, [
                    ("cudaLaunchKernel", 232, 235, "kernel", "FillFunctor", S8, 240, 4)])],
    },
}
# Device events with no launch record (a collective's kernel issued by another library):
# (name, stream, device start, duration); the second lies outside every iteration.
UNLINKED = [("ncclDevKernel_AllReduce_Sum_f32_RING_LL", S9, 250, 12),
            ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", S9, 400, 10)]


def build_threads() -> dict[str, Any]:
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "ts": ORIGIN, "pid": PID, "tid": 0,
         "args": {"name": "python"}},
        {"name": "process_name", "ph": "M", "ts": ORIGIN, "pid": DEVICE_PID, "tid": 0,
         "args": {"name": "python"}},
        {"name": "process_labels", "ph": "M", "ts": ORIGIN, "pid": DEVICE_PID, "tid": 0,
         "args": {"labels": "GPU 0"}},
        *({"name": "thread_name", "ph": "M", "ts": ORIGIN, "pid": DEVICE_PID, "tid": s,
           "args": {"name": f"stream {s} "}} for s in (S7, S8, S9)),
        *({"name": "thread_name", "ph": "M", "ts": ORIGIN, "pid": PID, "tid": t,
           "args": {"name": f"thread {t} (python)"}} for t in (MAIN, WORKER, HELPER)),
    ]
    ids = {"ext": 0, "corr": 5000}

    def host(cat: str, name: str, tid: int, ts: float, dur: float) -> int:
        ids["ext"] += 1
        events.append({"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": tid, "ts": ts,
                       "dur": float(dur), "args": {"External id": ids["ext"],
                                                   "Record function id": 0}})
        return ids["ext"]

    def launch(tid: int, owner: int, spec: tuple[Any, ...], base: float) -> None:
        runtime, start, end, kind, name, stream, dev_start, dev_dur = spec
        ids["corr"] += 1
        corr = ids["corr"]
        events.append({"ph": "X", "cat": "cuda_runtime", "name": runtime, "pid": PID,
                       "tid": tid, "ts": base + start, "dur": float(end - start),
                       "args": {"External id": owner, "cbid": CBID[runtime], "correlation": corr}})
        events.append({"ph": "s", "id": corr, "pid": PID, "tid": tid, "ts": base + start,
                       "cat": "ac2g", "name": "ac2g"})
        events.append({"ph": "X", "cat": kind, "name": name, "pid": DEVICE_PID, "tid": stream,
                       "ts": base + dev_start, "dur": float(dev_dur),
                       "args": {"External id": owner, "device": 0, "context": 1,
                                "stream": stream, "correlation": corr}})
        events.append({"ph": "f", "id": corr, "pid": DEVICE_PID, "tid": stream,
                       "ts": base + dev_start, "cat": "ac2g", "name": "ac2g", "bp": "e"})

    for iteration in range(2):
        base = ORIGIN + iteration * ITERATION_STRIDE
        host("user_annotation", f"ProfilerStep#{iteration + 1}", MAIN, base - 5, 400.0)
        host("user_annotation", "rg|iteration", MAIN, base, THREAD_ITERATION_US)
        for tid, spec in THREADS.items():
            for label, start, end in spec["ranges"]:
                host("user_annotation", label, tid, base + start, end - start)
            for name, start, end, launches in spec["ops"]:
                owner = host("cpu_op", name, tid, base + start, end - start)
                for item in launches:
                    launch(tid, owner, item, base)
        ids["corr"] += 1
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize",
                       "pid": PID, "tid": MAIN, "ts": base + 270, "dur": 28.0,
                       "args": {"cbid": CBID["cudaDeviceSynchronize"], "correlation": ids["corr"]}})
        for name, stream, dev_start, dev_dur in UNLINKED:
            # A correlation id that no runtime event on any host thread carries.
            events.append({"ph": "X", "cat": "kernel", "name": name, "pid": DEVICE_PID,
                           "tid": stream, "ts": base + dev_start, "dur": float(dev_dur),
                           "args": {"device": 0, "context": 1, "stream": stream,
                                    "correlation": 900_000 + iteration * 10 + dev_start % 7}})
    events.sort(key=lambda e: (e["ts"], e.get("ph") == "M"))
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
            "cuda_runtime_version": 12040, "displayTimeUnit": "ms",
            "baseTimeNanoseconds": 1_700_000_000_000_000_000, "traceEvents": events,
            "traceName": "gpu_trace_threads.json"}


def main() -> None:
    here = Path(__file__).parent
    (here / "gpu_trace.json").write_text(json.dumps(build(), indent=1) + "\n")
    (here / "gpu_trace_threads.json").write_text(json.dumps(build_threads(), indent=1) + "\n")


if __name__ == "__main__":
    main()
