"""Validation and benchmark suite (`nox -s bench`): reportgen checked against independent
references, written to a versioned results file and shown on the site's Validation page.

Facts only: modules that measure import torch lazily; ``results`` builds the figures and
their verdicts (no torch). The results files are read through ``reportgen.records.bench``
and the Validation page is ``reportgen.render.validation``, so the site can rebuild it from
a results file anywhere.
"""
