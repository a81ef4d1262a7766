"""Lost replies: nothing non-idempotent is applied twice (issue item 5).

Every test runs stampede through `RedisProxy`s in front of the real servers (one
per primary, or per cluster master with the cluster client's `address_remap`),
which forward a chosen command to the server and then close the client's
connection instead of relaying its reply. Each case applied the operation twice,
or resent it blindly, before the retry policy of `stampede.topology._retries`.
"""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

import stampede
from stampede import (
    ClockSkewError,
    Envelope,
    Mode,
    OutcomeUnknownError,
    PartialWriteError,
    RetryPolicy,
    Stampede,
    atomic,
    eventlog,
)
from stampede._txn.scripts import COMMIT, PREPARE
from stampede._txn.write import run_units
from stampede.options import ConnectOptions, Durability, load_options
from stampede.repair import NewestWins, Refetch
from stampede.results import RepairAction
from stampede.testing import RedisProxy
from stampede.topology import Cluster
from stampede.topology._guard import CAS, GUARD
from stampede.wire import _record, commit_key, new_token
from stampede.wire._txn import encode_meta, side_key

from ..support import FAST, spread_keys, write_newer

GROUP = "acct:{5}"
BALANCE = "acct:{5}:balance"
QUICK = RetryPolicy(attempts=2, base_delay=0.001, max_delay=0.002, deadline=30.0)
COUNTER = "acct:{5}:counter"


def named(*names: bytes) -> Any:
    """A proxy match for commands whose name is one of `names`."""
    wanted = {n.upper() for n in names}
    return lambda cmd: cmd[0].upper() in wanted


EXEC = named(b"EXEC")
FENCE = lambda cmd: cmd[0].upper() == b"SET" and b"fenced" in cmd  # noqa: E731


class Proxied:
    """A `Stampede` whose every connection goes through a `RedisProxy`."""

    def __init__(self, st: Stampede, proxies: dict[str, RedisProxy]) -> None:
        self.st = st
        self.proxies = proxies

    def proxy_for(self, key: str) -> RedisProxy:
        """The proxy in front of the shard that holds `key`."""
        return self.proxies[self.st.topology.shard_of(key.encode())]


async def _proxied(
    kind: str, env: Any, connection: ConnectOptions = FAST
) -> tuple[Stampede, dict[str, RedisProxy]]:
    proxies: dict[str, RedisProxy] = {}
    if kind == "cluster":
        for node in env.masters:
            proxy = RedisProxy(node.address)
            await proxy.start()
            proxies[node.address] = proxy
        by_target = {f"{p.target[0]}:{p.target[1]}": p for p in proxies.values()}
        topology = Cluster(
            proxies[env.masters[0].address].url,
            options=connection,
            address_remap=lambda addr: (
                by_target[f"{addr[0]}:{addr[1]}"].host,
                by_target[f"{addr[0]}:{addr[1]}"].port,
            ),
        )
        await topology.open()
        st = Stampede(topology, options=load_options(None, {"connection": connection}))
        return st, {p.address: p for p in proxies.values()}
    for node in env.nodes:
        proxy = RedisProxy(node.address)
        await proxy.start()
        proxies[proxy.address] = proxy
    st = stampede.connect([p.url for p in proxies.values()], connection=connection)
    return st, proxies


@pytest.fixture
async def px(topology_env: tuple[str, Any]) -> AsyncIterator[Proxied]:
    """A proxied `Stampede` over each topology in turn."""
    kind, env = topology_env
    st, proxies = await _proxied(kind, env)
    try:
        yield Proxied(st, proxies)
    finally:
        await st.aclose()
        for proxy in proxies.values():
            await proxy.aclose()


async def _payload(st: Stampede, key: str) -> bytes:
    raw = await st.topology.execute(key.encode(), "GET", key)
    return Envelope.decode(raw).payload


def _deposit(calls: list[int]) -> Any:
    def fn(current: dict[str, bytes | None]) -> dict[str, bytes]:
        calls.append(1)
        return {BALANCE: str(int(current[BALANCE] or b"0") + 10).encode()}

    return fn


# -- update() -----------------------------------------------------------------------


async def test_update_deposit_is_applied_once_when_the_exec_reply_is_lost(px: Proxied) -> None:
    """EXEC ran, its reply was lost: the marker says so; fn is not run again, 10 stays 10."""
    rule = px.proxy_for(BALANCE).drop_reply(EXEC)
    calls: list[int] = []
    receipt = await px.st.update(GROUP, [BALANCE], _deposit(calls))
    assert rule.hits == 1
    assert await _payload(px.st, BALANCE) == b"10"
    assert len(calls) == 1
    assert Envelope.decode(
        await px.st.topology.execute(BALANCE.encode(), "GET", BALANCE)
    ).token == (receipt.token)


async def test_update_runs_fn_again_when_exec_never_reached_the_server(px: Proxied) -> None:
    """EXEC lost on the way: the fence stops it for good, fn runs again, one deposit lands."""
    rule = px.proxy_for(BALANCE).drop_before_forward(EXEC)
    calls: list[int] = []
    await px.st.update(GROUP, [BALANCE], _deposit(calls))
    assert rule.hits == 1
    assert await _payload(px.st, BALANCE) == b"10"
    assert len(calls) == 2


async def test_update_fence_whose_reply_is_lost_is_asked_again(px: Proxied) -> None:
    """The fence is idempotent: its own reply lost too, it is resent and finds 'applied'."""
    proxy = px.proxy_for(BALANCE)
    proxy.drop_reply(EXEC)
    fence = proxy.drop_reply(FENCE)
    calls: list[int] = []
    await px.st.update(GROUP, [BALANCE], _deposit(calls))
    assert fence.hits == 1
    assert await _payload(px.st, BALANCE) == b"10"
    assert len(calls) == 1


async def test_update_raises_outcome_unknown_when_the_fence_cannot_be_reached(
    px: Proxied,
) -> None:
    """No answer to the fence: OutcomeUnknownError naming MULTI/EXEC; applied once all the same."""
    proxy = px.proxy_for(BALANCE)
    proxy.drop_reply(EXEC)
    proxy.drop_before_forward(FENCE, times=None)
    calls: list[int] = []
    with pytest.raises(OutcomeUnknownError, match="MULTI/EXEC") as info:
        await px.st.update(GROUP, [BALANCE], _deposit(calls))
    assert info.value.shard == px.st.topology.shard_of(BALANCE.encode())
    proxy.clear()
    assert await _payload(px.st, BALANCE) == b"10"
    assert len(calls) == 1


# -- atomic ---------------------------------------------------------------------------


async def test_multi_is_not_applied_twice_when_the_exec_reply_is_lost(px: Proxied) -> None:
    """INCR in MULTI, EXEC's reply lost: OutcomeUnknownError saying it applied once; counter 1."""
    px.proxy_for(COUNTER).drop_reply(EXEC)
    with pytest.raises(OutcomeUnknownError, match="applied exactly once"):
        await atomic.multi(px.st, [("INCR", COUNTER)])
    assert await px.st.topology.execute(COUNTER.encode(), "GET", COUNTER) == b"1"
    assert await atomic.multi(px.st, [("INCR", COUNTER)]) == [2]


async def test_multi_is_resent_when_exec_never_reached_the_server(px: Proxied) -> None:
    """EXEC lost on the way: fenced off, sent again under a new marker, applied once."""
    rule = px.proxy_for(COUNTER).drop_before_forward(EXEC)
    assert await atomic.multi(px.st, [("INCR", COUNTER)]) == [1]
    assert rule.hits == 1
    assert await px.st.topology.execute(COUNTER.encode(), "GET", COUNTER) == b"1"


async def test_watch_is_applied_once_when_the_exec_reply_is_lost(px: Proxied) -> None:
    """atomic.watch: fn is not run again; the result says the replies were lost."""
    px.proxy_for(COUNTER).drop_reply(EXEC)
    calls: list[int] = []

    async def add_ten(tx: atomic.Watched) -> list[atomic.Command]:
        calls.append(1)
        return [("SET", COUNTER, int(await tx.get(COUNTER) or b"0") + 10)]

    result = await atomic.watch(px.st, [COUNTER], add_ten)
    assert result.replies_lost and result.written and result.results == []
    assert len(calls) == 1
    assert await px.st.topology.execute(COUNTER.encode(), "GET", COUNTER) == b"10"


async def test_watch_whose_read_or_unwatch_reply_is_lost_wrote_nothing(px: Proxied) -> None:
    """A connection lost before EXEC was sent (WATCH, a read of fn, the UNWATCH of a
    declining fn) wrote nothing, so the outcome is known: a declined watch returns
    written=False, and a read's loss runs fn again on a fresh connection. Both raised
    ShardUnavailable ("is the server up?") though the server had answered."""
    proxy = px.proxy_for(COUNTER)
    proxy.drop_reply(named(b"UNWATCH"))
    declined = await atomic.watch(px.st, [COUNTER], lambda tx: None)
    assert not declined.written and declined.attempts == 1
    proxy.drop_reply(named(b"GET"))
    calls: list[int] = []

    async def add_ten(tx: atomic.Watched) -> list[atomic.Command]:
        calls.append(1)
        return [("SET", COUNTER, int(await tx.get(COUNTER) or b"0") + 10)]

    result = await atomic.watch(px.st, [COUNTER], add_ten)
    assert result.written and result.attempts == 2 and len(calls) == 2
    assert await px.st.topology.execute(COUNTER.encode(), "GET", COUNTER) == b"10"


async def test_script_is_never_resent_after_a_lost_reply(px: Proxied) -> None:
    """A user's Lua cannot be fenced: OutcomeUnknownError naming it, and it ran once."""
    incr = atomic.script("return redis.call('INCR', KEYS[1])", name="bump")
    assert await incr(px.st, keys=[COUNTER]) == 1  # loaded on the node now
    rule = px.proxy_for(COUNTER).drop_reply(named(b"EVALSHA", b"EVAL"))
    with pytest.raises(OutcomeUnknownError, match="Lua bump"):
        await incr(px.st, keys=[COUNTER])
    assert rule.hits == 1
    assert await px.st.topology.execute(COUNTER.encode(), "GET", COUNTER) == b"2"


# -- event log ------------------------------------------------------------------------


async def test_append_changes_lands_once_when_the_exec_reply_is_lost(px: Proxied) -> None:
    """One entry per key, however the reply went: the transaction is exactly-once."""
    key = "order:{9}:status"
    rule = px.proxy_for(eventlog.log_key(key).decode()).drop_reply(EXEC)
    token = await eventlog.append_changes(px.st, {key: b"paid"})
    assert rule.hits == 1
    entries = await eventlog.read_log(px.st, key)
    assert [(e.token, e.change) for e in entries] == [(token, b"paid")]


# -- single commands -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "check"),
    [
        (("INCR", COUNTER), ("GET", COUNTER)),
        (("XADD", COUNTER, "*", "f", "v"), ("XLEN", COUNTER)),
    ],
)
async def test_a_non_idempotent_command_is_not_resent(
    px: Proxied, command: tuple[str, ...], check: tuple[str, ...]
) -> None:
    """topology.execute of INCR or XADD whose reply was lost: OutcomeUnknownError, applied once."""
    px.proxy_for(COUNTER).drop_reply(named(command[0].encode()))
    with pytest.raises(OutcomeUnknownError, match=command[0]) as info:
        await px.st.topology.execute(COUNTER.encode(), *command)
    assert info.value.shard == px.st.topology.shard_of(COUNTER.encode())
    assert int(await px.st.topology.execute(COUNTER.encode(), *check)) == 1


async def test_reads_and_guarded_writes_are_resent(px: Proxied) -> None:
    """A stamped write (guarded script) and a read whose replies were lost go through.
    The script is loaded first: a fresh server answers the first EVALSHA with NOSCRIPT,
    and losing that reply would lose a call that ran nothing."""
    proxy = px.proxy_for(BALANCE)
    await px.st.write(GROUP, {BALANCE: b"4"})
    write = proxy.drop_reply(named(b"EVALSHA", b"EVAL"))
    await px.st.write(GROUP, {BALANCE: b"5"})
    read = proxy.drop_reply(named(b"MGET", b"GET", b"EVALSHA"))
    result = await px.st.read(GROUP, [BALANCE])
    assert write.hits == 1 and read.hits == 1
    assert result.values == {BALANCE: b"5"}


class _Behind:
    """`time` as a writer whose clock is an hour behind sees it."""

    def time_ns(self) -> int:
        return time.time_ns() - 3600 * 10**9


@pytest.mark.parametrize("durable", [False, True])
async def test_a_resent_write_refused_as_expired_is_not_said_never_written(
    px: Proxied, monkeypatch: pytest.MonkeyPatch, durable: bool
) -> None:
    """A stamped write with a ttl whose reply was lost is sent again; by then its
    expiry instant may have passed (here it had from the start: a clock behind), and
    the resend is refused as expired. The send whose reply was lost may have landed,
    replaced the older value and expired since, which the client cannot tell from a
    send that never landed: the write used to raise `ClockSkewError` ("nothing was
    written there"); it now says its outcome is unknown (`PartialWriteError`)."""
    proxy = px.proxy_for(BALANCE)
    await px.st.write(GROUP, {BALANCE: b"4"})  # the scripts loaded: the dropped call runs
    drop = proxy.drop_reply(named(b"EVALSHA", b"EVAL"))
    monkeypatch.setattr(_record, "time", _Behind())
    durability = Durability(replicas=0) if durable else None
    with pytest.raises(PartialWriteError) as caught:
        await px.st.write(GROUP, {BALANCE: b"5"}, ttl=60, durability=durability)
    monkeypatch.undo()
    assert drop.hits == 1
    assert not isinstance(caught.value, ClockSkewError)
    assert caught.value.failed == [BALANCE.encode()]
    assert "may have landed" in str(caught.value)


async def test_a_lost_guard_reply_still_raises_the_floor_of_a_key_with_empty_braces(
    px: Proxied,
) -> None:
    """A key with braces but no tag (`odd{}a`): the guard cannot name its version hash
    and leaves its floor to the client. When that call ran and its reply was lost,
    the resend finds the write already there (SAME); the client still raises the
    floor, so a transaction pending at the key at or below the write stays
    superseded."""
    key = "odd{}a"
    async with px.st.transaction() as tx:  # the key has a version hash
        tx.set(key, b"1")
        tx.set("odd{}b", b"1")
    await px.st.write("odd", {key: b"1.5"})  # the scripts loaded: the dropped call runs
    side = side_key(key.encode(), px.st.topology.slot_of)
    drop = px.proxy_for(key).drop_reply(named(b"EVALSHA", b"EVAL"))
    receipt = await px.st.write("odd", {key: b"2"})
    assert drop.hits == 1
    floor = await px.st.topology.execute(side, "HGET", side, "g")
    assert floor == b"%d:%s" % (receipt.version, receipt.token.encode())


# -- no transport-level resends ----------------------------------------------------------


async def test_a_non_idempotent_command_is_never_resent(topology_env: tuple[str, Any]) -> None:
    """INCR whose reply is dropped, then delayed past the socket timeout: each is sent
    once and reported as an unknown outcome; nothing under stampede resends it."""
    kind, env = topology_env
    options = ConnectOptions(socket_timeout=0.2, connect_timeout=0.5, connection_retries=2)
    st, proxies = await _proxied(kind, env, options)
    topology: Any = st.topology
    try:
        key = COUNTER.encode()
        proxy = proxies[topology.shard_of(key)]
        proxy.drop_reply(named(b"INCR"))
        with pytest.raises(OutcomeUnknownError, match="INCR"):
            await topology.execute(key, "INCR", key)
        proxy.delay_reply(named(b"INCR"), 0.5)
        with pytest.raises(OutcomeUnknownError, match="INCR"):
            await topology.execute(key, "INCR", key)
        assert proxy.count(named(b"INCR")) == 2  # one send each, never resent
    finally:
        await st.aclose()
        for proxy in proxies.values():
            await proxy.aclose()


# -- repairs ------------------------------------------------------------------------------


@pytest.mark.parametrize("gone", [True, False])
async def test_a_repair_whose_record_reply_was_lost_reports_what_it_wrote(
    px: Proxied, gone: bool
) -> None:
    """Commit mode: a torn group repaired by `Refetch` (the source says it is gone, or
    gives payloads), and the reply to the repair's commit record is lost. The record
    was written; the resend finds it there (`SAME`). The repair is done: `deleted`
    (or `rewritten`), `repaired`, under its own stamp. It used to read the resend's
    answer as a newer write's and report `lost_race`, nothing repaired."""
    st = px.st
    group = "rlost"
    keys = spread_keys(st, group, 2)
    await st.write(group, dict.fromkeys(keys, b"v1"), mode="commit")  # scripts loaded
    shard = st.topology.shard_of(keys[0].encode())
    some = [k.encode() for k in keys if st.topology.shard_of(k.encode()) == shard]
    await write_newer(st, some, b"v2")  # torn: the newer write reached one shard only

    async def load(group: bytes, names: Sequence[bytes]) -> dict[bytes, bytes] | None:
        return None if gone else dict.fromkeys(names, b"db")

    record = commit_key(group.encode())
    guard = GUARD.sha.encode()
    drop = px.proxy_for(record.decode()).drop_reply(
        lambda cmd: cmd[0].upper() == b"EVALSHA" and cmd[1] == guard and record in cmd
    )
    result = await st.read(group, keys, mode="commit", retry=QUICK, repair=Refetch(load))
    assert drop.hits == 1
    assert result.repair is not None
    assert result.repair.action is (RepairAction.DELETED if gone else RepairAction.REWRITTEN)
    assert result.repaired and result.consistent
    again = await st.read(group, keys, mode="commit")
    assert (again.version, again.token) == result.repair.stamp or again.version is None
    assert again.values == dict.fromkeys(keys, None if gone else b"db")


async def test_a_repair_whose_transaction_completion_reply_was_lost_reports_it(
    px: Proxied,
) -> None:
    """A transaction committed at `a` only (its writer died before `b`): a group read's
    repair completes it at `b`, and the reply to that commit is lost. The resend finds
    it current there (2, already current): the group is whole by that completion,
    `rolled_forward`. It used to count only a first-try 1 as completed, hand the group
    to the strategy as first read, and report the strategy's failed compare-and-set
    (`lost_race`, nothing repaired)."""
    st = px.st
    a, b = spread_keys(st, "txlost", 2)
    async with st.transaction() as tx:  # every script loaded on both shards
        tx.set(a, b"a0")
        tx.set(b, b"b0")
    raw = [a.encode(), b.encode()]
    version, token = st.versions.now(), new_token()  # type: ignore[attr-defined]
    sides = [side_key(k, st.topology.slot_of) for k in raw]
    env = b"%d:%s:t" % (version, token.encode())
    args = [(version, token, 0, 0, env, encode_meta(raw))] * 2
    assert await run_units(st.topology, PREPARE, raw, sides, args, head=[20_000]) == [1, 1]
    commit = [(version, token, 0)]
    assert await run_units(st.topology, COMMIT, raw[:1], sides[:1], commit, head=[5000]) == [1]
    sha = COMMIT.sha.encode()
    drop = px.proxy_for(b).drop_reply(lambda cmd: cmd[0].upper() == b"EVALSHA" and cmd[1] == sha)
    rebuild = NewestWins(rebuild=lambda truth, stale: dict.fromkeys(stale, b"rebuilt"))
    result = await st.read("txlost", [a, b], retry=QUICK, repair=rebuild)
    assert drop.hits == 1
    assert result.repair is not None and result.repair.action is RepairAction.ROLLED_FORWARD
    assert result.repaired and result.values == {a: b"t", b: b"t"}


def _raw_set(target: tuple[str, int], key: bytes, value: bytes) -> None:
    """SET over a plain socket straight to the server (behind the proxy)."""
    parts = [b"SET", key, value]
    wire = b"*3\r\n" + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)
    with socket.create_connection(target, timeout=10) as sock:
        sock.sendall(wire)
        assert sock.recv(64).startswith(b"+OK")


async def test_a_repair_whose_compare_and_set_reply_was_lost_never_clobbers(
    px: Proxied,
) -> None:
    """The repair's compare-and-set landed at `a` and its reply was lost; before the
    resend, a newer write W reached `a`. The resend finds neither what the read saw nor
    the repair's value: it changes nothing (W stays), and the outcome is `lost_race`,
    the group as it reads now (a resend that finds its own value counts it set)."""
    st = px.st
    group = "caslost"
    keys = spread_keys(st, group, 2)
    a = keys[0].encode()
    await st.write(group, dict.fromkeys(keys, b"v1"))
    await write_newer(st, [k.encode() for k in keys[1:]], b"v2")  # torn
    proxy = px.proxy_for(keys[0])
    cas = CAS.sha.encode()

    def is_cas(cmd: tuple[bytes, ...]) -> bool:
        return cmd[0].upper() == b"EVALSHA" and cmd[1] == cas and a in cmd

    stored = Envelope.decode(await st.topology.execute(a, "GET", a))
    w = Envelope(stored.version + 10**9, new_token(), b"w")
    sent: list[int] = []

    def newer_before_the_resend(cmd: tuple[bytes, ...]) -> bool:
        if is_cas(cmd):
            sent.append(1)
            if len(sent) == 1:  # the resend: W lands first
                _raw_set(proxy.target, a, w.encode())
        return False

    drop = proxy.drop_reply(is_cas)
    proxy.delay_reply(newer_before_the_resend, 0)
    result = await st.read(group, keys, retry=QUICK, repair=NewestWins())
    assert drop.hits == 1 and sent == [1]
    assert result.repair is not None and result.repair.action is RepairAction.LOST_RACE
    assert await st.topology.execute(a, "GET", a) == w.encode()  # W kept
    assert not result.repaired


@pytest.mark.parametrize("mode", [Mode.STAMP, Mode.COMMIT])
async def test_a_repair_whose_every_reply_is_lost_says_its_outcome_is_unknown(
    px: Proxied, mode: Mode
) -> None:
    """Every reply to the repair's compare-and-set at `a` (or, in commit mode, to its
    commit record) is lost, resends included. The writes landed; the read raised
    `ShardUnavailable` ("connection failed; is the server up?"), as if nothing had been
    sent. It raises `OutcomeUnknownError` naming the repair, the group and the shard:
    the repair may or may not have been applied."""
    st = px.st
    group = f"caslost-{mode.value}"
    keys = spread_keys(st, group, 2)
    await st.write(group, dict.fromkeys(keys, b"v1"), mode=mode)
    await write_newer(st, [k.encode() for k in keys[1:]], b"v2")  # torn
    if mode is Mode.COMMIT:
        target = commit_key(group.encode())
        sha = GUARD.sha.encode()
    else:
        target, sha = keys[0].encode(), CAS.sha.encode()
    await st.topology.execute(target, "SCRIPT", "LOAD", CAS.source)  # no NOSCRIPT lost

    def lost(cmd: tuple[bytes, ...]) -> bool:
        return cmd[0].upper() == b"EVALSHA" and cmd[1] == sha and target in cmd

    drop = px.proxy_for(target.decode()).drop_reply(lost, times=None)
    with pytest.raises(OutcomeUnknownError, match="repair") as raised:
        await st.read(group, keys, mode=mode, retry=QUICK, repair=NewestWins())
    assert drop.hits >= 2  # sent, then resent
    assert group in str(raised.value) and "may or may not" in str(raised.value)
    px.proxy_for(target.decode()).clear()
    after = await st.read(group, keys, mode=mode)
    assert after.consistent  # it had landed
