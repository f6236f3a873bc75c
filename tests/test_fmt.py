"""The display formatters in reportgen.fmt that the Validation page, the README's
bench block, the claim pages and the hardware facts print their numbers with."""

from __future__ import annotations

import math

import pytest

from reportgen import fmt
from reportgen.claims.metrics import format_range, format_value
from reportgen.render.machine import environment_facts
from reportgen.render.validation import figure_interval, figure_value, table_cell

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("value, text", [
    (None, fmt.DASH),
    (True, "yes"),
    (False, "no"),
    (0, "0"),
    (0.0, "0"),
    (-0.0, "0"),
    (7, "7"),
    (-1234567, "-1,234,567"),
    (12345.6, "12,346"),
    (-1000.0, "-1,000"),
    (999.4, "999"),
    (0.12345, "0.123"),
    (-0.012345, "-0.0123"),
    (1.0, "1"),
    (1e-05, "1e-05"),
    (1.5e20, "150,000,000,000,000,000,000"),
    (NAN, "nan"),
    (INF, "inf"),
    (-INF, "-inf"),
    ("a|b", "a|b"),
])
def test_sig(value: object, text: str) -> None:
    assert fmt.sig(value) == text


def test_sig_digits() -> None:
    assert fmt.sig(3.14159, 5) == "3.1416"
    assert fmt.sig(3.14159, 1) == "3"


@pytest.mark.parametrize("value, digits, text", [
    (None, 6, fmt.DASH),
    (0, 6, "0"),
    (2, 6, "2"),
    (2.5, 6, "2.5"),
    (-0.25, 6, "-0.25"),
    (1234.5678, 4, "1235"),
    (123456789, 4, "1.235e+08"),
    (0.000012345, 4, "1.234e-05"),
    (NAN, 4, "nan"),
    (INF, 6, "inf"),
])
def test_general(value: object, digits: int, text: str) -> None:
    assert fmt.general(value, digits) == text


@pytest.mark.parametrize("value, unit, text", [
    (None, "ms", fmt.DASH),
    (12.345, "ms", "12.3 ms"),
    (0, "ms", "0 ms"),
    (-2.5, "s", "-2.5 s"),
    (4096, "tokens", "4,096 tokens"),
    (1.5, "", "1.5"),
    (1.5, None, "1.5"),
    (NAN, "ms", "nan ms"),
])
def test_with_unit(value: object, unit: object, text: str) -> None:
    assert fmt.with_unit(value, unit) == text


def test_with_unit_number() -> None:
    assert fmt.with_unit(1.23456, "GB", fmt.fixed) == "1.23 GB"


def test_interval() -> None:
    assert fmt.interval(1.234, 5678.9) == "[1.23, 5,679]"
    assert fmt.interval(None, 2) == f"[{fmt.DASH}, 2]"
    assert fmt.interval(-0.5, 0) == "[-0.5, 0]"
    assert fmt.interval(0.1, 0.2, lambda x: fmt.pct(x, 2)) == "[10.00%, 20.00%]"
    assert fmt.interval(NAN, INF, lambda x: fmt.fixed(x, 4)) == f"[{fmt.DASH}, {fmt.DASH}]"


@pytest.mark.parametrize("value, text", [
    (None, fmt.DASH),
    (0, "0x"),
    (3.6666, "3.67x"),
    (1.0, "1x"),
    (-0.5, "-0.5x"),
    (12345.0, "1.23e+04x"),
    (NAN, "nanx"),
])
def test_ratio_sig(value: object, text: str) -> None:
    assert fmt.ratio_sig(value) == text


@pytest.mark.parametrize("value, text", [
    (None, fmt.DASH),
    (0, "0.0 us"),
    (0.1468, "146.8 us"),
    (-3.0, "-3000.0 us"),
    (1, "1 ms"),
    (12.3456, "12.35 ms"),
    (123456.0, "1.235e+05 ms"),
    (NAN, "nan ms"),
    (INF, "inf ms"),
])
def test_duration_ms(value: object, text: str) -> None:
    assert fmt.duration_ms(value) == text


@pytest.mark.parametrize("value, text", [
    (None, fmt.DASH),
    (0, "0 B"),
    (512, "512 B"),
    (1023.5, "1023.5 B"),
    (1024, "1 KiB"),
    (1.5 * 2 ** 30, "1.5 GiB"),
    (-3 * 2 ** 20, "-3 MiB"),
    (2 ** 50, "1.05e+06 GiB"),
    (NAN, "nan B"),
])
def test_nbytes_compact(value: object, text: str) -> None:
    assert fmt.nbytes_compact(value) == text


def test_nbytes_compact_keeps_fewer_zeros_than_nbytes() -> None:
    assert fmt.nbytes(1.5 * 2 ** 30) == "1.50 GiB"
    assert fmt.nbytes_compact(1.5 * 2 ** 30) == "1.5 GiB"


@pytest.mark.parametrize("value, text", [
    (None, fmt.DASH),
    (0, "0.0 GiB"),
    (80 * 10 ** 9, "74.5 GiB"),
    (2 ** 40, "1024.0 GiB"),
    (-(2 ** 30), "-1.0 GiB"),
    (NAN, fmt.DASH),
    (INF, fmt.DASH),
    (True, fmt.DASH),
])
def test_gib(value: object, text: str) -> None:
    assert fmt.gib(value) == text


def test_new_formatters_are_filters() -> None:
    for name in ("sig", "general", "ratio_sig", "duration_ms", "nbytes_compact", "gib", "level",
                 "shared_level", "ci_heading", "ci_level", "rests_on", "count"):
        assert fmt.FILTERS[name] is getattr(fmt, name)


@pytest.mark.parametrize("value, text", [
    (0.95, "95%"), (0.875, "87.5%"), (0.9375, "93.75%"), (0.75, "75%"), (None, fmt.DASH), (NAN, fmt.DASH),
])
def test_level(value: object, text: str) -> None:
    assert fmt.level(value) == text


@pytest.mark.parametrize("lo, hi, confidence, shared, text", [
    # the level beside the interval: the record's own, never a nominal 95%
    (227.4, 319.2, 0.875, None, "[227, 319] 87.5% CI"),
    (227.4, 319.2, 0.9375, None, "[227, 319] 93.75% CI"),
    (151.0, 186.8, 0.95, None, "[151, 187] 95% CI"),
    # a heading that states the shared level: the cell leaves it out, unless it differs
    (151.0, 186.8, 0.95, 0.95, "[151, 187]"),
    (227.4, 319.2, 0.875, 0.95, "[227, 319] 87.5% CI"),
    # no level recorded: the interval alone; no interval: a dash
    (1.0, 2.0, None, None, "[1.00, 2.00]"),
    (None, 2.0, 0.875, None, fmt.DASH),
    (1.0, NAN, 0.95, None, fmt.DASH),
])
def test_ci_level(lo: object, hi: object, confidence: object, shared: object, text: str) -> None:
    assert fmt.ci_level(lo, hi, confidence, shared) == text


def test_ci_level_number_and_decimals() -> None:
    assert fmt.ci_level(226.83, 319.44, 0.875, decimals=1) == "[226.8, 319.4] 87.5% CI"
    assert fmt.ci_level(0.5, 0.75, 0.75, number=fmt.pct) == "[50.0%, 75.0%] 75% CI"


def test_shared_level_and_heading() -> None:
    rows = [{"confidence": 0.95}, {"confidence": 0.95}, {"confidence": None}, {"confidence": NAN}]
    assert fmt.shared_level(rows) == 0.95
    assert fmt.shared_level([*rows, {"confidence": 0.875}]) is None
    assert fmt.shared_level([0.875, 0.875]) == 0.875
    assert fmt.shared_level([]) is None
    assert fmt.ci_heading(0.95, "ms") == "95% CI (ms)"
    assert fmt.ci_heading(0.875) == "87.5% CI"
    assert fmt.ci_heading(None, "ms") == "CI (ms)"


def test_rests_on() -> None:
    assert fmt.rests_on(0.95, 0.95) == ""
    assert fmt.rests_on(None) == ""
    assert fmt.rests_on(0.875, 0.875) == " (87.5% intervals)"
    assert fmt.rests_on(0.95, 0.75) == " (75% and 95% intervals)"


@pytest.mark.parametrize("n, word, plural, text", [
    (1, "layer", None, "1 layer"), (4, "layer", None, "4 layers"), (0, "layer", None, "0 layers"),
    (1024, "token", None, "1,024 tokens"), (1, "pass", "passes", "1 pass"), (2, "pass", "passes", "2 passes"),
    (None, "layer", None, f"{fmt.DASH} layers"),
])
def test_count(n: object, word: str, plural: str | None, text: str) -> None:
    assert fmt.count(n, word, plural) == text


# ---------------------------------------------------------------- the callers' choices


@pytest.mark.parametrize("fig, value, interval", [
    ({"value": None, "unit": "ms", "interval": None}, fmt.DASH, fmt.DASH),
    ({"value": 0.1234, "unit": "share", "interval": [0.1, 0.15]}, "12.34%", "[10.00%, 15.00%]"),
    ({"value": 0.5, "unit": "fraction", "interval": []}, "50.00%", fmt.DASH),
    ({"value": 1.023456, "unit": "ratio", "interval": [1.0, NAN]}, "1.0235", f"[1.0000, {fmt.DASH}]"),
    ({"value": 1234.5, "unit": "ms", "interval": [1000.0, 1500.25]}, "1,234 ms", "[1,000, 1,500]"),
    ({"value": 3, "unit": None, "interval": [2, 4]}, "3", "[2, 4]"),
    ({"value": 0.0, "unit": "s", "interval": [-0.001, 0.001]}, "0 s", "[-0.001, 0.001]"),
])
def test_figure_value_and_interval(fig: dict, value: str, interval: str) -> None:
    assert figure_value(fig) == value
    assert figure_interval(fig) == interval


def test_table_cell() -> None:
    assert table_cell([1, 2.5, None]) == f"1, 2.5, {fmt.DASH}"
    assert table_cell({"a": 1000.0, "b": True}) == "a: 1,000, b: yes"
    assert table_cell([]) == fmt.DASH
    assert table_cell("x|y") == "x&#124;y"


@pytest.mark.parametrize("value, unit, text", [
    (None, "ms", "-"),
    (0.356, "share", "35.6%"),
    (3.6666, "ratio", "3.67x"),
    (12.0, "kernels", "12"),
    (45.67, "percent", "45.7% of peak"),
    (0.1468, "ms", "146.8 us"),
    (12.3456, "ms", "12.35 ms"),
    (1.2 * 2 ** 30, "bytes", "1.2 GiB"),
    (100.0, "bytes", "100 B"),
    (0.0, "flops", "0"),
    (123456.0, "flops", "1.235e+05"),
    (-2.5, "flops", "-2.5"),
])
def test_claim_values(value: float | None, unit: str, text: str) -> None:
    assert format_value(value, unit) == text


@pytest.mark.parametrize("low, high, unit, text", [
    (0.301, 0.385, "share", "30.1\u201338.5%"),
    (1.5, 2.25, "ratio", "1.5\u20132.25x"),
    (30.12, 38.46, "percent", "30.1\u201338.5% of peak"),
    (0.5, 2.0, "ms", "500.0 us\u20132 ms"),
    (2 ** 20, 2 ** 30, "bytes", "1 MiB\u20131 GiB"),
    (-1.0, 1.0, "flops", "-1\u20131"),
])
def test_claim_ranges(low: float, high: float, unit: str, text: str) -> None:
    assert format_range(low, high, unit) == text


@pytest.mark.parametrize("ram, text", [
    (64 * 2 ** 30, "64.0 GiB"),
    (0, None),
    (-1, None),
    (True, None),
    ("64 GiB", None),
    (math.inf, None),
])
def test_memory_fact(ram: object, text: str | None) -> None:
    facts = {f["label"]: f["value"] for f in environment_facts({"host": {"ram_total_bytes": ram}})}
    assert facts.get("Memory (RAM)") == text


def test_a_ratio_interval_never_rounds_its_point_onto_an_edge() -> None:
    """The decimals grow (to four at most) until a point that differs from an end reads
    differently from it; equal values and the usual case keep two."""
    assert fmt.ratio_interval(0.8421, 0.8203, 0.8611) == "0.84x [0.82x, 0.86x]"
    assert fmt.ratio_interval(0.8421, 0.8203, 0.8441) == "0.842x [0.820x, 0.844x]"
    assert fmt.ratio_interval(1.0, 1.0, 1.02) == "1.00x [1.00x, 1.02x]"
    assert fmt.ratio_interval(1.00001, 1.0, 1.00002) == "1.0000x [1.0000x, 1.0000x]"
    assert fmt.ratio_interval(None, 0.9, 1.1) == fmt.DASH
    assert fmt.ratio_interval(0.9, None, 1.1) == f"0.90x [{fmt.DASH}, 1.10x]"
