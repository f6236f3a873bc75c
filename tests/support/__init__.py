"""What the test modules share, one module per concept: fake measures and runner
measures, a pynvml faked from NVML readings, tiny in-process models, hand-built records
and edited synthetic trees, the site project and its build, a headless browser, memory
cgroups, a one-node Slurm cluster. Test modules import from here, never from each other
(tests/test_harness.py checks it)."""
