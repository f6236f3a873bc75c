"""Device peaks the roofline and percent-of-peak figures divide by: dense FLOP/s per dtype
and memory bandwidth of each GPU, from its datasheet. Pure data (both sides).

Every figure is dense (no 2:4 structured sparsity): where a datasheet gives a tensor-core
rate "with sparsity", the dense rate is half of it, as the datasheets' own footnotes say.
``fp32`` is the non-tensor FP32 rate, since PyTorch does not use TF32 for fp32 matmuls by
default. A figure that could not be confirmed against a copy of the source is ``None``
and listed in the row's ``unconfirmed``; none is filled in from memory or derived from
clocks and core counts.

Each row names its datasheet (``source_title``, ``source_url``). The datasheets
themselves are PDFs and product pages that were not available to read here; each
figure was checked against a public page that reproduces the datasheet's table
(``checked``: figure -> where it was read). A CPU has no row: its peaks come from the
probe recorded in the run's environment (``reportgen.profile.env.cpu_probe``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

FIGURES = ("fp32", "tf32", "fp16", "bf16", "bandwidth")
"""Figures a row can hold: dense TFLOP/s per dtype, and memory bandwidth in GB/s."""


@dataclass(frozen=True)
class Peak:
    gpu: str
    match: str  # regex over the lower-cased device name as torch / NVML report it
    tflops: Mapping[str, float | None]  # dense, by reportgen dtype name (plus tf32)
    bandwidth_gb_s: float | None  # memory bandwidth, GB/s (10^9 bytes per second)
    source_title: str
    source_url: str
    checked: Mapping[str, str] = field(default_factory=dict)  # figure -> page read
    unconfirmed: str = ""  # why the None figures are None

    def figure(self, name: str) -> float | None:
        return self.bandwidth_gb_s if name == "bandwidth" else self.tflops.get(name)


_A100_TITLE = "NVIDIA A100 Tensor Core GPU datasheet"
_A100_URL = ("https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
             "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf")
# the datasheet's dense rates, read where a page reproduces its table
_A100_RATES = "https://glennklockwood.com/garden/processors/A100"
_A100_MEMORY = "https://www.thundercompute.com/blog/nvidia-a100-specs-full-guide"
_A100_FLOPS = {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0}
_H100_TITLE = "NVIDIA H100 Tensor Core GPU datasheet"
_H100_URL = "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
_H100_TABLE = "https://archive-lib.hpctech.co.jp/gpuproduct/nvidia-h100.html"
_NO_PCIE_RATES = ("the pages that reproduce the datasheet state these rates for the SXM "
                  "part; the PCIe card's rates were not confirmed")

# More specific rows come first: the first row whose pattern matches a name is its row.
PEAKS: tuple[Peak, ...] = (
    Peak("H200 SXM", r"h200(?!.*nvl)",
         {"fp32": None, "tf32": None, "fp16": 989.5, "bf16": 989.5}, 4800.0,
         "NVIDIA H200 Tensor Core GPU product page (specifications, H200 SXM)",
         "https://www.nvidia.com/en-us/data-center/h200/",
         {"fp16": "https://itkb.uw.cz/2026/06/nvidia-h200-vs-b300-precisions-cores.html",
          "bf16": "https://itkb.uw.cz/2026/06/nvidia-h200-vs-b300-precisions-cores.html",
          "bandwidth": "https://aiwiki.ai/wiki/nvidia_h200/raw"},
         "FP32 and TF32: no reproduction of the specification table was found"),
    Peak("H100 PCIe", r"h100.*pcie",
         {"fp32": 51.0, "tf32": 378.0, "fp16": 756.5, "bf16": 756.5}, 2000.0,
         _H100_TITLE + " (H100 PCIe column)", _H100_URL,
         {f: _H100_TABLE for f in FIGURES}),
    Peak("H100 SXM", r"h100(?!.*(pcie|nvl))",
         {"fp32": 67.0, "tf32": 494.5, "fp16": 989.5, "bf16": 989.5}, 3350.0,
         _H100_TITLE + " (H100 SXM column)", _H100_URL,
         {f: _H100_TABLE for f in FIGURES}),
    Peak("A100 80GB PCIe", r"a100.*(pcie.*80|80.*pcie)",
         {"fp32": None, "tf32": None, "fp16": None, "bf16": None}, 1935.0,
         _A100_TITLE + " (A100 80GB PCIe column)", _A100_URL,
         {"bandwidth": _A100_MEMORY}, _NO_PCIE_RATES),
    Peak("A100 40GB PCIe", r"a100.*pcie",
         {"fp32": None, "tf32": None, "fp16": None, "bf16": None}, 1555.0,
         _A100_TITLE + " (A100 40GB PCIe)", _A100_URL,
         {"bandwidth": _A100_MEMORY}, _NO_PCIE_RATES),
    Peak("A100 80GB SXM", r"a100.*(sxm.*80|80.*sxm)", dict(_A100_FLOPS), 2039.0,
         _A100_TITLE + " (A100 80GB SXM column)", _A100_URL,
         {"fp32": _A100_RATES, "tf32": _A100_RATES, "fp16": _A100_RATES, "bf16": _A100_RATES,
          "bandwidth": _A100_MEMORY}),
    Peak("A100 40GB SXM", r"a100.*sxm", dict(_A100_FLOPS), 1555.0,
         _A100_TITLE + " (A100 40GB SXM)", _A100_URL,
         {"fp32": _A100_RATES, "tf32": _A100_RATES, "fp16": _A100_RATES, "bf16": _A100_RATES,
          "bandwidth": _A100_MEMORY}),
    Peak("L4", r"\bl4\b",
         {"fp32": None, "tf32": 60.0, "fp16": 121.0, "bf16": None}, 300.0,
         "NVIDIA L4 Tensor Core GPU datasheet", "https://www.nvidia.com/en-us/data-center/l4/",
         {"tf32": "https://store.sourcecode.com/en-us/bg-bucket-compare/125/9820",
          "fp16": "https://grokipedia.com/page/NVIDIA_L4_vs_L40S",
          "bandwidth": "https://store.sourcecode.com/en-us/bg-bucket-compare/125/9820"},
         "FP32 and BF16: no reproduction of the datasheet's figures was found"),
    Peak("A10G", r"a10g",
         {"fp32": None, "tf32": None, "fp16": None, "bf16": None}, None,
         "Amazon EC2 G5 instances (NVIDIA publishes no datasheet for the A10G, a variant "
         "made for AWS)", "https://aws.amazon.com/ec2/instance-types/g5/",
         {}, "no datasheet with the A10G's own rates or bandwidth was found; the A10's are "
         "not the A10G's"),
    Peak("T4", r"\bt4\b",
         {"fp32": 8.1, "tf32": None, "fp16": 65.0, "bf16": None}, 320.0,
         "NVIDIA T4 Tensor Core GPU datasheet",
         "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/"
         "t4-tensor-core-datasheet-951643.pdf",
         {"fp32": "https://geektopia.es/es/technology/2018/09/13/noticias/"
                  "nvidia-presenta-la-nueva-tesla-t4-basada-en-turing-orientada-a-inteligencia-artificial.html",
          "fp16": "https://geektopia.es/es/technology/2018/09/13/noticias/"
                  "nvidia-presenta-la-nueva-tesla-t4-basada-en-turing-orientada-a-inteligencia-artificial.html",
          "bandwidth": "https://sysrqmts.com/en/gpus/nvidia/tesla/t4"},
         "TF32 and BF16: Turing has no tensor-core rate for them"),
    Peak("V100 SXM2", r"v100.*sxm",
         {"fp32": 15.7, "tf32": None, "fp16": 125.0, "bf16": None}, 900.0,
         "NVIDIA Tesla V100 GPU datasheet (V100 SXM2 column)",
         "https://images.nvidia.com/content/technologies/volta/pdf/"
         "tesla-volta-v100-datasheet-letter-fnl-web.pdf",
         {"fp32": "https://grokipedia.opelly.me/articles/nvidia-tesla-v100",
          "fp16": "https://developer.nvidia.com/programming-tensor-cores-cuda-9-0",
          "bandwidth": "https://m.leiphone.com/category/iot/45VPDfmdFFzqdOxR.html"},
         "TF32 and BF16: Volta has no tensor-core rate for them"),
    Peak("V100 PCIe", r"v100",
         {"fp32": None, "tf32": None, "fp16": None, "bf16": None}, None,
         "NVIDIA Tesla V100 GPU datasheet (V100 PCIe column)",
         "https://images.nvidia.com/content/technologies/volta/pdf/"
         "tesla-volta-v100-datasheet-letter-fnl-web.pdf",
         {}, "no reproduction of the PCIe column was found (FP32, tensor rate, bandwidth)"),
)


def peak_row(gpu_name: str | None) -> Peak | None:
    """The row of a device name as torch or NVML reports it ("NVIDIA A100-SXM4-80GB")."""
    if not gpu_name:
        return None
    name = gpu_name.lower()
    for row in PEAKS:
        if re.search(row.match, name):
            return row
    return None


def peak_flops(gpu_name: str | None, dtype: str) -> float | None:
    """Peak dense FLOP/s (not TFLOP/s) of ``gpu_name`` in ``dtype``; None for an unknown
    GPU or a figure not confirmed."""
    row = peak_row(gpu_name)
    tflops = row.tflops.get(dtype) if row is not None else None
    return None if tflops is None else tflops * 1e12


def peak_bandwidth(gpu_name: str | None) -> float | None:
    """Memory bandwidth in bytes per second; None for an unknown GPU or a figure not
    confirmed."""
    row = peak_row(gpu_name)
    gb_s = row.bandwidth_gb_s if row is not None else None
    return None if gb_s is None else gb_s * 1e9


def table_rows() -> list[dict[str, object]]:
    """The table as plain rows, for the page that shows it and its downloads."""
    return [{"gpu": r.gpu, **{f"{d}_tflops": r.tflops.get(d) for d in FIGURES[:-1]},
             "bandwidth_gb_s": r.bandwidth_gb_s, "source": r.source_title, "url": r.source_url,
             "checked": "; ".join(f"{k}: {v}" for k, v in r.checked.items()),
             "unconfirmed": r.unconfirmed or None} for r in PEAKS]
