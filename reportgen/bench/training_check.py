"""Figures 1 and 3b for a training step: the latency agreement with torch.utils.benchmark
and the attention-core ablation, on combinations in mode ``train`` (forward with its
loss, backward and an AdamW step) and ``train-nooptim`` (forward and backward).

* **Latency** (``training_latency_agreement``): ``latency.compare`` on each training
  combination, unchanged: a training step is a ``StepLike`` like any other (the Timer's
  statement ``step(); step.sync(); step.reset()``; ``train-nooptim``'s reset clears the
  gradients, untimed in reportgen and subtracted from the Timer's).
* **Ablation** (``training_ablation``): ``attribution_check.ablation`` on the training
  combinations. The attention core's stand-in keeps the autograd graph in a training step
  (``ablation._ZeroCore``: zeros out, zero gradients back to query, key and value), so
  the projections around the call keep their backward and only the core's forward and
  backward disappear; the time that disappears is compared with the attention.core time
  both methods attribute to the whole step (forward and backward: the hooks method clocks
  the modules' backward boundaries, the profiler joins each backward op to its forward op).

The verdicts are the same rules as the forward's figures (``latency.summarise``,
``ablation.verdict``). Nothing here runs unless the bench asks for it
(``scripts/bench.py --only training``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from reportgen.vocabulary import TRAIN, TRAIN_MODES, TRAIN_NOOPTIM

MODELS: tuple[str, ...] = ("bert-base", "gpt2")
ATTNS: tuple[str, ...] = ("eager", "sdpa")
QUESTION_LATENCY = (
    "Does reportgen's unprofiled median of a training step (forward with its loss, backward, "
    "and AdamW in mode train) agree with torch.utils.benchmark timing the same step in the "
    "same process, alternating?")
QUESTION_ABLATION = (
    "Does the attention.core time attributed to a training step (its forward and its "
    "backward) match the time the step loses when the attention core is replaced by a "
    "stand-in that keeps the autograd graph?")


# The ablation's length: at 128 tokens the attention core is 4-5% of a training step on a
# CPU, at the edge of what a drop can resolve (the verdict needs the drop within 10% of the
# attributed time, i.e. to half a percent of the step); at 256 tokens it is 8.5-10%.
LATENCY_SEQ = 128
ABLATION_SEQ = 256


def combinations(*, quick: bool, modes: Sequence[str] = (TRAIN, TRAIN_NOOPTIM),
                 models: Sequence[str] = MODELS, attns: Sequence[str] = ATTNS,
                 seq_len: int = LATENCY_SEQ) -> list[Any]:
    """The training combinations the checks run: the reference models at ``seq_len``
    tokens (``quick``: tiny at 32), on the CPU."""
    from reportgen.suite import Combination

    bad = [m for m in modes if m not in TRAIN_MODES]
    if bad:
        raise ValueError(f"not training modes: {bad}")
    scale, seq = ("tiny", 32) if quick else ("reference", seq_len)
    return [Combination(model=m, scale=scale, mode=mode, dtype="fp32", attn_implementation=a,
                        batch_size=1, seq_len=seq, device="cpu")
            for m in models for mode in modes for a in attns]


def _retitled(fig: dict[str, Any], title: str, question: str) -> dict[str, Any]:
    return {**fig, "title": title, "question": question,
            "notes": [*(fig.get("notes") or []),
                      "Training steps: mode train (forward with its loss, backward, AdamW) and "
                      "train-nooptim (forward and backward); the model in training mode "
                      "(dropout on)."]}


def latency_figure(combos: Sequence[Any], *, rounds: int, budget_s: float, min_run_time: float,
                   log: Callable[[str], None] = print,
                   stop: Callable[[], bool] = lambda: False) -> dict[str, Any]:
    """Figure 1 on training combinations (``latency.run``)."""
    from reportgen.bench import latency

    fig = latency.run([c for c in combos if c.mode in TRAIN_MODES], rounds=rounds, budget_s=budget_s,
                      min_run_time=min_run_time, log=log, stop=stop)
    return _retitled(fig, "Latency agreement: training step", QUESTION_LATENCY)


def ablation_figure(combos: Sequence[Any], *, rounds: int, max_rounds: int | None = None,
                    precision: float | None = None, min_pairs: int, budget_s: float,
                    log: Callable[[str], None] = print,
                    stop: Callable[[], bool] = lambda: False) -> dict[str, Any]:
    """Figure 3b on training combinations (``attribution_check.ablation``, the attention
    core)."""
    from reportgen.bench import attribution_check

    targets = [attribution_check.Target(c) for c in combos if c.mode in TRAIN_MODES]
    fig = attribution_check.ablation(targets, rounds=rounds, max_rounds=max_rounds, precision=precision,
                                     min_pairs=min_pairs, budget_s=budget_s, log=log, stop=stop)
    return _retitled(fig, "Attention ablation: training step", QUESTION_ABLATION)


def run(*, quick: bool, log: Callable[[str], None] = print,
        stop: Callable[[], bool] = lambda: False) -> dict[str, dict[str, Any]]:
    """Both figures at the bench's sizes (``quick``: tiny models, a few rounds)."""
    latency_combos = combinations(quick=quick)
    # the ablation on the full step: its optimizer adds time and no attention work
    ablation_combos = combinations(quick=quick, modes=(TRAIN,), seq_len=ABLATION_SEQ)
    rounds, budget_s, min_run_time = (2, 0.3, 0.2) if quick else (6, 1.0, 0.6)
    abl_rounds, abl_max, abl_pairs, abl_budget = (2, 2, 4, 0.3) if quick else (4, 10, 12, 60.0)
    return {
        "training_latency_agreement": latency_figure(
            latency_combos, rounds=rounds, budget_s=budget_s, min_run_time=min_run_time, log=log, stop=stop),
        "training_ablation": ablation_figure(
            ablation_combos, rounds=abl_rounds, max_rounds=abl_max, precision=0.05, min_pairs=abl_pairs,
            budget_s=abl_budget, log=log, stop=stop),
    }
