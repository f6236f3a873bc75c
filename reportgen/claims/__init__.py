"""Claims from papers and blog posts, checked against the runs (render side: no torch).

* :func:`load_claims` reads and validates ``claims/*.yaml`` (a bad claim is a UserError
  naming the file and field);
* :func:`check` evaluates every claim against ``runs/`` into a :class:`CheckReport`.

Facts only: the Findings pages written from a report are ``reportgen.render.findings``.
"""

from __future__ import annotations

from reportgen.claims.evaluate import (
    INCONCLUSIVE,
    MIXED,
    NOT_TESTED,
    NOT_TESTED_HARDWARE,
    REFUTED,
    SUPPORTED,
    VERDICTS,
    CheckReport,
    ClaimResult,
    check,
    evaluate_claim,
    load_observations,
)
from reportgen.claims.registry import Claim, load_claim, load_claims

__all__ = [
    "INCONCLUSIVE",
    "MIXED",
    "NOT_TESTED",
    "NOT_TESTED_HARDWARE",
    "REFUTED",
    "SUPPORTED",
    "VERDICTS",
    "CheckReport",
    "Claim",
    "ClaimResult",
    "check",
    "evaluate_claim",
    "load_claim",
    "load_claims",
    "load_observations",
]
