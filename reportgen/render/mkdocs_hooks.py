"""MkDocs hooks (``hooks:`` in mkdocs.yml).

A navigation section takes the title of its index page, so a hardware section reads
"CPU · AMD EPYC · 2 cores" rather than the directory name MkDocs would show ("Cpu amd epyc
2c"); reads only the page's front matter. A build without a public ``site_url`` turns
mkdocs-material's instant navigation off, since it finds the site's pages through the
sitemap, which such a build leaves empty.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _front_matter_title(path: Path) -> str | None:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    if not lines or lines[0].strip() != "---":
        return None
    for line in lines[1:20]:
        if line.strip() == "---":
            return None
        if line.startswith("title:"):
            raw = line[len("title:"):].strip()
            try:
                value = json.loads(raw) if raw.startswith('"') else raw
            except json.JSONDecodeError:
                value = raw
            return _unescape(str(value)) if value else None
    return None


def _unescape(text: str) -> str:
    # titles are HTML-escaped once in front matter (see fmt.front_matter_title);
    # the navigation escapes again, so undo ours
    import html

    return html.unescape(text)


def _retitle(items: list[Any]) -> None:
    for item in items:
        children = getattr(item, "children", None)
        if not children or not getattr(item, "is_section", False):
            continue
        for child in children:
            file = getattr(child, "file", None)
            if file is not None and file.src_uri.endswith("index.md") and file.abs_src_path:
                title = _front_matter_title(Path(file.abs_src_path))
                if title:
                    item.title = title.split(": ")[0]
                break
        _retitle(children)


def on_nav(nav: Any, config: Any, files: Any) -> Any:
    _retitle(nav.items)
    return nav


def on_config(config: Any) -> Any:
    if not config.get("site_url"):
        features = config["theme"].get("features") or []
        config["theme"]["features"] = [f for f in features if f != "navigation.instant"]
    return config
