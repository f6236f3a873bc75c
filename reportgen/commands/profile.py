"""``reportgen profile``: run a suite and store one record per combination under runs/.

Everything is validated (suite file, flags, device, --out) before anything is written.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from reportgen.errors import UserError
from reportgen.suite import (
    ATTN_IMPLEMENTATIONS,
    COMPILE_MODES,
    DEVICES,
    DTYPES,
    MODES,
    SCALES,
    STUDIES,
    default_suite_name,
    load_suite,
    parse_overrides,
)

# (flag, dest = the suite key it overrides, metavar, help); lists are comma-separated.
_OVERRIDES: tuple[tuple[str, str, str, str], ...] = (
    ("--models", "models", "LIST",
     ("models: presets, catalog models (reportgen models), transformers model types, config.json paths, "
      "Hugging Face Hub ids (org/name[@revision]; "
      "the config only is fetched, never weights; HF_HOME, HF_HUB_OFFLINE and HF_TOKEN apply)")),
    ("--scale", "scale", "SCALE", f"model size: {' | '.join(SCALES)}"),
    ("--seq-lens", "seq_lens", "LIST", "sequence lengths, e.g. 128,512"),
    ("--batch-sizes", "batch_sizes", "LIST", "batch sizes, e.g. 1,4"),
    ("--dtypes", "dtypes", "LIST", f"dtypes: {', '.join(DTYPES)}"),
    ("--attn", "attn", "LIST", f"attention implementations: {', '.join(ATTN_IMPLEMENTATIONS)}"),
    ("--modes", "modes", "LIST", f"modes: {', '.join(MODES)}"),
    ("--compile", "compile", "LIST",
     f"torch.compile modes: {', '.join(COMPILE_MODES)} (none: eager; default: none)"),
    ("--device", "device", "DEVICE", f"device: {' | '.join(DEVICES)} (default: the suite's)"),
    ("--budget-s", "budget_s", "SECONDS", "timing budget per combination"),
    ("--layers", "layers", "N",
     ("measure N of each model's layers at its full width (every kind of layer it has, in its "
      "proportions; embeddings and head once) and extrapolate the whole model's figures by kind")),
    ("--experts", "experts", "N",
     ("build each mixture-of-experts layer with N of its routed experts (at least the experts a token "
      "is routed to; experts per token, each expert's size and the shared experts kept) and extrapolate "
      "the whole model's parameters and memory to all of them")),
    ("--studies", "studies", "LIST",
     f"studies run in each combination's profiled round: {', '.join(STUDIES)} (replaces the suite's)"),
)

# --executor slurm only: (flag, dest, metavar or None for a switch, help). Values are
# checked by reportgen.execute.slurm.SlurmOptions, one line naming the flag.
_SLURM: tuple[tuple[str, str, str | None, str], ...] = (
    ("--slurm-partition", "slurm_partition", "NAME", "partition (default: the cluster's default)"),
    ("--slurm-account", "slurm_account", "NAME", "account to charge (default: yours)"),
    ("--slurm-time", "slurm_time", "TIME",
     ("time limit of each task: minutes or Slurm's D-HH:MM:SS (default: 60); a task stopped by it "
      "keeps its records, and rerunning resumes")),
    ("--slurm-gpus-per-task", "slurm_gpus_per_task", "N",
     ("GPUs per task, one worker each (default: 1 on a cuda suite; with --device auto, asking for "
      "GPUs makes it cuda)")),
    ("--slurm-constraint", "slurm_constraint", "FEATURES", "node features, e.g. h100 (sbatch --constraint)"),
    ("--slurm-exclusive", "slurm_exclusive", None, "a node to each task, shared with no other job"),
    ("--slurm-tasks", "slurm_tasks", "N",
     ("array size (default: on a cuda suite the pending combinations, at most 8; on the cpu 1, since "
      "tasks sharing a node share its cores: use N with --slurm-exclusive)")),
    ("--slurm-cpus-per-task", "slurm_cpus_per_task", "N", "CPUs per task (default: the cluster's)"),
    ("--slurm-mem", "slurm_mem", "SIZE", "memory per node, e.g. 64G (default: the cluster's)"),
    ("--slurm-sbatch", "slurm_sbatch", "FLAG=VALUE",
     "any other sbatch option, e.g. qos=high (repeatable)"),
    ("--no-wait", "no_wait", None,
     "submit, print the job id and how to follow it, and return (default: wait, showing progress)"),
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "profile",
        help="measure a suite of combinations into runs/",
        description="Measure every combination of a suite (timing, then a profiled pass) and "
        "store one record per combination. Rerunning the same command resumes; a list flag "
        "replaces that key in every [[matrix]] table of the suite.",
    )
    parser.add_argument(
        "--suite",
        metavar="NAME|PATH",
        help="built-in suite name or a suite TOML file (default: gpu-default with CUDA, else cpu-default)",
    )
    for flag, dest, metavar, text in _OVERRIDES:
        # Plain strings: values are checked by suite.parse_overrides, which names the flag
        # in a one-line error (argparse's choices would print usage instead).
        parser.add_argument(flag, dest=dest, metavar=metavar, help=text)
    parser.add_argument("--trust-remote-code", dest="trust_remote_code", action="store_true",
                        help="allow a Hub model whose config needs code from its repository to run that code "
                        "(suite setting trust_remote_code = true)")
    parser.add_argument("--out", default="runs", metavar="DIR", help="results root (default: runs)")
    parser.add_argument("--force", action="store_true",
                        help="measure the whole suite again as a new run (a finished run is never modified)")
    parser.add_argument("--retry-failed", action="store_true",
                        help="measure failed combinations again (a plain rerun leaves them: one may have "
                        "killed its worker)")
    parser.add_argument("--executor", default="local", metavar="local|slurm",
                        help="local: one supervised worker process per device on this host (default); "
                        "slurm: a job array on a Slurm cluster")
    parser.add_argument("--devices", metavar="all|0,3,5",
                        help="GPUs of this host to measure on, one worker each (default: the first GPU)")
    parser.add_argument("--timeout", dest="timeout_s", metavar="SECONDS",
                        help="stop a combination's worker after this long and record it failed "
                        "(default: the larger of 900 s and 120 timing budgets)")
    parser.add_argument(
        "--dry-run", dest="dry_run", action="store_true",
        help=("check each combination against this device's memory (the pre-flight estimate, on the meta "
              "device: nothing is allocated) and print what would be measured: as asked, with fewer layers "
              "or experts and why, or skipped; writes nothing"))
    parser.add_argument(
        "--list", action="store_true", help="print the combination ids and exit; writes nothing"
    )
    slurm = parser.add_argument_group(
        "Slurm (with --executor slurm)",
        "--out must be on a filesystem the nodes share: the tasks write the run directory of their "
        "node's hardware there, and submitit keeps its pickles and task logs in <out>/.slurm/.")
    for flag, dest, switch_or_metavar, text in _SLURM:
        if switch_or_metavar is None:
            slurm.add_argument(flag, dest=dest, action="store_true", help=text)
        elif flag == "--slurm-sbatch":
            slurm.add_argument(flag, dest=dest, metavar=metavar, action="append", help=text)
        else:
            slurm.add_argument(flag, dest=dest, metavar=metavar, help=text)
    parser.set_defaults(func=run)


def command_line(args: argparse.Namespace) -> str:
    """The command as given, rebuilt from the parsed flags (argv may not be ours)."""
    parts = ["reportgen", "profile"]
    if args.suite:
        parts += ["--suite", args.suite]
    for flag, dest, _, _ in _OVERRIDES:
        value = getattr(args, dest)
        if value is not None:
            parts += [flag, str(value)]
    if getattr(args, "trust_remote_code", False):
        parts.append("--trust-remote-code")
    if args.out != "runs":
        parts += ["--out", args.out]
    if args.force:
        parts.append("--force")
    if args.retry_failed:
        parts.append("--retry-failed")
    if args.executor != "local":
        parts += ["--executor", args.executor]
    for flag, dest in (("--devices", "devices"), ("--timeout", "timeout_s")):
        if getattr(args, dest) is not None:
            parts += [flag, str(getattr(args, dest))]
    for flag, dest, metavar, _ in _SLURM:
        value = getattr(args, dest)
        if metavar is None and value:
            parts.append(flag)
        elif isinstance(value, list):
            for item in value:
                parts += [flag, item]
        elif metavar is not None and value is not None:
            parts += [flag, str(value)]
    return shlex.join(parts)


def run(args: argparse.Namespace) -> int:
    from reportgen.commands.summary import print_run
    from reportgen.errors import require_profile_extra

    require_profile_extra("profile")
    from reportgen.execute import runner

    overrides = parse_overrides({**{dest: getattr(args, dest) for _, dest, _, _ in _OVERRIDES},
                                 "trust_remote_code": True if getattr(args, "trust_remote_code", False) else None})
    if args.executor != "slurm":
        for flag, dest, _, _ in _SLURM:
            if getattr(args, dest) not in (None, False):
                raise UserError(f"{flag}: only with --executor slurm")
        suite_name = args.suite or default_suite_name(overrides.get("device", "auto"))
    else:
        from reportgen.execute import slurm

        # the nodes' GPUs, not this host's, choose the default suite
        suite_name = args.suite or slurm.default_suite_name(overrides.get("device", "auto"),
                                                            args.slurm_gpus_per_task)
    suite = load_suite(suite_name, overrides)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out: '{out}' exists and is not a directory")
    timeout_s = _timeout(args.timeout_s)
    if args.executor not in EXECUTORS:
        raise UserError(f"--executor: unknown executor {args.executor!r}; choose from {', '.join(EXECUTORS)}")
    if args.force and args.retry_failed:
        raise UserError("--retry-failed: contradicts --force, which measures every combination again")
    if args.executor != "slurm":  # a Slurm job's device is its nodes': slurm.main settles it
        suite = suite.with_device(runner.resolve_device(suite.settings.device))
    combos = suite.combinations()
    if any(c.layers is not None or c.experts is not None for c in combos):
        from reportgen.profile.modelspec import check_layers

        check_layers(combos)  # before anything is written

    if args.list:
        for combo in combos:
            print(combo.id)
        return 0
    if args.dry_run:
        if args.executor == "slurm":
            raise UserError("--dry-run: checks this host's device; a Slurm job's nodes are not this host")
        from reportgen.profile.preflight import plan_line

        for combo in combos:
            print(plan_line(combo), flush=True)
        return 0

    if args.executor == "slurm":
        from reportgen.execute import slurm

        return slurm.main(args, suite, out=out, command=command_line(args), timeout_s=timeout_s,
                          show_run=print_run)

    gpu_count = _gpu_count(suite.settings.device)
    from reportgen.execute.devices import parse_devices

    devices = parse_devices(args.devices, device=suite.settings.device, gpu_count=gpu_count)
    executor = runner.local_executor(suite, devices=devices, gpu_count=gpu_count, timeout_s=timeout_s)
    result = runner.run_suite(suite, out=out, force=args.force, retry_failed=args.retry_failed,
                              command=command_line(args), executor=executor)
    print_run(result.store.run_dir)
    return 0


EXECUTORS = ("local", "slurm")


def _timeout(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        raise UserError(f"--timeout: {value!r} is not a number of seconds") from None
    if not seconds > 0:
        raise UserError(f"--timeout: must be more than 0 seconds, not {value}")
    return seconds


def _gpu_count(device: str) -> int:
    if device != "cuda":
        return 0
    import torch

    return int(torch.cuda.device_count())
