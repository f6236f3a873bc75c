"""The profile side: what runs inside a measuring worker.

Models built from configs (``models``), their structure (``structure``), unprofiled timing
(``timing``), the profiled pass (``profiling``), FLOPs (``flops``), the environment
(``env``, ``nvml``), the attention micro-benchmark (``micro``), the pre-flight memory
estimate (``preflight``) and one combination end to end (``measure``). Imports torch;
the render side never imports this package.
"""
