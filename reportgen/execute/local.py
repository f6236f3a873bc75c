"""The local executor: one supervised worker per device on this host.

Combinations are handed out dynamically, largest first, to whichever worker is free.
Each is claimed in the run directory before it is measured (``plan.Claims``), so a
local run and Slurm tasks on the same run never measure one combination twice, and its
record is written the moment it finishes. Ctrl-C (or SIGTERM) kills the workers, keeps
every finished record and leaves the unfinished ones pending.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from reportgen.execute import rounds
from reportgen.execute.console import Progress
from reportgen.execute.forkserver import ForkServer, preload_for
from reportgen.execute.job import Job, rounds_combo
from reportgen.execute.plan import HEARTBEAT_S, Claims
from reportgen.execute.supervisor import Supervisor
from reportgen.execute.worker import WorkerSpec
from reportgen.records import paths
from reportgen.records.stamps import utc_now


class LocalExecutor:
    name = "local"

    def __init__(self, specs: list[WorkerSpec], *, timeout_s: float,
                 supervisor: Callable[..., Supervisor] = Supervisor, fork: bool = True,
                 python: str = sys.executable) -> None:
        self.specs = specs
        self.python = python  # the workers' interpreter (another: its torch and transformers)
        self.timeout_s = timeout_s
        self.make_supervisor = supervisor
        self.fork = fork  # CPU workers forked from a fork server (else each one spawned)
        self.early: ForkServer | None = None  # started by `start_early`, not yet handed to a run

    def _measures(self) -> list[str | None] | None:
        cpu = [spec for spec in self.specs if spec.device == "cpu"]
        if not self.fork or not cpu:
            return None
        return [p for spec in cpu for p in (spec.measure, spec.preflight)]

    def start_early(self, combos: list[Any]) -> None:
        """Start the fork server for ``combos`` now, while the run is still being set up
        (its imports overlap the parent's); `wait_started` waits for it to be ready."""
        measures = self._measures()
        if measures is None or self.early is not None:
            return
        self.early = ForkServer(log_dir=None, preload=preload_for(combos, measures), python=self.python)
        self.early.start_soon()

    def wait_started(self) -> None:
        if self.early is not None:
            self.early.wait_started()

    def release(self) -> None:
        """Stop a server started early that no run took (nothing was left to measure)."""
        if self.early is not None:
            self.early.close()
            self.early = None

    def _forkserver(self, job: Job, log_dir: Any) -> ForkServer | None:
        if self.early is not None:
            server, self.early = self.early, None
            server.attach_log(log_dir)
            return server
        measures = self._measures()
        if measures is None:
            return None
        return ForkServer(log_dir=log_dir, preload=preload_for(job.todo, measures), python=self.python)

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
                                            **({"forkserver": forkserver} if forkserver else {}),
                                            **({"python": self.python} if self.python != sys.executable else {}))
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
