"""Stamped writes and validated reads, on independent primaries and on a cluster."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import pytest

import stampede
from stampede import (
    ConfigurationError,
    Envelope,
    InvalidKeyError,
    Mode,
    Reason,
    RetryPolicy,
    Stampede,
    Status,
    TornReadError,
)
from stampede._kept import drop_kept
from stampede.repair import NewestWins
from stampede.topology._guard import KEPT, SAME, WRITTEN
from stampede.wire import commit_key, new_token

from ..support import raw_get, spread_keys

QUICK = RetryPolicy(attempts=4, base_delay=0.001, max_delay=0.005, deadline=30.0)


async def test_write_then_read_is_consistent(st: Stampede) -> None:
    """A group written across shards reads back consistent with the write's stamp."""
    keys = spread_keys(st, "user:1")
    receipt = await st.write("user:1", {k: f"v-{k}".encode() for k in keys})
    result = await st.read("user:1", keys)
    assert result.status is Status.CONSISTENT and result.consistent
    assert (result.version, result.token) == (receipt.version, receipt.token)
    assert result.values == {k: f"v-{k}".encode() for k in keys}
    assert not receipt.atomic


async def test_raw_redis_cli_shows_the_envelope(st: Stampede) -> None:
    """A plain GET (no client library) of a written key is exactly <version>:<token>:<payload>."""
    keys = spread_keys(st, "raw", 3)
    receipt = await st.write("raw", {k: b"hello:world" for k in keys})
    for key in keys:
        stored = raw_get(st.topology.shard_of(key.encode()), key)
        assert stored == f"{receipt.version}:{receipt.token}:hello:world".encode()


async def test_commit_mode_writes_the_record_last(st: Stampede) -> None:
    """Commit mode stores `<group>:stampede:commit` naming the write and its keys."""
    keys = spread_keys(st, "order:7")
    receipt = await st.write("order:7", dict.fromkeys(keys, b"x"), mode="commit")
    record = Envelope.decode(
        await st.topology.execute(b"order:7:stampede:commit", "GET", "order:7:stampede:commit")
    )
    assert (record.version, record.token) == (receipt.version, receipt.token)
    assert json.loads(record.payload) == keys
    result = await st.read("order:7", keys, mode="commit")
    assert result.consistent and result.token == receipt.token


async def test_same_slot_write_is_atomic(st: Stampede) -> None:
    """Keys sharing a hash tag (with the commit record) go in one atomic guarded call."""
    keys = ["user:{42}:profile", "user:{42}:settings"]
    receipt = await st.write("user:{42}", dict.fromkeys(keys, b"p"), mode="commit")
    assert receipt.atomic
    assert (await st.read("user:{42}", keys, mode="commit")).token == receipt.token


@pytest.mark.parametrize("mode", [Mode.STAMP, Mode.COMMIT])
async def test_a_write_in_one_call_keeps_nothing(st: Stampede, mode: Mode) -> None:
    """Keys (and in commit mode the record) in one slot: one script call, never seen
    in part, so nothing is kept for readers. Keys over slots keep what they replace;
    so do one-slot keys whose commit record lives in another slot."""

    async def kept(keys: list[str]) -> list[int]:
        lists = [
            k.encode() + b":stampede:p" if "{" in k else b"{%s}:stampede:p:u" % k.encode()
            for k in keys
        ]
        return [await st.topology.execute(k, "EXISTS", k) for k in lists]

    together, spread = ["{ko}:a", "{ko}:b"], spread_keys(st, f"ko-{mode.value}", 2)
    apart = ["{ka}:a", "{ka}:b"]  # group "ka-<mode>": its record is in another slot
    for n in range(2):
        assert (await st.write("{ko}", dict.fromkeys(together, b"%d" % n), mode=mode)).atomic
        await st.write(f"ko-{mode.value}", dict.fromkeys(spread, b"%d" % n), mode=mode)
        await st.write(f"ka-{mode.value}", dict.fromkeys(apart, b"%d" % n), mode=mode)
    assert await kept(together) == [0, 0]
    assert await kept(spread) == [1, 1]
    assert await kept(apart) == ([1, 1] if mode is Mode.COMMIT else [0, 0])
    assert (await st.read("{ko}", together, mode=mode)).values == dict.fromkeys(together, b"1")


async def test_all_missing_group_is_not_found(st: Stampede) -> None:
    """A group with no keys at all reads as not found, consistent, every value None."""
    result = await st.read("ghost", ["ghost:a", "ghost:b"], mode="commit")
    assert result.status is Status.NOT_FOUND
    assert result.consistent and not result.found
    assert result.values == {"ghost:a": None, "ghost:b": None}


async def test_missing_key_is_partial_and_torn(st: Stampede) -> None:
    """A group with one key missing retries, then raises TornReadError(partial)."""
    keys = spread_keys(st, "part", 3)
    await st.write("part", dict.fromkeys(keys, b"x"))
    await st.topology.execute(keys[0].encode(), "DEL", keys[0])
    with pytest.raises(TornReadError) as info:
        await st.read("part", keys, retry=QUICK)
    assert info.value.reason == "partial"
    assert info.value.attempts > 1
    assert info.value.seen[keys[0]] is None


@pytest.mark.parametrize(
    "stored", [b"plain old value", b"1:abc:payload", b"01:01JD0000000000000000000000:x"]
)
async def test_unstamped_or_malformed_value_is_torn_at_once(st: Stampede, stored: bytes) -> None:
    """A value that is not an envelope raises TornReadError(unstamped) without retrying."""
    keys = spread_keys(st, "legacy", 2)
    await st.write("legacy", dict.fromkeys(keys, b"x"))
    await st.topology.execute(keys[1].encode(), "SET", keys[1], stored)
    with pytest.raises(TornReadError) as info:
        await st.read("legacy", keys, retry=QUICK)
    assert info.value.reason == "unstamped"
    assert info.value.attempts == 1
    assert info.value.seen[keys[1]] == "unstamped"
    assert info.value.observation.errors[keys[1].encode()].key == keys[1].encode()


async def test_partial_write_reads_as_the_last_whole_write_then_torn(st: Stampede) -> None:
    """A write that reached only some shards: within the grace window the group reads
    as the newest write every key still has (its kept versions); once they are gone,
    it is retried as in flight, then reported torn."""
    keys = spread_keys(st, "half")
    await st.write("half", dict.fromkeys(keys, b"old"))
    # A second writer stamps only the keys of one shard, as if it died between shards.
    first_shard = st.topology.shard_of(keys[0].encode())
    some = [k.encode() for k in keys if st.topology.shard_of(k.encode()) == first_shard]
    out = await st.topology.write_guarded(
        some,
        [Envelope(2**62, new_token(), b"new").encode()] * len(some),
        version=2**62,
        token=new_token(),
    )
    assert out.ok
    whole = await st.read("half", keys, retry=QUICK)
    assert whole.consistent and whole.values == dict.fromkeys(keys, b"old")
    assert whole.attempts == 1
    await drop_kept(st.topology, some)
    with pytest.raises(TornReadError) as info:
        await st.read("half", keys, retry=QUICK)
    assert info.value.reason == "torn"
    assert info.value.attempts == QUICK.attempts


async def test_a_key_and_its_name_in_braces_keep_apart(st: Stampede) -> None:
    """`kk` (no brace) and `{kk}` (tagged) share a slot; each keeps what it replaced
    in its own list, so a group of both read while a write is in flight returns each
    key's own value (`kk` kept in `{kk}:stampede:p`, the list of `{kk}`, read `{kk}`'s
    value as its own), and the untagged list's name is refused as a data key."""
    here = st.topology.shard_of(b"kk")
    other = next(f"kk-o{i}" for i in range(64) if st.topology.shard_of(f"kk-o{i}".encode()) != here)
    keys = ["kk", "{kk}", other]
    await st.write("kk", {keys[0]: b"a0", keys[1]: b"b0", keys[2]: b"c0"})
    await st.write("kk", {keys[0]: b"a", keys[1]: b"b", keys[2]: b"c"})
    # A newer write reaches the slot of `kk` and `{kk}` only, as if its writer died.
    version, token = 2**62, new_token()
    some = [k.encode() for k in keys[:2]]
    value = Envelope(version, token, b"new").encode()
    out = await st.topology.write_guarded(some, [value] * 2, version=version, token=token)
    assert out.ok
    got = await st.read("kk", keys, retry=QUICK)
    assert got.consistent and got.values == {keys[0]: b"a", keys[1]: b"b", keys[2]: b"c"}
    with pytest.raises(InvalidKeyError, match="stampede's own keys"):
        await st.write("kk", {"{kk}:stampede:p:u": b"x"})


async def test_the_commit_record_names_keys_that_are_not_utf8_and_expires_with_them(
    st: Stampede,
) -> None:
    """wire-formats.md, commit record: keys that are not UTF-8 are stored in its JSON
    with surrogateescape escapes (\\udcff for 0xff), and with a TTL every data key and
    the record share one expiry instant."""
    group = b"nu:{x}\xff"
    keys = [group + b":a", group + b":b"]
    await st.write(group, dict.fromkeys(keys, b"v"), mode="commit", ttl=100)
    record = commit_key(group)
    payload = Envelope.decode(await st.topology.execute(record, "GET", record)).payload
    assert b"\\udcff" in payload
    assert json.loads(payload) == [k.decode("utf-8", "surrogateescape") for k in keys]
    assert (await st.read(group, keys, mode="commit")).consistent
    instants = {await st.topology.execute(k, "PEXPIRETIME", k) for k in [*keys, record]}
    assert len(instants) == 1 and instants != {-1}


async def test_a_commit_mode_delete_leaves_tombstones_for_the_grace_period(st: Stampede) -> None:
    """wire-formats.md, tombstones: a delete writes `<version>:<token>` at every key (and
    in commit mode its record) expiring after tombstone_grace (300 s); it reads not found."""
    keys = spread_keys(st, "dc", 3)
    await st.write("dc", dict.fromkeys(keys, b"x"), mode="commit")
    receipt = await st.delete("dc", keys, mode="commit")
    assert (await st.read("dc", keys, mode="commit")).status is Status.NOT_FOUND
    for key in [*(k.encode() for k in keys), b"dc:stampede:commit"]:
        stored = await st.topology.execute(key, "GET", key)
        if key == b"dc:stampede:commit":
            assert Envelope.decode(stored).token == receipt.token
        else:
            assert stored == f"{receipt.version}:{receipt.token}".encode()
        assert 290_000 < await st.topology.execute(key, "PTTL", key) <= 300_000


async def test_complete_but_unrecorded_write_is_not_committed(st: Stampede) -> None:
    """Data whole but no commit record reads as uncommitted in commit mode, fine in stamp mode."""
    keys = spread_keys(st, "unrec")
    token = new_token()
    await st.topology.write_guarded(
        [k.encode() for k in keys],
        [Envelope(9, token, b"d").encode()] * len(keys),
        version=9,
        token=token,
    )
    with pytest.raises(TornReadError) as info:
        await st.read("unrec", keys, mode="commit", retry=QUICK)
    assert info.value.reason == "uncommitted"
    assert (await st.read("unrec", keys, mode="stamp")).token == token


async def test_guard_keeps_newer_data(st: Stampede) -> None:
    """An older write arriving late is kept out; a repeat of the same write is idempotent."""
    key = b"guarded:{1}:a"
    new, old = new_token(), new_token()
    assert (
        await st.topology.write_guarded(
            [key], [Envelope(100, new, b"new").encode()], version=100, token=new
        )
    ).results[key] == WRITTEN
    late = await st.topology.write_guarded(
        [key], [Envelope(99, old, b"old").encode()], version=99, token=old
    )
    assert late.results[key] == KEPT
    again = await st.topology.write_guarded(
        [key], [Envelope(100, new, b"new").encode()], version=100, token=new
    )
    assert again.results[key] == SAME
    # Versions compare as numbers, not text: 1000 beats 999 though "999" > "1000".
    bigger = new_token()
    await st.topology.write_guarded(
        [key], [Envelope(1000, bigger, b"b").encode()], version=1000, token=bigger
    )
    raw = await st.topology.execute(key, "GET", key)
    assert Envelope.decode(raw).payload == b"b"
    assert (
        await st.topology.write_guarded(
            [key], [Envelope(999, old, b"x").encode()], version=999, token=old
        )
    ).results[key] == KEPT


async def test_concurrent_writers_leave_the_newest_everywhere(st: Stampede) -> None:
    """Twenty racing writers leave every key at the newest (version, token) of them all."""
    keys = spread_keys(st, "race")
    receipts = await asyncio.gather(
        *(st.write("race", dict.fromkeys(keys, str(i).encode())) for i in range(20))
    )
    newest = max(receipts, key=lambda r: (r.version, r.token))
    result = await st.read("race", keys)
    assert (result.version, result.token) == (newest.version, newest.token)


async def test_older_write_later_in_one_batch_is_kept_out(st: Stampede) -> None:
    """Writes of one group coalesced into one call, newest first: the newest stays.

    The batch also carries other slots' keys, so on a cluster it takes the cross-slot
    guard; a key that appears twice there must be compared against what the earlier
    item wrote, not against what the script read before writing anything.
    """
    keys = [k.encode() for k in spread_keys(st, "batch")]
    others = [k.encode() for k in spread_keys(st, "batch-other")]
    stamps = [(v, new_token()) for v in range(31, 1, -1)]  # newest first

    async def put(version: int, token: str, where: list[bytes]) -> Any:
        envelope = Envelope(version, token, str(version).encode()).encode()
        return await st.topology.write_guarded(
            where, [envelope] * len(where), version=version, token=token
        )

    # An idle shard sends a lone write at once; the oldest write goes first so that
    # every shard is busy and the racing writes after it queue into one batch each.
    _, *outcomes = await asyncio.gather(
        put(1, new_token(), [*keys, *others]),
        *(put(v, t, keys) for v, t in stamps),
        *(put(v, t, others) for v, t in stamps[:3]),
    )
    assert all(outcomes[0].results[k] == WRITTEN for k in keys)
    for outcome in outcomes[1 : len(stamps)]:
        assert set(outcome.results.values()) == {KEPT}, outcome.results
    result = await st.read("batch", keys, mode="stamp")
    assert (result.version, result.token) == stamps[0]


async def test_counter_versions_count_up(st: Stampede) -> None:
    """The Counter source gives each write of a group the next integer."""
    keys = spread_keys(st, "counted", 2)
    first = await st.write("counted", dict.fromkeys(keys, b"a"), versions="counter")
    second = await st.write("counted", dict.fromkeys(keys, b"b"), versions="counter")
    assert (first.version, second.version) == (1, 2)
    assert (await st.read("counted", keys)).values[keys[0]] == b"b"


@pytest.mark.parametrize("mode", ["stamp", "commit"])
async def test_a_counter_that_went_back_catches_up(st: Stampede, mode: str) -> None:
    """The counter is lost (a failover before a replica had it, an eviction) while
    the data keeps version 3: the next write, version 1, is kept out and says so;
    it raises the counter to the data's version, so the write after it is version 4
    and lands (without it every write was kept out until the counter passed 3)."""
    keys = spread_keys(st, f"ctrback-{mode}", 2)
    group = f"ctrback-{mode}"
    for n in range(3):
        await st.write(group, dict.fromkeys(keys, b"%d" % n), versions="counter", mode=mode)  # type: ignore[arg-type]
    counter = f"{group}:stampede:version".encode()
    ttl = await st.topology.execute(counter, "PTTL", counter)
    await st.topology.execute(counter, "DEL", counter)
    lost = await st.write(group, dict.fromkeys(keys, b"lost"), versions="counter", mode=mode)  # type: ignore[arg-type]
    assert lost.version == 1 and set(lost.superseded) == {k.encode() for k in keys}
    after = await st.write(group, dict.fromkeys(keys, b"after"), versions="counter", mode=mode)  # type: ignore[arg-type]
    assert after.version == 4 and after.superseded == ()
    assert (await st.read(group, keys)).values == dict.fromkeys(keys, b"after")
    assert await st.topology.execute(counter, "PTTL", counter) == ttl == -1  # no TTL given


async def test_ttl_expires_data_and_record_together(st: Stampede) -> None:
    """With a TTL, every data key and the commit record share one expiry instant."""
    keys = spread_keys(st, "ttl", 3)
    await st.write("ttl", dict.fromkeys(keys, b"x"), mode="commit", ttl=60)
    instants = {
        await st.topology.execute(k.encode(), "PEXPIRETIME", k)
        for k in [*keys, "ttl:stampede:commit"]
    }
    assert len(instants) == 1 and instants.pop() > 0


async def test_bad_input_is_refused_before_sending(st: Stampede) -> None:
    """Empty groups, empty writes, empty reads and non-bytes values get clear errors."""
    with pytest.raises(InvalidKeyError, match="empty"):
        await st.write("", {"a": b"x"})
    with pytest.raises(InvalidKeyError, match="no values"):
        await st.write("g", {})
    with pytest.raises(InvalidKeyError, match="no keys"):
        await st.read("g", [])
    bad: Any = {"g:a": 42}
    with pytest.raises(TypeError, match="bytes or str"):
        await st.write("g", bad)


def test_connect_rejects_bad_configuration() -> None:
    """connect() names what is wrong with its arguments."""
    with pytest.raises(ConfigurationError, match="at least one"):
        stampede.connect([])
    with pytest.raises(ConfigurationError, match="slot_map and hash_pattern"):
        stampede.connect(["redis://a", "redis://b"], cluster=True, hash_pattern="(?P<tag>x)")
    with pytest.raises(ConfigurationError, match="ttl"):
        stampede.connect("redis://localhost", ttl=-1)
    with pytest.raises(ConfigurationError, match="twice"):
        stampede.connect(["redis://localhost:1", "redis://localhost:1"])
    with pytest.raises(ConfigurationError, match="mode"):
        stampede.connect("redis://localhost", mode="sometimes")
    with pytest.raises(ConfigurationError, match="RepairStrategy"):
        stampede.connect("redis://localhost", repair="newest")


async def test_unreachable_shard_is_named() -> None:
    """A shard nobody listens on: `open()` refuses it (naming the URL), and a client
    used without `open()` gives ShardUnavailable naming it on the data path."""
    from stampede.testing import RedisNode

    node = RedisNode()
    node.start()
    port = node.port
    node.stop()
    options = stampede.ConnectOptions(connect_timeout=0.5, connection_retries=0)
    with pytest.raises(stampede.ConfigurationError, match=f"127.0.0.1:{port}"):
        async with stampede.connect([f"redis://127.0.0.1:{port}"], connection=options):
            pass
    st = stampede.connect([f"redis://127.0.0.1:{port}"], connection=options)
    try:
        with pytest.raises(stampede.ShardUnavailable) as info:
            await st.read("g", ["g:a"])
    finally:
        await st.aclose()
    assert info.value.shard == f"127.0.0.1:{port}"


async def test_reason_values_match_the_stream_format() -> None:
    """The reasons are the repair stream's vocabulary."""
    assert {r.value for r in Reason} == {"torn", "uncommitted", "unstamped", "partial"}
    assert Mode("commit") is Mode.COMMIT


async def test_a_write_cancelled_at_any_step_leaves_its_group_whole_or_repairable(
    st: Stampede,
) -> None:
    """docs/retries.md, cancelled calls: a write cancelled after any number of loop turns
    leaves each key old or new, and a read with `NewestWins` finds the group whole (or
    makes it whole: each key keeps the value it holds)."""
    keys = spread_keys(st, "cancelled", 4)
    for turns in range(12):
        group = f"cancelled:{turns}"
        names = [f"{k}:{turns}" for k in keys]
        await st.write(group, dict.fromkeys(names, b"old"))
        write = asyncio.ensure_future(st.write(group, dict.fromkeys(names, b"new")))
        for _ in range(turns):
            await asyncio.sleep(0)
        write.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await write
        seen = await st.read(group, names, repair=NewestWins())
        assert seen.status is Status.CONSISTENT, (turns, seen)
        assert set(seen.values.values()) <= {b"old", b"new"}, (turns, seen.values)


@pytest.mark.parametrize("ttl", [0, -1, 0.0005, float("nan"), float("inf"), True, "5"])
async def test_a_per_call_ttl_that_is_no_positive_number_is_refused(st: Stampede, ttl: Any) -> None:
    """stamps.md, bad input: a ttl that is not a number of seconds of at least 0.001 is
    a ConfigurationError before anything is sent (a write, a delete's grace, a
    transaction); nothing lands."""
    with pytest.raises(ConfigurationError, match="ttl must be a number of seconds"):
        await st.write("badttl", {"badttl:a": b"x"}, ttl=ttl)
    with pytest.raises(ConfigurationError, match="grace must be a number of seconds"):
        await st.delete("badttl", ["badttl:a"], grace=ttl)
    with pytest.raises(ConfigurationError, match="ttl must be a number of seconds"):
        async with st.transaction(ttl=ttl) as tx:
            tx.set("badttl:a", b"x")
    assert await st.topology.execute(b"badttl:a", "EXISTS", b"badttl:a") == 0


@pytest.mark.parametrize("version", [0, -1, 2**56, True, 1.5])
async def test_an_application_version_outside_the_sequence_range_is_refused(
    st: Stampede, version: Any
) -> None:
    """stamps.md, bad input: version= outside 1..2**56-1 (or no int) is a
    ConfigurationError before anything is sent."""
    with pytest.raises(ConfigurationError, match="version must be"):
        await st.write("badv", {"badv:a": b"x"}, version=version)
    with pytest.raises(ConfigurationError, match="version must be"):
        async with st.transaction(version=version) as tx:
            tx.set("badv:a", b"x")
    assert await st.topology.execute(b"badv:a", "EXISTS", b"badv:a") == 0
