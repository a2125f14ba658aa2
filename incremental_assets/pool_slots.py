"""A table's pool slot, never held for good by a run that died.

The shipped dagster.yaml gives each table's pool one slot, so one run of a table writes at a time.
A run killed while it holds the slot (SIGKILL, the OOM killer, a lost node) never frees it, and
Dagster frees it only when the run is deleted, or through the daemon's run monitoring, which a run
started from a shell escapes and which can't tell that a run of the default launcher died. Every
later run of the table would wait for it forever.

So every run of the package's jobs records where its process runs (`WORKER_TAG`) and renews a beat
every `run_liveness.BEAT` (`BEAT_TAG`), and a run whose tables' pools are held or queued for by
other runs judges them (`run_liveness.verdict`) before its steps wait, and again while they do:

    dead      (ended, its process gone, or elsewhere with a beat unchanged for a `LEASE`): marked
              failed (`FREED_BY_TAG` says by whom), its slots freed, and this run goes ahead,
              saying so; a run so judged that was only stalled records nothing when it goes on
              (`refuse_if_freed`)
    live      this run waits for it, saying so
    unknown   (it recorded nothing of itself) a holder is awaited `UNKNOWN_WAIT`, then this run
              fails, naming it and the command that frees its slots (`free_slots`); a run only
              queued is let be

The guard is the jobs' executor (`in_process_executor`), so it runs in every run worker: `dagster
asset materialize`, runs the daemon launches, the UI's; `incremental-assets run`, which executes
in its own process, enters `guarding` itself. Under the daemon, Dagster's run queue holds a run
whose pool is full before it has a worker, so the project's sensor (`free_dead`, every
`GUARD_INTERVAL`) frees dead runs' slots there.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import dagster as dg

from incremental_assets.errors import ConcurrentRunError, InstanceError, TableProblem
from incremental_assets.run_liveness import (
    BEAT,
    BeatWatch,
    Holder,
    Verdict,
    Worker,
    process_of,
    this_worker,
    verdict,
)

WORKER_TAG = "incremental_assets/worker"
BEAT_TAG = "incremental_assets/alive_at"
FREED_BY_TAG = "incremental_assets/freed_by"
UNKNOWN_WAIT = timedelta(seconds=60)
GUARD_INTERVAL = timedelta(seconds=30)
FREE_COMMAND = "incremental-assets free-slots"
_POLL = 5.0  # seconds between checks while a holder is awaited


@dataclass(frozen=True)
class Judged:
    holder: Holder
    verdict: Verdict
    pools: tuple[str, ...]

    def describe(self) -> str:
        held = "held" if self.holder.holds else "was queued for"
        return f"run {self.holder.run_id} {held} the pool {', '.join(self.pools)}"


def worker_tags() -> dict[str, str]:
    """The tags a run of this process starts with."""
    return {WORKER_TAG: this_worker().to_tag(), BEAT_TAG: _now().isoformat()}


def judge(
    instance: dg.DagsterInstance, pools: Collection[str], own_run_id: str, watch: BeatWatch
) -> list[Judged]:
    """The other runs holding or queued for a slot of `pools`, each judged, their beats watched
    with this process's clock (`watch` keeps what it saw, for the next call)."""
    if not pools or not instance.event_log_storage.supports_global_concurrency_limits:
        return []
    infos = instance.event_log_storage.get_concurrency_infos(sorted(pools))
    runs: dict[str, tuple[set[str], bool]] = {}
    for pool, info in infos.items():
        holding = {s.run_id for s in info.claimed_slots}
        for run_id in holding | {p.run_id for p in info.pending_steps}:
            if run_id != own_run_id:
                held, holds = runs.get(run_id, (set(), False))
                runs[run_id] = ({*held, pool}, holds or run_id in holding)
    here, now = this_worker(), time.monotonic()
    watch.forget_except(set(runs))
    judged = []
    for run_id, (held, holds) in runs.items():
        holder = _holder(instance, run_id, here, holds)
        unchanged = watch.unchanged_for(run_id, holder.beat, now)
        judged.append(Judged(holder, verdict(holder, unchanged), tuple(sorted(held))))
    return judged


def free(instance: dg.DagsterInstance, judged: Judged, by: str) -> str:
    """Mark a dead run failed (unless it ended) and free its slots; what to say about it."""
    run = instance.get_run_by_id(judged.holder.run_id)
    reason = judged.verdict.reason
    done = "its slots were freed"
    if run is not None and not run.is_finished:
        instance.add_run_tags(run.run_id, {FREED_BY_TAG: by})
        instance.report_run_failed(run, f"Marked failed by {by}: {reason}. {done.capitalize()}.")
        done = "it was marked failed and its slots freed"
    instance.event_log_storage.free_concurrency_slots_for_run(judged.holder.run_id)
    return f"{judged.describe()}, but {reason}: {done}."


def free_dead(
    instance: dg.DagsterInstance,
    pools: Collection[str],
    own_run_id: str,
    by: str,
    watch: BeatWatch,
) -> list[str]:
    """Free the slots of the runs that hold or are queued for `pools` and are surely dead;
    what was done, one sentence each."""
    return [
        free(instance, judged, by)
        for judged in judge(instance, pools, own_run_id, watch)
        if judged.verdict.kind == "dead"
    ]


def free_slots(instance: dg.DagsterInstance, run_id: str, say: Callable[[str], None]) -> str:
    """`incremental-assets free-slots RUN_ID`: free a run's slots by hand, unless it is alive
    (a run on another machine is watched for up to a `LEASE` first)."""
    storage = instance.event_log_storage
    infos = storage.get_concurrency_infos(sorted(storage.get_concurrency_keys()))
    pools = tuple(p for p, i in infos.items() if run_id in {s.run_id for s in i.claimed_slots})
    queued = tuple(p for p, i in infos.items() if run_id in {s.run_id for s in i.pending_steps})
    holder = _holder(instance, run_id, this_worker(), bool(pools))
    if not pools and not queued:
        if holder.status == "deleted":
            raise InstanceError(
                f"there is no run {run_id} in this instance, and no pool slot is held or queued "
                "for by that id: check the run id (incremental-assets status, or the UI's Runs)."
            )
        return f"run {run_id} ({holder.status}) holds no pool slot and is queued for none."
    watch, first = BeatWatch(), holder.beat
    judged = verdict(holder, watch.unchanged_for(run_id, holder.beat, time.monotonic()))
    if judged.kind == "live" and holder.process == "elsewhere":
        say(f"run {run_id} runs on another machine: watching whether its beat moves")
        while judged.kind == "live" and holder.beat == first:
            time.sleep(_POLL)
            holder = _holder(instance, run_id, this_worker(), bool(pools))
            judged = verdict(holder, watch.unchanged_for(run_id, holder.beat, time.monotonic()))
    if judged.kind == "live":
        raise InstanceError(
            f"run {run_id} is alive ({judged.reason}): its slots were left as they are. Stop it "
            "first (the UI's Terminate, or kill its process), then run this again."
        )
    if judged.kind == "unknown":
        judged = Verdict("dead", f"{judged.reason}, and it was freed by hand")
    return free(instance, Judged(holder, judged, pools or queued), f"`{FREE_COMMAND}`")


def refuse_if_freed(instance: dg.DagsterInstance, run_id: str, table: str) -> None:
    """Fail a run that another judged dead and freed the slot of (it was stalled, not dead):
    recording its materialization now would put it after the run that took its slot."""
    run = instance.get_run_by_id(run_id)
    by = run.tags.get(FREED_BY_TAG) if run is not None else None
    if by:
        raise ConcurrentRunError(
            TableProblem(
                table,
                f"this run stalled long enough to be judged dead by {by}, which gave the "
                "table's pool slot to another run. It records nothing: the cursor did not "
                "move. A commit it made is the next run's to recognise and repeat.",
                fix="run again if no other run of the table is going on; to keep a stall from "
                "being taken for death, keep the run's machine from freezing for a minute.",
            )
        )


@contextmanager
def guarding(
    instance: dg.DagsterInstance,
    run_id: str,
    pools: Collection[str],
    say: Callable[[str], None],
) -> Iterator[None]:
    """While the body runs (the run's steps): beat, and free the slots of dead runs that hold or
    are queued for `pools`. First, wait `UNKNOWN_WAIT` for holders that can't be judged, then
    fail."""
    watch = BeatWatch()
    _settle(instance, run_id, pools, say, watch)
    stop = threading.Event()
    thread = threading.Thread(
        target=_watch,
        args=(instance, run_id, frozenset(pools), say, stop, watch),
        name="incremental-assets-pool-guard",
        daemon=True,
    )
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


def _settle(
    instance: dg.DagsterInstance,
    run_id: str,
    pools: Collection[str],
    say: Callable[[str], None],
    watch: BeatWatch,
) -> None:
    """Before the steps claim their slots: dead holders freed, live ones named, holders that
    can't be judged awaited for `UNKNOWN_WAIT`, then refused."""
    deadline = time.monotonic() + UNKNOWN_WAIT.total_seconds()
    named: set[str] = set()
    while True:
        unknown = []
        for judged in judge(instance, pools, run_id, watch):
            kind, holder = judged.verdict.kind, judged.holder
            if kind == "dead":
                say(free(instance, judged, f"run {run_id}"))
            elif kind == "unknown" and holder.holds:
                unknown.append(judged)
            elif holder.holds and holder.run_id not in named:
                named.add(holder.run_id)
                late = f" If it hasn't ended within {UNKNOWN_WAIT}, this run fails."
                say(_waiting(judged) + (late if kind == "unknown" else ""))
        if not unknown:
            return
        if time.monotonic() >= deadline:
            raise ConcurrentRunError(_unknown_message(unknown))
        time.sleep(_POLL)


def _watch(
    instance: dg.DagsterInstance,
    run_id: str,
    pools: frozenset[str],
    say: Callable[[str], None],
    stop: threading.Event,
    watch: BeatWatch,
) -> None:
    """Beat, and while this run waits for a slot, free dead holders: a live holder may die."""
    while not stop.wait(BEAT.total_seconds()):
        try:
            instance.add_run_tags(run_id, {BEAT_TAG: _now().isoformat()})
            if _waiting_for_slots(instance, run_id, pools):
                for freed in free_dead(instance, pools, run_id, f"run {run_id}", watch):
                    say(freed)
        except Exception as exc:  # a beat missed is not a run failed
            say(f"the pool guard could not reach the instance: {type(exc).__name__}: {exc}")


def _waiting_for_slots(instance: dg.DagsterInstance, run_id: str, pools: Collection[str]) -> bool:
    infos = instance.event_log_storage.get_concurrency_infos(sorted(pools))
    return any(
        p.run_id == run_id for info in infos.values() for p in info.pending_steps
    ) and not any(s.run_id == run_id for info in infos.values() for s in info.claimed_slots)


def _holder(instance: dg.DagsterInstance, run_id: str, here: Worker, holds: bool) -> Holder:
    run = instance.get_run_by_id(run_id)
    if run is None:
        return Holder(run_id, "deleted", True, None, None, "elsewhere", holds)
    worker = Worker.from_tag(run.tags.get(WORKER_TAG))
    return Holder(
        run_id=run_id,
        status=run.status.value,
        ended=run.is_finished,
        worker=worker,
        beat=run.tags.get(BEAT_TAG),
        process=process_of(worker, here) if worker is not None else "elsewhere",
        holds=holds,
    )


def _waiting(judged: Judged) -> str:
    return (
        f"waiting for run {judged.holder.run_id}, which holds the pool "
        f"{', '.join(judged.pools)}: {judged.verdict.reason}."
    )


def _unknown_message(unknown: list[Judged]) -> str:
    runs = "; ".join(
        f"run {j.holder.run_id} ({', '.join(j.pools)}): {j.verdict.reason}" for j in unknown
    )
    commands = " and ".join(f"`{FREE_COMMAND} {j.holder.run_id}`" for j in unknown)
    return (
        f"this run waited {UNKNOWN_WAIT} for the pool of its table, held by a run that can't be "
        f"told alive or dead: {runs}. Nothing was read or written. If that run is still going, "
        f"run this one again after it ends; if it is dead, free its slots with {commands}, then "
        "run again."
    )


def sensor_watch(cursor: str | None) -> BeatWatch:
    """The beats the pool guard sensor saw, from its cursor (its clock: the daemon's)."""
    try:
        seen = json.loads(cursor) if cursor else {}
        return BeatWatch({str(r): (str(b), float(t)) for r, (b, t) in seen.items()})
    except (ValueError, TypeError):
        return BeatWatch()


def sensor_cursor(watch: BeatWatch) -> str:
    return json.dumps({r: [b, t] for r, (b, t) in watch.seen.items()}, sort_keys=True)


def _now() -> datetime:
    return datetime.now(UTC)


class _GuardedExecutor(dg.Executor):
    """An executor that runs its steps under `guarding`."""

    def __init__(self, inner: dg.Executor) -> None:
        self._inner = inner

    @property
    def retries(self) -> Any:
        return self._inner.retries

    def execute(self, plan_context: Any, execution_plan: Any) -> Iterator[Any]:
        pools = {s.pool for s in execution_plan.get_steps_to_execute_in_topo_order() if s.pool}
        instance, run_id = plan_context.instance, plan_context.run_id
        instance.add_run_tags(run_id, worker_tags())
        with guarding(instance, run_id, pools, plan_context.log.warning):
            yield from self._inner.execute(plan_context, execution_plan)


def _guarded_in_process(init_context: dg.InitExecutorContext) -> dg.Executor:
    create = dg.in_process_executor.executor_creation_fn
    assert create is not None
    return _GuardedExecutor(create(init_context))


# Dagster's in-process executor (one process per run: Spark's JVM starts once and serves every
# table), its steps under the pool guard; named and configured as Dagster's own.
in_process_executor = dg.ExecutorDefinition(
    name="in_process",
    config_schema=dg.in_process_executor.config_schema.as_field(),
    executor_creation_fn=_guarded_in_process,
    description="Dagster's in-process executor, freeing the pool slots of runs that died.",
)
