"""The local executor: one supervised worker per device on this host.

Combinations are handed out dynamically, largest first, to whichever worker is free.
Each is claimed in the run directory before it is measured (``plan.Claims``), so a
local run and Slurm tasks on the same run never measure one combination twice, and its
record is written the moment it finishes. Ctrl-C (or SIGTERM) kills the workers, keeps
every finished record and leaves the unfinished ones pending.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reportgen.execute import rounds
from reportgen.execute.console import Progress
from reportgen.execute.forkserver import ForkServer, preload_for
from reportgen.execute.plan import HEARTBEAT_S, Claims, read_record
from reportgen.execute.record import combination_record, utc_now
from reportgen.execute.supervisor import Outcome, Supervisor
from reportgen.execute.worker import WorkerSpec
from reportgen.records import paths
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


class LocalExecutor:
    name = "local"

    def __init__(self, specs: list[WorkerSpec], *, timeout_s: float,
                 supervisor: Callable[..., Supervisor] = Supervisor, fork: bool = True) -> None:
        self.specs = specs
        self.timeout_s = timeout_s
        self.make_supervisor = supervisor
        self.fork = fork  # CPU workers forked from a fork server (else each one spawned)

    def _forkserver(self, job: Job, log_dir: Any) -> ForkServer | None:
        cpu = [spec for spec in self.specs if spec.device == "cpu"]
        if not self.fork or not cpu:
            return None
        measures = [p for spec in cpu for p in (spec.measure, spec.preflight)]
        return ForkServer(log_dir=log_dir, preload=preload_for(job.todo, measures))

    def run(self, job: Job, progress: Progress) -> None:
        claims = Claims(job.store.run_dir)
        for record in job.finish_ready():
            progress.finish(rounds_combo(job, record), "cpu", record)
        queue = job.units()
        queue_lock = threading.Lock()
        stop = threading.Event()
        active: dict[str, str] = {}  # slot -> combination id being measured
        ended: set[str] = set()  # combinations whose record this invocation wrote
        errors: list[BaseException] = []
        log_dir = paths.logs_dir(job.store.run_dir)
        forkserver = self._forkserver(job, log_dir)
        supervisors = [self.make_supervisor(spec, log_dir=log_dir, timeout_s=self.timeout_s,
                                            **({"forkserver": forkserver} if forkserver else {}))
                       for spec in self.specs]

        def next_unit() -> rounds.Unit | None:
            with queue_lock:
                while queue and not stop.is_set():
                    # a combination another slot of ours is measuring waits for its turn
                    busy = set(active.values())
                    pick = next((u for u in queue if u.combo.id not in busy), None)
                    if pick is None:
                        return None if not busy else rounds.WAIT  # type: ignore[return-value]
                    queue.remove(pick)
                    if not claims.try_claim(pick.combo.id):
                        continue  # measured by another process right now
                    if not job.unit_wanted(pick, ended):
                        claims.release(pick.combo.id)
                        continue
                    return pick
                return None

        def work(sup: Supervisor) -> None:
            slot = sup.spec.slot
            current_round: int | None = None
            try:
                while not stop.is_set():
                    unit = next_unit()
                    if unit is rounds.WAIT:
                        time.sleep(0.2)
                        continue
                    if unit is None:
                        return
                    if (unit.rounds > 1 and current_round is not None and unit.round != current_round
                            and unit.round < unit.rounds):
                        sup.close()  # each round in a fresh worker process (a retry: any later one)
                    current_round = unit.round
                    combo = unit.combo
                    active[slot] = combo.id
                    progress.start(combo, slot)
                    started, t0 = utc_now(), time.perf_counter()
                    try:
                        outcome = sup.run(rounds.task(job, unit))
                    except BaseException:
                        claims.release(combo.id)
                        if stop.is_set():
                            return  # interrupted: the combination stays pending
                        raise
                    if stop.is_set():
                        claims.release(combo.id)
                        return
                    with queue_lock:
                        pending = [u.round for u in queue if u.combo.id == combo.id]
                    record = job.finish_unit(unit, outcome, started=started, seconds=time.perf_counter() - t0,
                                             slurm=claims.me.get("slurm"), pending=pending)
                    with queue_lock:
                        queue.extend(job.take_retries())
                    claims.release(combo.id)
                    active.pop(slot, None)
                    if record is None:
                        progress.pause(slot)
                    else:
                        ended.add(combo.id)
                        progress.finish(combo, slot, record, outcome.log_tail)
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread
                errors.append(exc)
                stop.set()
            finally:
                active.pop(slot, None)
                sup.close()

        def heartbeat() -> None:
            while not stop.wait(HEARTBEAT_S):
                claims.heartbeat(list(active.values()))

        threads = [threading.Thread(target=work, args=(sup,), name=f"supervise-{sup.spec.slot}", daemon=True)
                   for sup in supervisors]
        beat = threading.Thread(target=heartbeat, name="claims-heartbeat", daemon=True)
        for thread in threads:
            thread.start()
        beat.start()
        try:
            while any(thread.is_alive() for thread in threads):
                for thread in threads:
                    thread.join(timeout=0.2)
        except BaseException:
            stop.set()
            for sup in supervisors:
                sup.stopping = True
                sup.kill()
            for thread in threads:
                thread.join(timeout=30)
            raise
        finally:
            stop.set()
            beat.join(timeout=5)
            if forkserver is not None:
                forkserver.close()
        if errors:
            raise errors[0]
