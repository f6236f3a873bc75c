"""Validation and benchmark suite (`nox -s bench`): reportgen checked against independent
references, written to a versioned results file and shown on the site's Validation page.

Modules that measure import torch lazily; ``results`` and ``page`` are render-side (no
torch), so the site can rebuild the Validation page from a results file anywhere.
"""
