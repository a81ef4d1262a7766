"""A transaction's rounds on independent primaries without a task per shard.

`Shards.scripts` writes every call's EVALSHA at once and wakes its caller once;
whatever is not a plain reply goes on through the task path (`Shards.script`'s)
from the answer it got. These tests hold that path to the task path's answers,
errors and resends: each one runs on both (`path`), the task path being
`each_script`, what `Shards.scripts` was before.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import os
import weakref
from collections.abc import AsyncIterator
from typing import Any

import pytest

import stampede
from stampede import OutcomeUnknownError, Stampede, TransactionAborted
from stampede._lua import Script
from stampede._txn.scripts import COMMIT, COMMIT_ONE, PREPARE
from stampede.errors import ShardResponseError, ShardUnavailable
from stampede.options import ConnectOptions
from stampede.testing import LocalPrimaries, RedisProxy
from stampede.testing._admin import command
from stampede.topology._base import each_script
from stampede.topology._endpoint import parse_url
from stampede.topology._lane import Lane, Sent
from stampede.topology._rounds import _send_soon
from stampede.topology._shards import Shards

from ..support import open_stampede, spread_keys, tasks_created

KEYS = ["quick:a", "quick:b", "quick:c"]  # three slots, one shard (one proxied primary)


@pytest.fixture(params=["quick", "tasks"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test on the quick path, then on the task path it must match."""
    if request.param == "tasks":

        async def tasks(self: Shards, script: Script, calls: Any) -> list[Any]:
            return await each_script(self, script, calls)

        monkeypatch.setattr(Shards, "scripts", tasks)
    return str(request.param)


@contextlib.asynccontextmanager
async def _through_proxy(primaries: LocalPrimaries) -> AsyncIterator[tuple[Stampede, RedisProxy]]:
    """A client on the first primary through a proxy, one connection open and warm."""
    async with RedisProxy(primaries.nodes[0].address) as proxy:
        options = ConnectOptions(socket_timeout=5.0, connect_timeout=1.0, connection_retries=1)
        st = stampede.connect([proxy.url], connection=options)
        try:
            await _commit(st, b"warm")  # scripts loaded, a connection at hand
            yield st, proxy
        finally:
            await st.aclose()


@pytest.fixture
async def proxied(
    stampede_primaries: LocalPrimaries, path: str
) -> AsyncIterator[tuple[Stampede, RedisProxy]]:
    async with _through_proxy(stampede_primaries) as client:
        yield client


async def _commit(st: Stampede, value: bytes, keys: list[str] = KEYS) -> Any:
    async with st.transaction() as tx:
        for key in keys:
            tx.set(key, value)
    return tx.receipt


def _calls(sha: str) -> Any:
    return lambda cmd: cmd[0] == b"EVALSHA" and cmd[1] == sha.encode()


async def test_a_transaction_over_shards_makes_its_rounds_without_a_task(
    topology_env: tuple[str, Any],
) -> None:
    """With connections open, neither round of a transaction spanning three primaries
    (or cluster nodes) creates a task."""
    async with open_stampede(topology_env[1], topology_env[0]) as st:
        keys = spread_keys(st, "quick:spread")
        await _commit(st, b"warm", keys)
        with tasks_created() as created:
            receipt = await _commit(st, b"quick", keys)
        assert created == []
        assert receipt.pending == () and not receipt.atomic
        got = await st.read_atomic(keys)
        assert got.values == dict.fromkeys(keys, b"quick")


async def test_rounds_after_a_script_flush_fall_back_to_eval(st: Stampede) -> None:
    """Every node lost its scripts: both rounds go again as EVAL, on either topology."""
    keys = spread_keys(st, "quick:flush")
    await _commit(st, b"before", keys)
    for shard in st.topology.shard_names:
        await st.topology.execute_on(shard, "SCRIPT", "FLUSH")
    receipt = await _commit(st, b"after", keys)
    assert receipt.pending == ()
    assert (await st.read_atomic(keys)).values == dict.fromkeys(keys, b"after")


async def test_a_burst_of_transactions_after_a_script_flush_opens_few_connections(
    st: Stampede,
) -> None:
    """Every node lost its scripts (a failover's promoted replica has none): 64
    transactions at once all meet NOSCRIPT and go again as EVAL, on the connections
    their lane has or opens up to 8, where each used to open one of its own (64 more
    per server, kept open)."""
    groups = [spread_keys(st, f"quick:burst{i}") for i in range(64)]
    for shard in st.topology.shard_names:
        await st.topology.execute_on(shard, "SCRIPT", "FLUSH")
    receipts = await asyncio.gather(*(_commit(st, b"burst", keys) for keys in groups))
    assert all(r.pending == () for r in receipts)
    for shard in st.topology.shard_names:
        clients = await st.topology.execute_on(shard, "CLIENT", "LIST")
        assert clients.count(b"\n") <= 9, clients  # 8 for pipelines, 1 asking now
    got = await st.read_atomic(groups[-1])
    assert got.values == dict.fromkeys(groups[-1], b"burst")


async def test_a_prepare_whose_reply_was_lost_is_resent_once(
    proxied: tuple[Stampede, RedisProxy],
) -> None:
    st, proxy = proxied
    before = proxy.count(_calls(PREPARE.sha))
    rule = proxy.drop_reply(_calls(PREPARE.sha))
    receipt = await _commit(st, b"again")
    assert rule.hits == 1 and proxy.count(_calls(PREPARE.sha)) - before == 2
    assert receipt.pending == ()
    assert (await st.read_atomic(KEYS)).values == dict.fromkeys(KEYS, b"again")


async def test_a_prepare_lost_past_the_retries_aborts_as_before(
    proxied: tuple[Stampede, RedisProxy],
) -> None:
    st, proxy = proxied
    before = proxy.count(_calls(PREPARE.sha))
    proxy.drop_reply(_calls(PREPARE.sha), times=2)
    with pytest.raises(TransactionAborted, match="a prepare failed") as info:
        await _commit(st, b"lost")
    assert isinstance(info.value.__cause__, ShardUnavailable)
    assert proxy.count(_calls(PREPARE.sha)) - before == 2
    assert (await st.read_atomic(KEYS)).values == dict.fromkeys(KEYS, b"warm")


async def test_a_commit_whose_reply_was_lost_is_resent_once(
    proxied: tuple[Stampede, RedisProxy],
) -> None:
    st, proxy = proxied
    before = proxy.count(_calls(COMMIT.sha))
    proxy.drop_reply(_calls(COMMIT.sha))
    receipt = await _commit(st, b"committed")
    assert proxy.count(_calls(COMMIT.sha)) - before == 2 and receipt.pending == ()
    assert (await st.read_atomic(KEYS)).values == dict.fromkeys(KEYS, b"committed")


async def test_noscript_falls_back_to_eval(
    proxied: tuple[Stampede, RedisProxy], stampede_primaries: LocalPrimaries
) -> None:
    st, proxy = proxied
    await st.topology.execute_on(st.topology.shard_names[0], "SCRIPT", "FLUSH")
    evals = proxy.count(lambda cmd: cmd[0] == b"EVAL")
    receipt = await _commit(st, b"flushed")
    assert proxy.count(lambda cmd: cmd[0] == b"EVAL") - evals == 2  # prepare, commit
    assert receipt.pending == ()
    assert (await st.read_atomic(KEYS)).values == dict.fromkeys(KEYS, b"flushed")


async def test_a_script_that_is_not_idempotent_is_never_resent(
    proxied: tuple[Stampede, RedisProxy],
) -> None:
    st, proxy = proxied
    bump = Script("return redis.call('INCR', KEYS[1])", name="bump")
    key = b"quick:{n}"
    assert await st.topology.scripts(bump, [([key], [])]) == [1]
    proxy.drop_reply(_calls(bump.sha))
    with pytest.raises(OutcomeUnknownError, match="EVALSHA"):
        await st.topology.scripts(bump, [([key], [])])
    assert proxy.count(_calls(bump.sha)) == 2
    assert await st.topology.execute(key, "GET", key) == b"2"


async def test_an_error_reply_is_the_same_shard_error(
    proxied: tuple[Stampede, RedisProxy],
) -> None:
    st, _ = proxied
    broken = Script("return redis.error_reply('NOPE not today')", name="broken")
    fine = Script("return 7", name="fine")
    await st.topology.scripts(broken, [([b"quick:{x}"], [])])  # loaded (EVAL)
    (reply,) = await st.topology.scripts(broken, [([b"quick:{x}"], [])])
    assert isinstance(reply, ShardResponseError) and "NOPE not today" in str(reply)
    assert reply.shard == st.topology.shard_names[0]
    assert await st.topology.scripts(fine, [([b"quick:{x}"], []), ([b"quick:{y}"], [])]) == [
        7,
        7,
    ]


async def test_a_round_without_a_connection_at_hand_goes_the_task_way(
    stampede_primaries: LocalPrimaries, path: str
) -> None:
    """A fresh client has no connection open: its first round opens them."""
    async with open_stampede(stampede_primaries, "shards") as st:
        keys = spread_keys(st, "quick:fresh")
        receipt = await _commit(st, b"fresh", keys)
        assert receipt.pending == ()
        assert (await st.read_atomic(keys)).values == dict.fromkeys(keys, b"fresh")


async def test_a_round_of_no_calls_is_empty(st: Stampede) -> None:
    """Nothing to send: an empty answer at once (no answer to wait for)."""
    assert await asyncio.wait_for(st.topology.scripts(COMMIT, []), 1.0) == []


# -- concurrent rounds share one write per server ----------------------------------------


@pytest.fixture
async def shared(stampede_primaries: LocalPrimaries) -> AsyncIterator[tuple[Stampede, RedisProxy]]:
    """A client on one proxied primary, one connection open and warm (on the quick
    path only: sharing writes is what it is about)."""
    async with _through_proxy(stampede_primaries) as client:
        yield client


def _groups(n: int) -> list[list[str]]:
    return [[f"quick:shared:{g}:{part}" for part in "abc"] for g in range(n)]


async def test_concurrent_transactions_share_the_connection_they_have(
    shared: tuple[Stampede, RedisProxy],
) -> None:
    """Sixteen transactions started in one loop turn go out together: their rounds
    ride one connection (each written at once would have opened more), and each
    still gets its own answers."""
    st, proxy = shared
    assert proxy.accepted == 1
    groups = _groups(16)
    receipts = await asyncio.gather(
        *(_commit(st, b"v%d" % g, keys) for g, keys in enumerate(groups))
    )
    assert proxy.accepted == 1
    for g, (keys, receipt) in enumerate(zip(groups, receipts, strict=True)):
        assert receipt.pending == () and not receipt.atomic
        got = await st.read_atomic(keys)
        assert got.values == dict.fromkeys(keys, b"v%d" % g)
    assert len({r.token for r in receipts}) == 16


async def test_a_lost_reply_of_a_shared_write_resends_each_part(
    shared: tuple[Stampede, RedisProxy],
) -> None:
    """The connection that carried several transactions' prepares is lost after the
    server ran the first: each transaction goes on from that loss by its own rules
    (a prepare is idempotent: sent again), and every one commits whole."""
    st, proxy = shared
    before = proxy.count(_calls(PREPARE.sha))
    rule = proxy.drop_reply(_calls(PREPARE.sha))
    groups = _groups(8)
    receipts = await asyncio.gather(
        *(_commit(st, b"w%d" % g, keys) for g, keys in enumerate(groups))
    )
    assert rule.hits == 1
    assert proxy.count(_calls(PREPARE.sha)) - before > 8  # some sent twice
    for g, (keys, receipt) in enumerate(zip(groups, receipts, strict=True)):
        assert receipt.pending == ()
        assert (await st.read_atomic(keys)).values == dict.fromkeys(keys, b"w%d" % g)


async def test_a_call_that_cannot_be_sent_fails_alone(st: Stampede) -> None:
    """One caller's argument that cannot be encoded fails that caller only, with the
    error the task path gives; the callers that shared its turn are answered."""
    fine = Script("return ARGV[1]", name="echo")
    await st.topology.scripts(fine, [([b"quick:{e}"], [b"load"])])
    outcomes = await asyncio.gather(
        st.topology.scripts(fine, [([b"quick:{e}"], [b"one"])]),
        st.topology.scripts(fine, [([b"quick:{e}"], [object()])]),
        st.topology.scripts(fine, [([b"quick:{e}"], [b"two"])]),
        return_exceptions=True,
    )
    assert outcomes[0] == [b"one"] and outcomes[2] == [b"two"]
    assert isinstance(outcomes[1], TypeError)


def test_a_turn_cut_short_by_its_loop_holds_nothing() -> None:
    """A round queued in a loop turn that never ends (the loop stopped and closed
    first) is held nowhere module-wide: it goes when its lane goes."""

    class Arg:  # an argument that tells when it is gone
        pass

    lane = Lane(parse_url("redis://127.0.0.1:1"))
    arg = Arg()
    gone = weakref.ref(arg)
    loop = asyncio.new_event_loop()
    answers: list[Sent | None] = []
    loop.call_soon(_send_soon, lane, [("ECHO", arg)], answers.append)
    loop.call_soon(loop.stop)  # the same turn: the flush queued for the next never runs
    loop.run_forever()
    loop.close()
    assert answers == []
    del lane, arg
    gc.collect()
    assert gone() is None


async def test_a_part_answered_before_its_shared_connection_was_lost_keeps_its_reply(
    proxied: tuple[Stampede, RedisProxy],
) -> None:
    """Two callers' scripts share one write; the server runs both, the first's reply
    arrives and the connection is lost before the second's. The first caller has its
    answer (it is not an unknown outcome, nor sent again); only the second's is
    unknown, and each ran once."""
    st, proxy = proxied
    bump = Script("return redis.call('INCR', KEYS[1])", name="bump")
    a, b = b"quick:{pa}", b"quick:{pb}"
    assert await st.topology.scripts(bump, [([a], []), ([b], [])]) == [1, 1]  # loaded
    rule = proxy.drop_reply(lambda cmd: _calls(bump.sha)(cmd) and cmd[3] == b)
    outcomes: list[Any] = await asyncio.gather(
        st.topology.scripts(bump, [([a], [])]),
        st.topology.scripts(bump, [([b], [])]),
        return_exceptions=True,
    )
    first, second = outcomes
    assert rule.hits == 1
    assert first == [2]
    assert isinstance(second, OutcomeUnknownError)
    assert proxy.count(_calls(bump.sha)) == 4  # nothing sent again
    assert await st.topology.execute(a, "GET", a) == b"2"
    assert await st.topology.execute(b, "GET", b) == b"2"


async def test_a_one_slot_commit_resent_and_then_refused_is_not_reported_aborted(
    proxied: tuple[Stampede, RedisProxy], stampede_primaries: LocalPrimaries
) -> None:
    """The one-slot call ran and its reply was lost; the resend (it is idempotent)
    meets an error reply (here NOPERM: the ACL changed meanwhile). The refusal says
    nothing of the first send, which applied: the transaction is not reported
    aborted (nothing written) but as an unknown outcome."""
    st, proxy = proxied
    node = stampede_primaries.nodes[0]
    keys = ["quick:{one}:a", "quick:{one}:b"]
    await _commit(st, b"before", keys)  # COMMIT_ONE loaded

    def refuse_the_resend(cmd: tuple[bytes, ...]) -> bool:
        if _calls(COMMIT_ONE.sha)(cmd):
            command(node, "ACL", "SETUSER", "default", "-evalsha")
        return False

    proxy.drop_reply(_calls(COMMIT_ONE.sha))
    proxy.delay_reply(refuse_the_resend, 0.0)
    try:
        with pytest.raises(OutcomeUnknownError):
            await _commit(st, b"after", keys)
    finally:
        command(node, "ACL", "SETUSER", "default", "+evalsha")
    assert proxy.count(_calls(COMMIT_ONE.sha)) >= 2
    assert (await st.read_atomic(keys)).values == dict.fromkeys(keys, b"after")


async def test_noscript_on_one_part_of_a_shared_write_reruns_that_part_alone(
    proxied: tuple[Stampede, RedisProxy],
) -> None:
    """Two callers' scripts share a write; the server knows one script and not the
    other: the unknown one goes again as EVAL, the known one is answered as it is."""
    st, proxy = proxied
    known = Script("return 'known'", name="known")
    unknown = Script(f"return 'unknown' -- {os.urandom(8).hex()}", name="unknown")
    await st.topology.scripts(known, [([b"quick:{k}"], [])])
    evals = proxy.count(lambda cmd: cmd[0] == b"EVAL")
    outcomes: list[Any] = await asyncio.gather(
        st.topology.scripts(known, [([b"quick:{k}"], [])]),
        st.topology.scripts(unknown, [([b"quick:{u}"], [])]),
    )
    assert outcomes == [[b"known"], [b"unknown"]]
    assert proxy.count(lambda cmd: cmd[0] == b"EVAL") - evals == 1


async def test_a_caller_cancelled_while_its_part_waits_leaves_the_others_answered(
    proxied: tuple[Stampede, RedisProxy],
) -> None:
    """Three callers in one turn, the second cancelled before the turn's write: it
    hears CancelledError, the others their own answers, nothing waits for ever."""
    st, _ = proxied
    echo = Script("return ARGV[1]", name="echo")
    await st.topology.scripts(echo, [([b"quick:{c}"], [b"load"])])
    calls = [
        asyncio.ensure_future(st.topology.scripts(echo, [([b"quick:{c}"], [b"%d" % i])]))
        for i in range(3)
    ]
    await asyncio.sleep(0)  # each caller's part is queued for the end of the turn
    calls[1].cancel()
    assert await asyncio.wait_for(calls[0], 5) == [b"0"]
    assert await asyncio.wait_for(calls[2], 5) == [b"2"]
    with pytest.raises(asyncio.CancelledError):
        await calls[1]
    assert await st.topology.scripts(echo, [([b"quick:{c}"], [b"after"])]) == [b"after"]


@pytest.mark.parametrize("started", [False, True], ids=["before-it-ran", "while-it-waits"])
async def test_a_turn_waiting_for_a_connection_answers_its_callers_when_cancelled(
    started: bool,
) -> None:
    """A turn with no connection at hand waits for one in a task of its own; that task
    cancelled (a loop shutting down cancels every task), before it ran or while it
    waits, still answers each caller (not sent: each goes on its own way), never
    leaving one waiting forever."""

    def silent(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # accepted, never answered: the handshake waits

    held: list[asyncio.StreamWriter] = []
    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    lane = Lane(dataclasses.replace(parse_url(f"redis://127.0.0.1:{port}"), client_name="t"))
    answers: list[Sent | None] = []
    _send_soon(lane, [("PING",)], answers.append)
    for _ in range(100):  # the turn ends, and its flush starts the wait
        await asyncio.sleep(0)
        if lane.rounds:
            break
    (waiting,) = lane.rounds
    for _ in range(3 if started else 0):  # into the handshake, which never ends
        await asyncio.sleep(0)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    assert answers == [None]
    for writer in held:
        writer.close()
    server.close()
    await server.wait_closed()
