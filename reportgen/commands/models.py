"""``reportgen models``: the catalog of today's models, each built on the meta device and
counted: layers by kind, total and active parameters against the publisher's stated
figures (with their words and address), and the cache each keeps per sequence."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from reportgen import fmt

BYTES_PER_ELEMENT = 2  # the cache and weights at bf16, as these models are served


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "models",
        help="list the catalog of today's models with their computed and stated sizes",
        description="List the catalog's models (any of them is a --models name for "
        "reportgen profile): each built on the meta device from its published config, "
        "its layers by kind, total and active parameters computed beside the publisher's "
        "stated figures, and its cache per sequence by layer kind (bf16).",
    )
    parser.add_argument("--format", choices=("table", "json"), default="table",
                        help="table: one row per model; json: every figure with its source (default: table)")
    parser.add_argument("--only", metavar="NAME", action="append",
                        help="list only this catalog model (repeatable)")
    parser.set_defaults(func=run)


def _chosen(only: Iterable[str] | None) -> list[str]:
    from reportgen import catalog

    names = catalog.names()
    if not only:
        return list(names)
    unknown = [n for n in only if n not in names]
    if unknown:
        from reportgen.errors import UserError

        raise UserError(f"--only: unknown catalog model {unknown[0]!r}; the catalog has: {', '.join(names)}")
    return list(dict.fromkeys(only))


def _figure(stated: Any, computed: int | None) -> dict[str, Any] | None:
    if stated is None:
        return None
    agrees = None if computed is None else stated.agrees(computed)
    return {"figure": stated.figure, "value": stated.value, "quote": stated.quote, "source": stated.source,
            "counts": stated.counts, "rule": stated.rule(), "computed_in_convention": computed,
            "agrees": agrees, "disagreement": stated.disagreement, "verified": stated.verified,
            "checked": stated.checked}


def row(entry: Any, counted: Any, config: Any) -> dict[str, Any]:
    """One model's listing: the catalog entry, its census and its cache by kind."""
    from reportgen import kvcache
    from reportgen.profile.layers import count_kinds

    total = entry.total
    active = entry.active
    cache = None
    if entry.family != "encoder":
        summary = kvcache.summary(config, bytes_per_element=BYTES_PER_ELEMENT)
        cache = {"per_token_bytes": summary["per_token_bytes"], "bounded_bytes": summary["bounded_bytes"],
                 "layers_by_kind": summary["kinds"], "bytes_per_element": BYTES_PER_ELEMENT}
    return {
        "name": entry.name,
        "hub_id": entry.hub_id,
        "family": entry.family,
        "model_type": entry.model_type,
        "config_source": entry.config_source,
        "layers": len(counted.kinds),
        "layers_by_kind": count_kinds(list(counted.kinds)),
        "total": counted.total,
        "active": counted.active,
        "experts": counted.experts,
        "experts_per_token": counted.top_k,
        "input_embeddings": counted.input_embeddings,
        "head": counted.head,
        "weights_bytes": counted.total * BYTES_PER_ELEMENT,  # every expert resident
        "stated_total": _figure(total, counted.in_convention(counted.total, total.counts) if total else None),
        "stated_active": _figure(active, counted.in_convention(counted.active, active.counts) if active else None),
        "stated_missing": entry.stated_missing,
        "cache": cache,
        "note": entry.note,
    }


def rows(names: Iterable[str]) -> list[dict[str, Any]]:
    from reportgen import catalog
    from reportgen.profile.census import build_meta, config_of, count

    listed = []
    for name in names:
        entry = catalog.entry(name)
        config = config_of(entry)
        model = build_meta(config)
        listed.append(row(entry, count(model, config), config))
        del model
    return listed


def agreement(listed: Iterable[Mapping[str, Any]]) -> tuple[int, int]:
    """(stated figures that agree, stated figures) over the rows: totals and active counts."""
    figures = [r[k] for r in listed for k in ("stated_total", "stated_active") if r[k] is not None]
    return sum(1 for f in figures if f["agrees"]), len(figures)


def verification(listed: Iterable[Mapping[str, Any]]) -> tuple[int, int]:
    """(stated figures whose words were found at their source, stated figures) over the rows."""
    figures = [r[k] for r in listed for k in ("stated_total", "stated_active") if r[k] is not None]
    return sum(1 for f in figures if f["verified"]), len(figures)


def _params(n: int) -> str:
    return f"{fmt.general(n / 1e9, 4)}B" if n >= 1e9 else f"{fmt.general(n / 1e6, 4)}M"


def _verdict(figure: Mapping[str, Any] | None) -> str:
    if figure is None:
        return fmt.DASH
    word = "agrees" if figure["agrees"] else "differs"
    convention = "" if figure["counts"] == "all" else f", {figure['counts']}"
    return f"{figure['figure']} {word}{convention}"


def _cache(cache: Mapping[str, Any] | None) -> str:
    if cache is None:
        return "none (encoder)"
    text = f"{fmt.nbytes_compact(cache['per_token_bytes'])}/token"
    if cache["bounded_bytes"]:
        text += f" + {fmt.nbytes_compact(cache['bounded_bytes'])}"
    return text


def print_table(listed: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="the catalog (computed on the meta device; cache and weights at bf16)",
                  title_justify="left")
    for column in ("model", "hub id", "type", "layers by kind", "total", "active", "stated total",
                   "stated active", "cache per sequence", "weights"):
        table.add_column(column, overflow="fold")
    for r in listed:
        kinds = ", ".join(f"{n} {k}" for k, n in r["layers_by_kind"].items())
        active = _params(r["active"]) if r["experts"] else fmt.DASH
        table.add_row(r["name"], r["hub_id"], f"{r['family']} ({r['model_type']})", kinds, _params(r["total"]),
                      active, _verdict(r["stated_total"]) if r["stated_total"] else "not stated",
                      _verdict(r["stated_active"]), _cache(r["cache"]), fmt.nbytes(r["weights_bytes"]))
    console = Console(highlight=False, soft_wrap=False, width=max(Console().width, 200))
    console.print(table)
    agree, stated = agreement(listed)
    console.print(f"{agree} of {stated} stated figures agree (within 1%, or within a rounded figure's own "
                  "rounding); every figure's words and address: --format json")
    for r in listed:
        for key in ("stated_total", "stated_active"):
            figure = r[key]
            if figure is not None and not figure["agrees"]:
                console.print(f"  {r['name']} {key.removeprefix('stated_')}: {figure['figure']} stated, "
                              f"{_params(figure['computed_in_convention'])} computed: "
                              f"{figure['disagreement'] or 'no reason recorded'}")
    verified, stated = verification(listed)
    console.print(f"{verified} of {stated} stated figures' words verified at their source")
    for r in listed:
        for key in ("stated_total", "stated_active"):
            figure = r[key]
            if figure is not None and not figure["verified"]:
                console.print(f"  {r['name']} {key.removeprefix('stated_')}: {figure['figure']} unverified: "
                              f"{figure['checked'] or 'not yet checked'}")


def run(args: argparse.Namespace) -> int:
    names = _chosen(args.only)
    from reportgen.errors import require_profile_extra

    require_profile_extra("models")
    listed = rows(names)
    if args.format == "json":
        agree, stated = agreement(listed)
        verified, _ = verification(listed)
        json.dump({"models": listed, "agreement": {"agree": agree, "stated": stated, "verified": verified}},
                  sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    print_table(listed)
    return 0
