"""The workload of the read-atomic edge scenarios (`ramp_edges`), over `ramp_workload`'s
100 integer keys and its recorded sessions.

- `edge_writer`: transactions that `tx.delete` some keys and give some a short `ttl`
  (`EdgeMix`), or write whole groups (`group_layout`); every third one cancelled at
  the next step of both rounds (`StepTopology`), or its COMMIT calls lost
  (`EdgeTopology`, the `LOSS_MODES`), or (`hold_every`) held `HOLD` seconds between
  its rounds; the keys of a transaction cut mid-commit rest a while
  (`WriterKit.rest_keys`), keys whose commit failed on one shard for good;
- `group_deleter`: `st.delete(key, [key], version=V)` of one key at a time, half of
  them aimed at resting keys;
- `group_reader`: `st.read(group, keys, repair=NewestWins())`, recorded as `gread`;
- `sweeper`: the repair worker's `sweep_versions`, periodically;
- `final_reads`: `read_atomic` of every key (`final`), then the raw GETs (`raw`).
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import random
import time
from collections.abc import Callable, Container, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from stampede._client import Stampede
from stampede._txn.scripts import COMMIT, COMMIT_ONE
from stampede.errors import MalformedEnvelope, OrderingError, ShardUnavailable, StampedeError
from stampede.repair import sweep_versions
from stampede.typing import RepairStrategy, Topology
from stampede.wire import Envelope

from .env import Run
from .history import History
from .ramp_workload import KEYS, RampSession, Step, StepPlan, StepTopology, key_name, read_once
from .workload import READ_RETRY

__all__ = [
    "LOSS_MODES",
    "EdgeMix",
    "EdgeTopology",
    "WriterKit",
    "edge_writer",
    "final_reads",
    "group_deleter",
    "group_layout",
    "group_reader",
    "sweeper",
]

SWEEP_EVERY = 0.25
REST_CAP = 24
"""Most keys resting at once: the writers always have most of the 100 keys to write."""
HOLD = 0.3
"""Seconds a held transaction waits before its first COMMIT call (a writer stalled between
its two rounds): longer than the shortest TTLs and the tombstone grace."""
LOSS_MODES = ("none", "before", "none", "after", "none", "mixed", "none", "one-shard", "none",
              "once")  # fmt: skip
"""Per transaction, in turn: how its COMMIT calls fail. `before`: every call fails without
running; `after`: every call runs and its reply is lost; `mixed`: calls alternate between
the two (some keys committed, no reply); `one-shard`: the calls to its first key's shard
fail without running, the others pass (a receipt with pending keys); `once`: the first
call fails without running, the resends pass."""


@dataclass(frozen=True)
class EdgeMix:
    """What a transaction writes: 3-8 random keys (1 key for `one_key_share` of them), each
    deleted with `delete_share`; a TTL from `ttls` for `ttl_share` of them; or, with
    `groups`, every key of one or two groups."""

    delete_share: float = 0.0
    ttl_share: float = 0.0
    ttls: tuple[float, ...] = (0.05, 0.1, 0.2, 0.5)
    one_key_share: float = 0.0
    groups: tuple[tuple[int, ...], ...] = ()

    def choose(
        self, rng: random.Random, resting: Container[int] = ()
    ) -> tuple[list[int], set[int], float | None]:
        """Keys, the ones to delete, and the TTL of one transaction (none of `resting`)."""
        if self.groups:
            return pick_groups(rng, self.groups), set(), None
        size = 1 if rng.random() < self.one_key_share else rng.randint(3, 8)
        free = [k for k in range(KEYS) if k not in resting]
        keys = sorted(rng.sample(free, min(size, len(free))))
        deletes = {k for k in keys if rng.random() < self.delete_share}
        ttl = rng.choice(self.ttls) if rng.random() < self.ttl_share else None
        return keys, deletes, ttl


def group_layout(topology: Topology, size: int = 3, count: int = 20) -> tuple[tuple[int, ...], ...]:
    """`count` groups of `size` keys, each key on another shard where there are enough:
    the same groups for the same servers, in any process."""
    by_shard: dict[str, list[int]] = collections.defaultdict(list)
    for k in range(KEYS):
        by_shard[topology.shard_of(key_name(k))].append(k)
    columns = [by_shard[s] for s in sorted(by_shard)]
    ordered = [k for row in zip(*columns, strict=False) for k in row]
    return tuple(tuple(sorted(ordered[i : i + size])) for i in range(0, size * count, size))


def pick_groups(rng: random.Random, groups: Sequence[Sequence[int]]) -> list[int]:
    """Every key of one or two groups."""
    chosen = rng.sample(range(len(groups)), rng.choice((1, 1, 2)))
    return sorted(k for g in chosen for k in groups[g])


@dataclass
class LossPlan:
    """How the COMMIT calls of the transaction of this context fail (`LOSS_MODES`)."""

    mode: str
    calls: int = 0
    shard: str | None = None  # `one-shard`: the shard whose calls fail
    on_fail: Callable[[Sequence[bytes]], None] | None = None  # `one-shard`: its keys


CURRENT_LOSS: contextvars.ContextVar[LossPlan | None] = contextvars.ContextVar(
    "stampede_ramp_loss", default=None
)


class EdgeTopology(StepTopology):
    """`StepTopology` that also loses the COMMIT calls of the transaction in `CURRENT_LOSS`."""

    _COMMITS: ClassVar[frozenset[str]] = frozenset({COMMIT.sha, COMMIT_ONE.sha})

    async def script(self, script: Any, keys: Sequence[bytes], args: Sequence[Any]) -> Any:
        loss = CURRENT_LOSS.get()
        if loss is None or script.sha not in self._COMMITS:
            return await super().script(script, keys, args)
        loss.calls += 1
        shard = self.inner.shard_of(keys[0])
        mode = loss.mode
        if mode == "mixed":
            mode = "after" if loss.calls % 2 else "before"
        elif mode == "once":
            mode = "before" if loss.calls == 1 else "none"
        elif mode == "one-shard":
            loss.shard = loss.shard or shard
            mode = "before" if shard == loss.shard else "none"
            if mode == "before" and loss.on_fail is not None:
                loss.on_fail(keys[0::2])  # the data keys (each is followed by its hash)
        if mode == "after":
            await self.inner.script(script, keys, args)
        if mode in ("before", "after"):
            raise ShardUnavailable(f"commit reply lost (injected, {mode})", shard=shard)
        return await super().script(script, keys, args)


@dataclass
class WriterKit:
    """What the writers, deleters and readers of one run share.

    The keys of a transaction cut mid-commit (cancelled at a COMMIT step) rest for
    `rest` seconds (at most `REST_CAP` keys at a time): no writer touches them, the
    deleters aim at them (`cut`) and the readers read them together (`cut_sets`), so
    what happens to a half-committed transaction whose keys are deleted and left
    alone is seen."""

    run: Run
    st: Stampede
    until: float
    mix: EdgeMix
    steps: Iterator[Step] | None = None  # every third transaction cancelled at the next one
    losses: Iterator[str] | None = None  # a LOSS_MODES entry per transaction
    rest: float = 0.0
    freeze_pending: bool = False  # keys whose commit fails on one shard: written no more
    tally: collections.Counter[str] = field(default_factory=collections.Counter)
    cut: collections.deque[int] = field(default_factory=lambda: collections.deque(maxlen=64))
    cut_sets: collections.deque[tuple[int, ...]] = field(
        default_factory=lambda: collections.deque(maxlen=16)
    )
    resting: dict[int, float] = field(default_factory=dict)

    def rest_keys(self, keys: Sequence[int]) -> None:
        """Let the keys of a transaction cut mid-commit rest, if there is room."""
        if not self.rest or len(self.now_resting()) + len(keys) > REST_CAP:
            return
        until = time.monotonic() + self.rest
        self.resting.update(dict.fromkeys(keys, until))
        self.cut.extend(keys)
        self.cut_sets.append(tuple(keys))

    def next_loss(self, session: int, keys: Sequence[int]) -> LossPlan | None:
        """The next transaction's `LossPlan` (recorded as a `lost-commit` fault), if any."""
        mode = "none" if self.losses is None else next(self.losses)
        if mode == "none":
            return None
        self.run.history.fault("lost-commit", mode=mode, session=session, keys=len(keys))
        self.tally[f"lost-{mode}"] += 1
        return LossPlan(mode, on_fail=self.freeze if self.freeze_pending else None)

    def freeze(self, names: Sequence[bytes]) -> None:
        """No writer writes these keys again (their commit failed on one shard)."""
        fresh = {int(n.rsplit(b":", 1)[1]) for n in names} - self.resting.keys()
        self.resting.update(dict.fromkeys(fresh, float("inf")))
        self.tally["frozen"] += len(fresh)

    def now_resting(self) -> set[int]:
        now = time.monotonic()
        return {k for k, until in self.resting.items() if until > now}

    def pick_read(self, rng: random.Random) -> list[int]:
        """3-8 random keys; half the time a cut transaction's keys and a few more."""
        keys = set(rng.sample(range(KEYS), rng.randint(3, 8)))
        if self.cut_sets and rng.random() < 0.5:
            keys = set(rng.choice(self.cut_sets)) | set(list(keys)[:2])
        return sorted(keys)


async def edge_writer(
    kit: WriterKit, session: int, rng: random.Random, *, hold_every: int = 0
) -> None:
    """Transactions of `kit.mix` until `kit.until`, cancelled or lost as `kit` says; with
    `hold_every`, every n-th one waits `HOLD` seconds before its first COMMIT call (and
    none is cancelled)."""
    history = kit.run.history
    writer = RampSession(kit.st, history, session, f"w{session}")
    task = asyncio.current_task()
    assert task is not None

    async def cancel(at: Step) -> None:
        history.fault("crash", point=str(at), style="cancel", session=session)
        kit.tally["cancelled"] += 1
        task.cancel()
        await asyncio.sleep(3600)  # cancelled with the writer's task

    async def hold(at: Step) -> None:
        history.fault("hold", point=str(at), seconds=HOLD, session=session)
        kit.tally["held"] += 1
        await asyncio.sleep(HOLD)

    def plan_for(n: int, keys: Sequence[int]) -> StepPlan | None:
        calls = writer.steps_of(keys)
        if hold_every:
            hit = n % hold_every == 0 and calls["prepare"]
            return StepPlan(Step("commit", 0, "before"), hold) if hit else None
        if kit.steps is None or n % 3:
            return None
        step = next(kit.steps)
        if not calls[step.phase]:
            return None
        return StepPlan(Step(step.phase, step.index % calls[step.phase], step.when), cancel)

    n = 0
    while time.monotonic() < kit.until:
        n += 1
        keys, deletes, ttl = kit.mix.choose(rng, kit.now_resting())
        plan = plan_for(n, keys)
        token = CURRENT_LOSS.set(kit.next_loss(session, keys))
        try:
            outcome = await writer.transact(keys, plan, deletes=deletes, ttl=ttl)
        except asyncio.CancelledError:
            if task.cancelling() == 0:
                raise
            task.uncancel()  # our own cancel: the writer carries on with the next one
            if plan is not None and plan.step.phase == "commit":
                kit.rest_keys(keys)
            continue
        finally:
            CURRENT_LOSS.reset(token)
        kit.tally[outcome] += 1
        if outcome != "ok":
            await asyncio.sleep(0.02)


async def group_deleter(kit: WriterKit, session: int, rng: random.Random, every: float) -> None:
    """`st.delete` of one key about every `every` seconds; half the time a key of a
    transaction cut mid-commit (`kit.cut`), when there is one."""
    history = kit.run.history
    clock = RampSession(kit.st, history, session, f"d{session}")  # for its versions
    while time.monotonic() < kit.until:
        key = kit.cut.pop() if kit.cut and rng.random() < 0.5 else rng.randrange(KEYS)
        version = clock.next_version()
        op = history.next_op(f"d{session}")
        name = key_name(key)
        history.record("invoke", op, f="gdel", session=session, version=version,
                       writes={str(key): None}, grace=kit.st.options.tombstone_grace)  # fmt: skip
        sent = time.monotonic()  # its tombstone's instant is computed now
        try:
            receipt = await kit.st.delete(name, [name], version=version)
        except OrderingError as exc:  # refused by the guard: nothing written
            history.record("fail", op, f="gdel", error=type(exc).__name__, sent=sent)
        except StampedeError as exc:
            history.record("unknown", op, f="gdel", error=type(exc).__name__,
                           msg=str(exc)[:200], sent=sent)  # fmt: skip
        else:
            superseded = [k.decode() for k in receipt.superseded]
            history.record("ok", op, f="gdel", superseded=superseded, sent=sent)
            kit.tally["deleted"] += 1
        await asyncio.sleep(rng.uniform(0, 2 * every))


def _int(payload: bytes | None) -> int | None:
    if payload is None:
        return None
    return int(payload) if payload.isdigit() else -1  # -1: a phantom to the checker


async def group_read_once(st: Stampede, history: History, session: int, gid: int,
                          keys: Sequence[int], repair: RepairStrategy) -> bool:  # fmt: skip
    """One group read of group `gid` (stamp mode, NewestWins), recorded as `gread`."""
    op = history.next_op(f"g{session}")
    history.record("invoke", op, f="gread", session=session, group=gid, keys=list(keys))
    try:
        result = await st.read(
            f"ramp-g{gid}", [key_name(k) for k in keys], retry=READ_RETRY, repair=repair
        )
    except StampedeError as exc:
        history.record("fail", op, f="gread", error=type(exc).__name__, msg=str(exc)[:200])
        return False
    values = {str(k): _int(result.values[key_name(k)]) for k in keys}
    history.record("ok", op, f="gread", status=result.status.value, values=values,
                   consistent=result.consistent, repaired=result.repaired)  # fmt: skip
    return True


async def group_reader(kit: WriterKit, session: int, rng: random.Random,
                       repair: RepairStrategy) -> None:  # fmt: skip
    """Group reads of random groups of `kit.mix.groups` until `kit.until`."""
    groups = kit.mix.groups
    while time.monotonic() < kit.until:
        gid = rng.randrange(len(groups))
        if not await group_read_once(kit.st, kit.run.history, session, gid, groups[gid], repair):
            await asyncio.sleep(0.02)


async def sweep_once(run: Run, grace: float) -> None:
    """The repair worker's sweep over every shard, recorded as a `sweep` fault event."""
    try:
        visited = await sweep_versions(run.topology, grace=grace)
    except StampedeError as exc:
        run.history.fault("sweep", error=type(exc).__name__, msg=str(exc)[:200])
    else:
        run.history.fault("sweep", visited=visited)


async def sweeper(run: Run, until: float, grace: float) -> None:
    """`sweep_once` every `SWEEP_EVERY` seconds until `until`."""
    while time.monotonic() < until:
        await asyncio.sleep(SWEEP_EVERY)
        await sweep_once(run, grace)


async def raw_snapshot(topology: Topology, history: History, keys: Sequence[int]) -> None:
    """GET and PEXPIRETIME of every key, recorded as `raw`: values, tombstones' versions and
    expiry instants (-1: none)."""
    op = history.next_op("raw")
    history.record("invoke", op, f="raw", keys=list(keys))
    names = [key_name(k) for k in keys]
    try:
        got = await topology.fetch(names)
        at = await asyncio.gather(*(topology.execute(n, "PEXPIRETIME", n) for n in names))
    except StampedeError as exc:
        history.record("fail", op, f="raw", error=type(exc).__name__, msg=str(exc)[:200])
        return
    values: dict[str, int | None] = {}
    tombs: dict[str, int] = {}
    for k, name, raw in zip(keys, names, got, strict=True):
        try:
            env = None if raw is None else Envelope.decode(raw, key=name)
        except MalformedEnvelope:
            values[str(k)] = -1
            continue
        values[str(k)] = None if env is None or env.tombstone else _int(env.payload)
        if env is not None and env.tombstone:
            tombs[str(k)] = env.version
    expiry = {str(k): int(a) for k, a in zip(keys, at, strict=True)}
    history.record("ok", op, f="raw", values=values, tombs=tombs, expiry=expiry)


async def final_reads(st: Stampede, history: History, keys: Sequence[int], *,
                      raw: bool = True) -> bool:  # fmt: skip
    """The last `read_atomic` of `keys` (`final`), then their raw GETs; whether it read."""
    read = await read_once(st, history, 999, 1, keys, final=True)
    if raw:
        await raw_snapshot(st.topology, history, keys)
    return read
