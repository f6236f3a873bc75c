"""What one invocation measures and how a unit's outcome becomes a record: the ``Job``
every executor runs (the local executor, the inline one, a Slurm task's).

A job knows its combinations, settings and run directory, hands out its units of work
(``execute.rounds``), and writes what each unit produced: a round, or the combination's
record once its rounds decide it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reportgen.execute import rounds
from reportgen.execute.plan import read_record
from reportgen.execute.record import combination_record
from reportgen.execute.supervisor import Outcome
from reportgen.records.stamps import utc_now
from reportgen.records.status import FAILED, OK, is_failed
from reportgen.records.store import RunStore
from reportgen.suite import Combination, Settings


@dataclass
class Job:
    """What one invocation measures, and where its records go."""

    store: RunStore
    todo: list[Combination]
    settings: Settings
    git: Mapping[str, Any]
    retry_failed: bool = False
    force: bool = False
    executor: str = "local"
    records: list[dict[str, Any]] = field(default_factory=list)
    # rounds to measure again (contended), appended by finish_unit for the executor
    retries: list[rounds.Unit] = field(default_factory=list)

    def task(self, combo: Combination) -> dict[str, Any]:
        out = {"combo": combo, "combo_id": combo.id, "run_dir": self.store.run_dir,
               "budget_s": self.settings.budget_s, "seed": self.settings.seed,
               "profile_iterations": self.settings.profile_iterations}
        if self.settings.studies:  # only when asked: a measure without studies keeps its call
            out["options"] = {"studies": list(self.settings.studies),
                              "study_budget_s": self.settings.study_budget_s}
        return out

    def still_wanted(self, combo: Combination) -> bool:
        """Re-checked after claiming: another process may have finished it meanwhile."""
        if self.force:
            return True
        record = read_record(self.store.run_dir, combo.id)
        return record is None or (self.retry_failed and is_failed(record))

    def units(self) -> list[rounds.Unit]:
        """This invocation's units of work (``execute.rounds``): rounds measured before
        are kept on a plain resume and forgotten when combinations are measured afresh."""
        if self.settings.rounds > 1:
            afresh = [c.id for c in self.todo if read_record(self.store.run_dir, c.id) is not None]
            rounds.discard_rounds(self.store.run_dir, afresh)
        return rounds.order(self.todo, self.settings.rounds, self.settings.seed, self.store.run_dir)

    def unit_wanted(self, unit: rounds.Unit, ended: set[str]) -> bool:
        if unit.combo.id in ended or not self.still_wanted(unit.combo):
            return False
        return unit.rounds == 1 or not rounds.round_path(self.store.run_dir, unit.combo.id, unit.round).exists()

    @property
    def policy(self) -> rounds.Policy:
        return rounds.Policy.of(self.settings)

    def finish_unit(self, unit: rounds.Unit, outcome: Outcome, *, started: str, seconds: float,
                    slurm: Mapping[str, Any] | None = None,
                    pending: Iterable[int] = ()) -> dict[str, Any] | None:
        """Write what one unit produced: the combination's record when it is finished (its
        rounds decided it, ``rounds.decide``; or a round that failed or was skipped), else
        the round alone (None). ``pending``: the combination's rounds still queued; a round
        to measure again is added to ``retries``."""
        if unit.rounds > 1 and outcome.status == OK:
            rounds.save_round(self.store.run_dir, rounds.round_payload(
                unit, outcome, started=started, finished=utc_now(), seconds=seconds))
            found, retry = rounds.complete(self.store.run_dir, unit, self.policy, pending)
            if retry is not None:
                self.retries.append(retry)
            if found is None:
                return None
            outcome, started, seconds = rounds.combination_outcome(found, self.policy)
        elif outcome.status == OK and outcome.sections:
            outcome = dataclasses.replace(outcome, sections=rounds.single_round(outcome.sections))
        record = outcome_record(self, unit.combo, outcome, started=started, seconds=seconds, slurm=slurm)
        self.store.write_combination(record)
        self.records.append(record)
        return record

    def take_retries(self) -> list[rounds.Unit]:
        out, self.retries[:] = list(self.retries), []
        return out

    def finish_ready(self) -> list[dict[str, Any]]:
        """Records for combinations whose rounds on disk already decide them but whose
        record is not written (a run killed between the two writes)."""
        written = []
        if self.settings.rounds > 1:
            policy = self.policy
            for combo in self.todo:
                found = rounds.read_rounds(self.store.run_dir, combo.id)
                if not found or read_record(self.store.run_dir, combo.id) is not None:
                    continue
                planned = set(range(self.settings.rounds)) - set(found)
                last = rounds.Unit(combo, max(found), self.settings.rounds)
                if rounds.decide(last, found, policy, planned).done:
                    outcome, started, seconds = rounds.combination_outcome(found, policy)
                    record = outcome_record(self, combo, outcome, started=started, seconds=seconds)
                    self.store.write_combination(record)
                    self.records.append(record)
                    written.append(record)
        return written


def outcome_record(job: Job, combo: Combination, outcome: Outcome, *, started: str, seconds: float,
                   slurm: Mapping[str, Any] | None = None) -> dict[str, Any]:
    execution: dict[str, Any] = {"executor": job.executor, **outcome.execution}
    if slurm:
        execution["slurm"] = dict(slurm)
    if outcome.status == FAILED and outcome.log_tail:
        execution["log_tail"] = outcome.log_tail
    return combination_record(
        combo, run_id=job.store.run_id, status=outcome.status, reason=outcome.reason, started=started,
        finished=utc_now(), duration_s=seconds, git=job.git,
        sections=outcome.sections if outcome.status == OK else None,
        error_traceback=outcome.traceback,
        extra={"preflight": outcome.preflight, "device": outcome.device, "execution": execution},
    )


def rounds_combo(job: Job, record: Mapping[str, Any]) -> Combination:
    return next(c for c in job.todo if c.id == record["id"])
