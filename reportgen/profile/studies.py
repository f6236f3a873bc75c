"""Studies a suite can ask for (``studies = [...]`` in its settings): name -> the
``module:function`` that ``measure`` calls in the profiled round."""

REGISTRY = {"tools": "reportgen.profile.tools:study"}
