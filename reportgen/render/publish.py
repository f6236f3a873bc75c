"""Refuse to publish a site whose canonical URLs would point nowhere.

mkdocs.yml reads ``site_url`` from ``SITE_URL`` and falls back to a local address for
previews; a published site built that way has canonical links and a sitemap on
127.0.0.1. ``python -m reportgen.render.publish`` exits 2 with one line unless
``SITE_URL`` is a real http(s) address; ``nox -s publish`` and the Pages workflow run it
before building.
"""

from __future__ import annotations

import os
import sys
from urllib.parse import urlsplit

from reportgen.errors import UserError

LOCAL_HOSTS = ("localhost", "127.0.0.1", "0.0.0.0", "::1", "")


def check_site_url(value: str | None) -> str:
    """The URL when it can be published to, else a UserError saying why."""
    if not value:
        raise UserError("SITE_URL is not set: the site would be published with canonical URLs "
                        "on 127.0.0.1 (set SITE_URL=https://<user>.github.io/<repo>/)")
    parts = urlsplit(value)
    host = (parts.hostname or "").lower()
    if parts.scheme not in ("http", "https") or host in LOCAL_HOSTS or host.startswith("127."):
        raise UserError(f"SITE_URL={value!r} is not a public http(s) address; refusing to publish")
    return value


def main() -> int:
    try:
        url = check_site_url(os.environ.get("SITE_URL"))
    except UserError as exc:
        print(f"reportgen: error: {exc}", file=sys.stderr)
        return UserError.exit_code
    print(f"publishing for {url}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
