"""The GPU peaks table: every row cites its datasheet, every figure says where it was
checked, and device names as torch and NVML report them find the right row."""

from __future__ import annotations

import pytest

from reportgen import peaks

REQUIRED = ("A100 40GB SXM", "A100 80GB SXM", "A100 40GB PCIe", "A100 80GB PCIe", "H100 SXM",
            "H100 PCIe", "H200 SXM", "L4", "A10G", "T4", "V100 SXM2", "V100 PCIe")


def test_every_row_cites_its_datasheet_and_every_figure_where_it_was_checked() -> None:
    assert {r.gpu for r in peaks.PEAKS} >= set(REQUIRED)
    for row in peaks.PEAKS:
        assert row.source_title.strip() and row.source_url.startswith("https://"), row.gpu
        for figure in peaks.FIGURES:
            value = row.figure(figure)
            if value is None:
                assert row.unconfirmed, f"{row.gpu} {figure}: a blank figure says why"
            else:
                assert value > 0
                assert row.checked.get(figure, "").startswith("https://"), f"{row.gpu} {figure}"
        assert set(row.checked) <= set(peaks.FIGURES)


def test_dense_rates_are_half_the_sparse_ones_and_fp16_matches_bf16_where_both_are_known() -> None:
    h100 = peaks.peak_row("NVIDIA H100 80GB HBM3")
    assert h100 is not None and h100.tflops["bf16"] == 1979 / 2 and h100.tflops["tf32"] == 989 / 2
    for row in peaks.PEAKS:
        fp16, bf16 = row.tflops.get("fp16"), row.tflops.get("bf16")
        if fp16 is not None and bf16 is not None:
            assert fp16 == bf16, row.gpu


@pytest.mark.parametrize(("name", "gpu", "dtype", "tflops", "gb_s"), [
    ("NVIDIA H100 80GB HBM3", "H100 SXM", "bf16", 989.5, 3350.0),
    ("NVIDIA H100 PCIe", "H100 PCIe", "fp16", 756.5, 2000.0),
    ("NVIDIA H200", "H200 SXM", "bf16", 989.5, 4800.0),
    ("NVIDIA H200", "H200 SXM", "fp32", None, 4800.0),
    ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM", "fp16", 312.0, 2039.0),
    ("NVIDIA A100-SXM4-40GB", "A100 40GB SXM", "fp32", 19.5, 1555.0),
    ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe", "bf16", None, 1935.0),
    ("NVIDIA A100-PCIE-40GB", "A100 40GB PCIe", "fp32", None, 1555.0),
    ("NVIDIA L4", "L4", "fp16", 121.0, 300.0),
    ("NVIDIA A10G", "A10G", "fp16", None, None),
    ("Tesla T4", "T4", "fp32", 8.1, 320.0),
    ("Tesla T4", "T4", "bf16", None, 320.0),
    ("Tesla V100-SXM2-16GB", "V100 SXM2", "fp16", 125.0, 900.0),
    ("Tesla V100-PCIE-32GB", "V100 PCIe", "fp32", None, None),
])
def test_lookup_by_device_name(name: str, gpu: str, dtype: str, tflops: float | None,
                               gb_s: float | None) -> None:
    row = peaks.peak_row(name)
    assert row is not None and row.gpu == gpu
    flops = peaks.peak_flops(name, dtype)
    assert flops == (None if tflops is None else pytest.approx(tflops * 1e12))
    bandwidth = peaks.peak_bandwidth(name)
    assert bandwidth == (None if gb_s is None else pytest.approx(gb_s * 1e9))


@pytest.mark.parametrize("name", ["NVIDIA H200 NVL", "NVIDIA H100 NVL", "NVIDIA A100", "Some Future GPU",
                                  "", None])
def test_unknown_or_ambiguous_devices_have_no_peaks(name: str | None) -> None:
    assert peaks.peak_row(name) is None
    assert peaks.peak_flops(name, "bf16") is None and peaks.peak_bandwidth(name) is None


def test_table_rows_for_the_page() -> None:
    rows = peaks.table_rows()
    assert [r["gpu"] for r in rows] == [p.gpu for p in peaks.PEAKS]
    assert all(str(r["url"]).startswith("https://") for r in rows)
