"""``python -m reportgen.readme [ROOT]``: rewrites the README's measured figures, the
command its marked blocks name. The figures and their blocks are written by
``reportgen.render.readme``.
"""

from __future__ import annotations

from reportgen.render.readme import main

if __name__ == "__main__":
    raise SystemExit(main())
