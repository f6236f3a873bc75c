"""Refuse to publish a site whose canonical URLs would point nowhere.

mkdocs.yml reads ``site_url`` from ``SITE_URL``; a site built without one has no canonical
links, an empty sitemap, citations without a URL and a 404 page whose assets load only
at the root of a host. ``python -m reportgen.render.publish`` exits 2 with one line unless
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


def public_site_url(value: str | None) -> str | None:
    """``value`` when it is a public http(s) address, else None (unset, or a preview on
    this machine): what citations may name as a page's address."""
    try:
        return check_site_url(value)
    except UserError:
        return None


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
