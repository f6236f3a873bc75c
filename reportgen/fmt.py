"""Display formatting and escaping for the Markdown templates: the one formatter set.

Numbers are stored at full precision and rounded only here. Run data placed into a page is
escaped here too, one function per place it goes (`markdown_text`, `markdown_cell`,
`html_text`): every value a template prints goes through one of them unless it is a
:class:`Raw` built by reportgen's own code.
It imports nothing of reportgen, so the claim checks (a claim's threshold in words) use it
as the pages do, without reaching up to the render side.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from markupsafe import Markup
from markupsafe import escape as escape_html

DASH = "–"


class Raw(Markup):
    """Text built by the renderer itself (a link target, chart JSON, a code block).

    A ``Markup`` so that Jinja's autoescaping passes it, and macro output, through as is.
    """


# -- escaping: run data placed into a page, one function per place it goes ---------------
#
# HTML's specials, and Markdown's that could start emphasis, code, a link or image, a
# heading, a table cell, an attribute list, strikethrough or math: each becomes a numeric
# entity, which renders as the character itself in every context (paragraphs, headings,
# table cells, attribute lists, raw HTML).
_MARKDOWN = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}
                          | {c: f"&#{ord(c)};" for c in "\\`*_{}[]#|~$"})


# what starts a block at the start of a line (a list item, a setext heading's underline, a
# rule): the value may be placed there; a lone "-" (a template's own "no value") is left be
_BLOCK_START = re.compile(r"^( ?(?:\d+(?=[.)]))?)([-+=.)])(?=\s|[-=])")


def markdown_text(value: object) -> str:
    """Run data as inert text in Markdown (a paragraph, a list item, a heading, a link's
    text): no character of it starts Markdown or HTML, and whitespace runs become one space
    (a newline would end a list item or start a block). Markup built by reportgen's own
    code passes as it is; None is empty."""
    if isinstance(value, Markup):
        return str(value)
    if value is None:
        return ""
    text = re.sub(r"\s+", " ", str(value)).translate(_MARKDOWN)
    return _BLOCK_START.sub(lambda m: f"{m.group(1)}&#{ord(m.group(2))};", text, count=1)


def markdown_cell(value: object) -> str:
    """Run data as one cell of a Markdown table: `markdown_text`, whose ``|`` is an entity
    (the cell is not split) and whose newlines are spaces (the row is not ended); a missing
    value (None) is a dash."""
    return DASH if value is None else markdown_text(value)


def html_text(value: object) -> str:
    """Run data as HTML text or a double-quoted attribute's value: ``& < > " '`` as
    entities (Markdown is not read there)."""
    return str(escape_html(str(value)))


def url(path: str) -> Raw:
    """A link target from slugs and run paths, or an http(s) address; anything unusual
    (a parenthesis, quote, space or angle bracket would end a Markdown link early) is
    percent-encoded."""
    if path.startswith(("https://", "http://")):
        return Raw(quote(path, safe=":/?#[]@!$&*+,;=%-._~"))
    return Raw(quote(path, safe="/._-~+"))


def _finite(x: Any) -> float | None:
    if x is None or isinstance(x, bool):
        return None
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def num(x: Any, digits: int = 3) -> str:
    """``digits`` significant digits, never scientific notation for 1e-3 .. 1e6."""
    f = _finite(x)
    if f is None:
        return DASH
    if f == 0:
        return "0"
    mag = math.floor(math.log10(abs(f)))
    if -3 <= mag < 6:
        decimals = max(digits - 1 - mag, 0)
        return f"{f:.{decimals}f}"
    return f"{f:.{digits - 1}e}"


def ms(x: Any) -> str:
    s = num(x)
    return s if s == DASH else f"{s} ms"


def ci(lo: Any, hi: Any) -> str:
    if _finite(lo) is None or _finite(hi) is None:
        return DASH
    return f"[{num(lo)}, {num(hi)}]"


# The level every interval is meant to state; an interval of fewer rounds or samples than
# that needs states less (``timing.confidence``), and says so wherever it is printed.
NOMINAL_LEVEL = 0.95


def level(confidence: Any) -> str:
    """A confidence level as a percentage, to the digits it has: ``95%``, ``87.5%``,
    ``93.75%``; a dash where none is recorded."""
    f = _finite(confidence)
    return DASH if f is None else f"{100 * f:.4g}%"


def shared_level(rows: Any) -> float | None:
    """The one level every row states (mappings with ``confidence``, or the levels
    themselves), None where they differ; rows without a level (a failed record's) count
    for none."""
    found = {_finite(r.get("confidence") if hasattr(r, "get") else r) for r in rows or ()}
    found.discard(None)
    return found.pop() if len(found) == 1 else None


def ci_heading(shared: Any, unit: str = "") -> str:
    """A column heading for intervals: ``95% CI (ms)`` where every row states that level
    (``shared``, from :func:`shared_level`), else ``CI (ms)``, each cell saying its own."""
    head = "CI" if _finite(shared) is None else f"{level(shared)} CI"
    return f"{head} ({unit})" if unit else head


def ci_level(lo: Any, hi: Any, confidence: Any, shared: Any = None,
             number: Callable[[Any], str] = num, decimals: int | None = None) -> str:
    """An interval with the level it states: ``[227, 319] 87.5% CI``; the level left to the
    heading where it is the ``shared`` one the heading states (:func:`ci_heading`). The
    ends are written by ``number``, or to fixed ``decimals`` where given (``[226.8, 319.4]``)."""
    if _finite(lo) is None or _finite(hi) is None:
        return DASH
    if decimals is not None:
        def number(x: Any) -> str:
            return fixed(x, decimals)
    text = f"[{number(lo)}, {number(hi)}]"
    f = _finite(confidence)
    if f is None or f == _finite(shared):
        return text
    return f"{text} {level(f)} CI"


def rests_on(*confidences: Any) -> str:
    """What a verdict drawn from intervals rests on where one states less than 95%:
    `` (87.5% intervals)``, `` (87.5% and 95% intervals)``; empty at 95%."""
    found = sorted({f for f in map(_finite, confidences) if f is not None})
    if not found or found[0] >= NOMINAL_LEVEL:
        return ""
    return f" ({' and '.join(level(f) for f in found)} intervals)"


def count(n: Any, word: str, plural: str | None = None) -> str:
    """A count with its noun agreeing: ``1 layer``, ``4 layers``, ``1,024 tokens``; the
    noun alone after a dash where there is no count."""
    f = _finite(n)
    if f is None:
        return f"{DASH} {plural or word + 's'}"
    return f"{integer(f)} {word if f == 1 else (plural or word + 's')}"


def pct(x: Any, decimals: int = 1) -> str:
    f = _finite(x)
    return DASH if f is None else f"{100 * f:.{decimals}f}%"


def pct_value(x: Any) -> str:
    """A value that is already a percentage (``percent_of_peak``)."""
    f = _finite(x)
    return DASH if f is None else f"{f:.1f}%"


def ratio(x: Any) -> str:
    f = _finite(x)
    return DASH if f is None else f"{f:.2f}x"


def ratio_interval(x: Any, lo: Any, hi: Any) -> str:
    """A ratio with its interval, ``0.84x [0.82x, 0.86x]``, to the fewest decimals (two to
    four) at which a point that differs from an end also reads differently from it: a
    point rounded onto its own interval's edge would read as lying on it."""
    values = [_finite(v) for v in (x, lo, hi)]
    if values[0] is None:
        return DASH
    decimals = 2
    while decimals < 4 and any(v is not None and v != values[0] and f"{v:.{decimals}f}" == f"{values[0]:.{decimals}f}"
                               for v in values[1:]):
        decimals += 1
    shown = [DASH if v is None else f"{v:.{decimals}f}x" for v in values]
    return f"{shown[0]} [{shown[1]}, {shown[2]}]"


def fixed(x: Any, decimals: int = 2) -> str:
    f = _finite(x)
    return DASH if f is None else f"{f:.{decimals}f}"


def integer(x: Any) -> str:
    f = _finite(x)
    return DASH if f is None else f"{int(round(f)):,}"


def sig(x: Any, digits: int = 3) -> str:
    """A figure as a results table prints it: ``digits`` significant digits in Python's
    general format (``0.123``, ``1e-05``), whole numbers with thousands separators from
    1,000 up and for integers (``12,346``), ``yes``/``no`` for booleans, text as given."""
    if x is None:
        return DASH
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        if x == 0:
            return "0"
        if abs(x) >= 1000:
            return f"{x:,.0f}"
        return f"{x:.{digits}g}"
    return str(x)


def general(x: Any, digits: int = 6) -> str:
    """Python's general format: ``digits`` significant digits, trailing zeros dropped,
    an exponent for very large or small values (``12.35``, ``1.235e+08``)."""
    if x is None:
        return DASH
    return f"{float(x):.{digits}g}"


def with_unit(x: Any, unit: Any, number: Callable[[Any], str] = sig) -> str:
    """A number followed by its unit (``12.3 ms``); the number alone without one."""
    if x is None:
        return DASH
    return f"{number(x)} {unit or ''}".strip()


def interval(lo: Any, hi: Any, number: Callable[[Any], str] = sig) -> str:
    """Both ends in brackets, each written by ``number``: ``[1.23, 4.56]``."""
    return f"[{number(lo)}, {number(hi)}]"


def ratio_sig(x: Any, digits: int = 3) -> str:
    """A ratio to ``digits`` significant digits: ``3.7x``, ``1.05x``."""
    if x is None:
        return DASH
    return f"{general(x, digits)}x"


def duration_ms(x: Any) -> str:
    """A duration given in milliseconds, in microseconds below 1 ms (``146.8 us``), else
    to four significant digits (``12.35 ms``)."""
    if x is None:
        return DASH
    f = float(x)
    return f"{f * 1000:.1f} us" if f < 1 else f"{general(f, 4)} ms"


# What a record's sequence length counts (``inputs.sequence``; records without it count
# tokens), and where the word alone does not say what a position is, a note by the
# model's main input (``inputs.input``).
TOKENS = "tokens"
SEQUENCE_NOTES: dict[str, str] = {
    "input_features": "spectrogram frames after the encoder's stride-2 convolution",
    "input_values": "frames of the waveform after the feature encoder's convolutions",
}


def sequence_unit(value: Any) -> str:
    """``inputs.sequence`` of a record: ``tokens`` where it is missing (older records)."""
    return str(value) if isinstance(value, str) and value else TOKENS


def sequence_note(input_name: Any, unit: Any = None) -> str | None:
    """The note that says what a frame is (``input_features``, ``input_values``); None
    for tokens and patches, which say it themselves."""
    if sequence_unit(unit) == TOKENS:
        return None
    return SEQUENCE_NOTES.get(str(input_name or ""))


def length(x: Any, unit: Any = None) -> str:
    """A sequence length with what it counts: ``512 tokens``, ``196 patches``."""
    return f"{integer(x)} {sequence_unit(unit)}"


def length_short(x: Any, unit: Any = None) -> str:
    """A sequence length in a label: ``s512`` for tokens, as combination ids write it;
    ``196 patches`` or ``1,500 frames`` otherwise."""
    unit = sequence_unit(unit)
    if unit == TOKENS:
        f = _finite(x)
        return f"s{int(round(f))}" if f is not None else DASH
    return length(x, unit)


def nbytes(x: Any) -> str:
    f = _finite(x)
    if f is None:
        return DASH
    for unit, size in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if abs(f) >= size:
            return f"{num(f / size)} {unit}"
    return f"{int(f)} B"


def nbytes_compact(x: Any) -> str:
    """A byte count in binary units to three significant digits without trailing zeros
    (``1.5 GiB``, ``512 B``); :func:`nbytes` keeps them (``1.50 GiB``)."""
    if x is None:
        return DASH
    f = float(x)
    for unit, size in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if abs(f) >= size:
            return f"{general(f / size, 3)} {unit}"
    return f"{general(f)} B"


def gib(x: Any, decimals: int = 1) -> str:
    """A byte count in GiB to fixed decimals, as memory sizes are stated: ``79.6 GiB``."""
    f = _finite(x)
    return DASH if f is None else f"{fixed(f / 2 ** 30, decimals)} GiB"


def _decimal(x: Any, units: tuple[tuple[str, float], ...], base: str) -> str:
    f = _finite(x)
    if f is None:
        return DASH
    for unit, size in units:
        if abs(f) >= size:
            return f"{num(f / size)} {unit}"
    return f"{num(f)} {base}"


def flops(x: Any) -> str:
    return _decimal(x, (("PFLOP/s", 1e15), ("TFLOP/s", 1e12), ("GFLOP/s", 1e9), ("MFLOP/s", 1e6)),
                    "FLOP/s")


def bandwidth(x: Any) -> str:
    """Bytes per second in decimal units, as datasheets state bandwidth (1 GB/s = 10^9)."""
    return _decimal(x, (("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6)), "B/s")


def quantity(x: Any) -> str:
    """A FLOP or byte count in decimal units (G = 10^9)."""
    return _decimal(x, (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)), "").strip()


def code_block(value: Any, lang: str = "json", indent: int = 0) -> Raw:
    """A fenced block that nothing in ``value`` can close; indented for admonitions."""
    text = value if isinstance(value, str) else json.dumps(value, indent=2, sort_keys=True,
                                                          ensure_ascii=True, default=str)
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    pad = " " * indent
    body = "\n".join(pad + line if line else "" for line in text.splitlines())
    # the template puts the opening fence at the indentation it wants
    return Raw(f"{fence} {lang}\n{body}\n{pad}{fence}")


def finalize(value: object) -> Markup:
    """Applied by Jinja to every ``{{ }}`` value of the site's pages: run data becomes inert
    text (`markdown_cell`: the same text in a table cell or a sentence; a missing value a
    dash, an empty one empty)."""
    return value if isinstance(value, Markup) else Markup(markdown_cell(value))


def front_matter_title(value: object) -> Raw:
    """A page title for YAML front matter, HTML-escaped once.

    MkDocs themes print a title taken from the first heading through ``striptags``, which
    turns entities back into tags; a title from front matter is printed as given, so it
    must arrive escaped. JSON strings are valid YAML.
    """
    text = re.sub(r"\s+", " ", str(value))
    return Raw(json.dumps(html_text(text), ensure_ascii=True))


def html_attr(value: object) -> Raw:
    """A value for a double-quoted HTML attribute (the chart spec JSON)."""
    return Raw(html_text(value))


def breakable(value: object) -> Raw:
    """Escaped text with line-break opportunities after ``.``, ``/`` and ``--``, so long
    identifiers (run and combination ids, category names) wrap inside a table cell."""
    text = markdown_cell(value)
    for sep in ("--", "/", "."):
        text = text.replace(sep, sep + "<wbr>")
    return Raw(text)


_WHEN = re.compile(r"^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2})(?::\d{2}(?:\.\d+)?)?(?:Z|\+00:00)$")


def when(value: object) -> str:
    """An ISO 8601 UTC time to the minute: ``2026-12-02 14:00 UTC``."""
    m = _WHEN.match(str(value or ""))
    return markdown_cell(f"{m.group(1)} {m.group(2)} UTC" if m else value)


def rerun(median: Any, low: Any, high: Any, runs: Any) -> str:
    """What reruns of a measurement gave, against its own median: ``-12% to +3%, 4 runs``;
    ``one run`` where no other run measured it (nothing to go on but its own interval)."""
    m, lo, hi, n = _finite(median), _finite(low), _finite(high), _finite(runs)
    if n is None or m is None or m <= 0:
        return "–"
    if n < 2 or lo is None or hi is None:
        return "one run"
    return f"{_signed_pct(lo / m - 1)} to {_signed_pct(hi / m - 1)}, {int(n)} runs"


def _signed_pct(x: float) -> str:
    text = f"{x * 100:+.0f}%"
    return "0%" if text in ("+0%", "-0%") else text.replace("-", "−")


def cell(value: object) -> Raw:
    """A filter for a table cell printed where no finalize escapes (the README)."""
    return Raw(markdown_cell(value))


FILTERS = {"breakable": breakable, "cell": cell, "when": when, "front_matter_title": front_matter_title,
           "html_attr": html_attr,
           "num": num, "ms": ms, "ci": ci, "pct": pct, "pct_value": pct_value, "ratio": ratio,
           "ratio_interval": ratio_interval,
           "fixed": fixed, "integer": integer, "seq_length": length, "nbytes": nbytes, "flops": flops,
           "bandwidth": bandwidth, "quantity": quantity, "sig": sig, "general": general,
           "ratio_sig": ratio_sig, "duration_ms": duration_ms, "nbytes_compact": nbytes_compact,
           "gib": gib, "level": level, "shared_level": shared_level, "ci_heading": ci_heading,
           "ci_level": ci_level, "rests_on": rests_on, "count": count, "rerun": rerun,
           "code_block": code_block, "url": url, "raw": Raw}
