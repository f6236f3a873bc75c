"""Templates test a combination's status the way the code does (``records.status``), never
by spelling its word."""

from __future__ import annotations

import re
from pathlib import Path

from reportgen.records.status import COMBINATION_STATUSES, FAILED, OK, SKIPPED
from reportgen.render.templating import environment, make_environment

PACKAGE = Path(__file__).resolve().parent.parent / "reportgen"

# pages whose ``status`` is a study's or a study variant's, in the study's own words
STUDY_TEMPLATES = {"instrumentation.md.j2", "tools.md.j2"}


def test_templates_test_a_status_through_records_status() -> None:
    template = "{% for r in rows %}{{ 'o' if r is ok else 'f' if r is failed else '-' }}{% endfor %}"
    rows = [{"status": OK}, {"status": FAILED}, {"status": SKIPPED}, {}]
    for env in (environment(), make_environment("reportgen.render", folder="templates/readme")):
        assert env.from_string(template).render(rows=rows) == "of--"


def test_no_template_spells_a_combination_status_in_a_comparison() -> None:
    words = "|".join(COMBINATION_STATUSES)
    literal = re.compile(rf"""status\s*[!=]=\s*["']({words})["']|["']({words})["']\s*[!=]=\s*\w*\.?status""")
    found = [f"{path.relative_to(PACKAGE)}:{n}"
             for path in sorted(PACKAGE.rglob("*.j2"))
             if "templates" in path.parts and path.name not in STUDY_TEMPLATES
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if literal.search(line)]
    assert not found, f"status words compared literally: {found}"
