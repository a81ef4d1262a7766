"""A transaction's rounds on independent primaries without a task per shard.

`Shards.scripts` writes every call's EVALSHA at once and wakes its caller once;
whatever is not a plain reply goes on through the task path (`Shards.script`'s)
from the answer it got. These tests hold that path to the task path's answers,
errors and resends: each one runs on both (`path`), the task path being
`each_script`, what `Shards.scripts` was before.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

import stampede
from stampede import OutcomeUnknownError, Stampede, TransactionAborted
from stampede._lua import Script
from stampede._txn.scripts import COMMIT, PREPARE
from stampede.errors import ShardResponseError, ShardUnavailable
from stampede.options import ConnectOptions
from stampede.testing import LocalPrimaries, RedisProxy
from stampede.topology._base import each_script
from stampede.topology._lane import Lane
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


@pytest.fixture
async def proxied(
    stampede_primaries: LocalPrimaries, path: str
) -> AsyncIterator[tuple[Stampede, RedisProxy]]:
    async with RedisProxy(stampede_primaries.nodes[0].address) as proxy:
        options = ConnectOptions(socket_timeout=5.0, connect_timeout=1.0, connection_retries=1)
        st = stampede.connect([proxy.url], connection=options)
        try:
            await _commit(st, b"warm")  # scripts loaded, a connection at hand
            yield st, proxy
        finally:
            await st.aclose()


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


# -- rounds of one loop turn share one write per server ---------------------------------


def _writes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Inside: per `Lane.send_now` write, how many commands it carried."""
    written: list[int] = []
    send_now = Lane.send_now

    def counted(self: Lane, commands: Any, then: Any) -> bool:
        written.append(len(commands))
        return send_now(self, commands, then)

    monkeypatch.setattr(Lane, "send_now", counted)
    return written


async def _concurrently(st: Stampede, count: int, value: bytes) -> list[Any]:
    """`count` transactions started in one loop turn, each on three keys of its own."""
    return await asyncio.gather(
        *(_commit(st, value + b"%d" % n, [f"{k}:{n}" for k in KEYS]) for n in range(count))
    )


async def test_concurrent_rounds_share_one_write(
    proxied: tuple[Stampede, RedisProxy], path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight transactions of one loop turn on one server: the first prepare goes at
    once, the seven others in one write at the end of the turn; each gets its own
    replies (the task path, which shares nothing, gives the same receipts)."""
    st, _ = proxied
    written = _writes(monkeypatch)
    receipts = await _concurrently(st, 8, b"shared")
    rounds = list(written)
    assert all(r.pending == () and not r.atomic for r in receipts)
    for n in range(8):
        keys = [f"{k}:{n}" for k in KEYS]
        assert (await st.read_atomic(keys)).values == dict.fromkeys(keys, b"shared%d" % n)
    if path == "quick":
        assert rounds[:2] == [1, 7]  # prepares: one alone, then seven together
        assert sum(rounds) == 16 and len(rounds) < 16  # 8 prepares, 8 commits


async def test_a_lost_shared_write_resends_each_part_once(
    proxied: tuple[Stampede, RedisProxy],
) -> None:
    """The reply to a shared write of prepares is lost: every part of it is resent
    once on its own (each is idempotent), and every transaction commits."""
    st, proxy = proxied
    await _concurrently(st, 4, b"warm")  # the keys exist, connections are open
    before = proxy.count(_calls(PREPARE.sha))
    rule = proxy.drop_reply(lambda cmd: _calls(PREPARE.sha)(cmd) and b"lost2" in cmd[-2])
    receipts = await _concurrently(st, 4, b"lost")
    assert rule.hits == 1
    assert all(r.pending == () for r in receipts)
    assert proxy.count(_calls(PREPARE.sha)) - before > 4  # the lost ones, twice
    for n in range(4):
        keys = [f"{k}:{n}" for k in KEYS]
        assert (await st.read_atomic(keys)).values == dict.fromkeys(keys, b"lost%d" % n)


async def test_a_script_that_is_not_idempotent_never_shares_a_write(
    proxied: tuple[Stampede, RedisProxy], path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Calls of a script that may not be resent go alone, each in its own write, even
    while others are in flight: a lost shared write would leave them unknown."""
    st, _ = proxied
    bump = Script("return redis.call('INCR', KEYS[1])", name="bump")
    key = b"quick:{alone}"
    await st.topology.scripts(bump, [([key], [])])  # loaded
    written = _writes(monkeypatch)
    got = await asyncio.gather(*(st.topology.scripts(bump, [([key], [])]) for _ in range(4)))
    assert sorted(r[0] for r in got) == [2, 3, 4, 5]
    if path == "quick":
        assert written == [1, 1, 1, 1]
