"""The profile side: what runs inside a measuring worker.

A model name resolved (``modelspec``), shrunk (``shrink``) and built from its config
(``building``) with seeded inputs (``inputs``) in the step of its mode (``modes``), its
structure (``structure``), unprofiled timing (``timing``), the profiled pass
(``profiling``), FLOPs (``flops``), the environment (``env``, ``nvml``), the attention
micro-benchmark (``micro``), the pre-flight memory estimate (``preflight``) and one
combination end to end (``measure``). Imports torch; the render side never imports this
package.
"""
