"""Token-stamped event logs: per-key change lists and per-group event sets."""

from __future__ import annotations

import pytest

from stampede import (
    ConfigurationError,
    HybridClock,
    InvalidKeyError,
    InvalidValueError,
    PartialWriteError,
    Stampede,
    atomic,
    eventlog,
)
from stampede.eventlog import new_token
from stampede.testing import LocalPrimaries

from ..support import open_stampede

ORDER = ["order:{7}:status", "order:{7}:total", "order:{7}:items"]
PARTS = ["status", "total", "items"]


def tokens(n: int) -> list[str]:
    """`n` fresh tokens in increasing order."""
    return sorted(new_token() for _ in range(n))


def spread_tagged(st: Stampede, count: int = 3) -> list[str]:
    """Tagged keys (each log in its key's slot) that land on `count` different shards."""
    chosen: dict[str, str] = {}
    for i in range(200):
        key = f"feed:{{{i}}}:posts"
        chosen.setdefault(st.topology.shard_of(key.encode()), key)
        if len(chosen) == count:
            return list(chosen.values())
    raise AssertionError("could not spread the keys")


def test_entry_and_member_formats() -> None:
    """Entries are `<token>:<change>`, members `<token>:<part>:<payload>`; payloads keep colons."""
    token = new_token()
    assert eventlog.entry(token, "a:b") == f"{token}:a:b".encode()
    assert eventlog.member(token, "status", b"x:y") == f"{token}:status:x:y".encode()
    assert eventlog.log_key("user:{1}:p") == b"user:{1}:p:log"
    assert eventlog.events_key(b"user:{1}") == b"user:{1}:events"
    with pytest.raises(ValueError, match="ULID"):
        eventlog.entry("not-a-token", "x")


async def test_append_and_read_back(st: Stampede) -> None:
    """One append stamps every key's log with one token, in RPUSH order, oldest first."""
    first = await eventlog.append_changes(st, dict.fromkeys(ORDER, b"created"))
    second = await eventlog.append_changes(st, {k: f"v2 of {k}" for k in ORDER})
    log = await eventlog.read_log(st, ORDER[0])
    assert [(e.token, e.change) for e in log] == [
        (first, b"created"),
        (second, f"v2 of {ORDER[0]}".encode()),
    ]
    assert [e.token for e in await eventlog.read_log(st, ORDER[0], count=1)] == [second]


async def test_latest_changes_skips_an_incomplete_newest_write(st: Stampede) -> None:
    """The log query returns the newest whole token even when newer entries are a torn write."""
    whole = await eventlog.append_changes(st, {k: b"whole" for k in ORDER})
    torn = new_token()
    await eventlog.append_changes(st, {ORDER[0]: b"torn", ORDER[1]: b"torn"}, token=torn)
    snapshot = await eventlog.latest_changes(st, ORDER)
    assert snapshot is not None
    assert snapshot.token == whole and snapshot.parts == dict.fromkeys(ORDER, b"whole")
    assert snapshot.version is None and not snapshot.version_exact
    await eventlog.append_changes(st, {ORDER[2]: b"torn"}, token=torn)  # the write completes
    done = await eventlog.latest_changes(st, ORDER)
    assert done is not None and done.token == torn


async def test_spread_logs_append_per_shard(st: Stampede) -> None:
    """Logs on three shards are appended (one MULTI per shard, in parallel) and queried whole."""
    keys = spread_tagged(st)
    token = await eventlog.append_changes(st, {k: b"post" for k in keys})
    snapshot = await eventlog.latest_changes(st, keys)
    assert snapshot is not None and snapshot.token == token


async def test_no_common_token_is_none(st: Stampede) -> None:
    """When no write reached every log, the query answers None rather than a mix."""
    await eventlog.append_changes(st, {ORDER[0]: b"a"})
    await eventlog.append_changes(st, {ORDER[1]: b"b"})
    assert await eventlog.latest_changes(st, ORDER[:2]) is None


async def test_log_walk_prefers_the_write_nearest_the_end(st: Stampede) -> None:
    """A write that is newest in every log wins even over a later-minted token."""
    early, late = tokens(2)
    await eventlog.append_changes(st, dict.fromkeys(ORDER[:2], b"late"), token=late)
    await eventlog.append_changes(st, dict.fromkeys(ORDER[:2], b"early"), token=early)
    snapshot = await eventlog.latest_changes(st, ORDER[:2])
    assert snapshot is not None and snapshot.token == early


async def test_trim_logs_keeps_the_newest(st: Stampede) -> None:
    """LTRIM keeps the newest N entries of each log; keep=0 deletes the logs."""
    written = [await eventlog.append_changes(st, dict.fromkeys(ORDER, b"x")) for _ in range(5)]
    await eventlog.trim_logs(st, ORDER, keep=2)
    for key in ORDER:
        assert [e.token for e in await eventlog.read_log(st, key)] == written[-2:]
    await eventlog.trim_logs(st, ORDER, keep=0)
    assert await eventlog.read_log(st, ORDER[0]) == []


async def test_latest_events_skips_an_incomplete_newest_write(st: Stampede) -> None:
    """The event-set query returns the newest token having every part, past a newer torn one."""
    whole, torn = tokens(2)
    await eventlog.record_events(
        st, "order:{7}", dict.fromkeys(PARTS, b"whole"), version=5, token=whole
    )
    await eventlog.record_events(st, "order:{7}", {"status": b"paid"}, version=6, token=torn)
    snapshot = await eventlog.latest_events(st, "order:{7}", PARTS)
    assert snapshot is not None
    assert snapshot.token == whole and snapshot.version == 5 and snapshot.version_exact
    assert snapshot.parts == dict.fromkeys(PARTS, b"whole")


async def test_hybrid_versions_sharing_a_score_order_by_token(st: Stampede) -> None:
    """HLC versions one tick apart collapse to one double; (score, token) still picks the newest."""
    base = HybridClock().now() // 256 * 256 + 2  # a double's step is 256 from 2**60 up
    assert float(base) == float(base + 1) == float(base + 2)  # the collapse being handled
    older, newer, newest = tokens(3)
    group = "order:{7}"
    await eventlog.record_events(st, group, dict.fromkeys(PARTS, b"1"), version=base, token=older)
    await eventlog.record_events(
        st, group, dict.fromkeys(PARTS, b"2"), version=base + 1, token=newer
    )
    await eventlog.record_events(st, group, {"status": b"3"}, version=base + 2, token=newest)
    snapshot = await eventlog.latest_events(st, group, PARTS)
    assert snapshot is not None and snapshot.token == newer
    assert snapshot.parts["total"] == b"2"
    assert snapshot.version == int(float(base)) and not snapshot.version_exact
    assert abs(snapshot.version - (base + 1)) < 256


async def test_latest_events_pages_through_long_sets(st: Stampede) -> None:
    """The walk pages through the set until a whole write turns up, and gives up at the limit."""
    whole, *partial = tokens(30)
    await eventlog.record_events(st, "g:{1}", {"a": b"1", "b": b"1"}, version=1, token=whole)
    for i, token in enumerate(partial):
        await eventlog.record_events(st, "g:{1}", {"a": b"x"}, version=10 + i, token=token)
    snapshot = await eventlog.latest_events(st, "g:{1}", ["a", "b"], page=4)
    assert snapshot is not None and snapshot.token == whole
    assert await eventlog.latest_events(st, "g:{1}", ["a", "b"], page=4, limit=20) is None


async def test_trim_events_by_count_and_by_version(st: Stampede) -> None:
    """ZREMRANGEBYRANK keeps the newest N members; ZREMRANGEBYSCORE drops older versions."""
    for version, token in enumerate(tokens(6)):
        await eventlog.record_events(st, "g:{2}", {"a": b"x"}, version=version, token=token)
    assert await eventlog.trim_events(st, "g:{2}", before=2) == 2
    assert await eventlog.trim_events(st, "g:{2}", keep=3) == 1
    assert [e.version for e in await eventlog.read_events(st, "g:{2}")] == [5, 4, 3]
    with pytest.raises(ValueError, match="exactly one"):
        await eventlog.trim_events(st, "g:{2}")


async def test_foreign_entries_are_refused(st: Stampede) -> None:
    """A list entry that is not `<token>:<change>` raises MalformedEntry naming the log."""
    log = eventlog.log_key(ORDER[0])
    await atomic.multi(st, [("RPUSH", log, "secret-payload")])
    with pytest.raises(eventlog.MalformedEntry, match=r"order:\{7\}:status:log") as info:
        await eventlog.read_log(st, ORDER[0])
    assert "secret" not in str(info.value)


async def test_part_names_cannot_hold_colons(st: Stampede) -> None:
    """A part name with ':' would make members ambiguous, so it is refused."""
    with pytest.raises(ValueError, match="no ':'"):
        await eventlog.record_events(st, "g:{3}", {"a:b": b"1"}, version=1, token=new_token())


async def test_partial_append_names_both_sides(stampede_primaries: LocalPrimaries) -> None:
    """With a primary down, a spread append raises PartialWriteError naming both sides."""
    async with open_stampede(stampede_primaries, "shards") as st:
        keys = spread_tagged(st)
        down = st.topology.shard_of(keys[0].encode())
        next(n for n in stampede_primaries.nodes if n.address == down).kill()
        with pytest.raises(PartialWriteError) as info:
            await eventlog.append_changes(st, dict.fromkeys(keys, b"x"))
        assert info.value.failed == [eventlog.log_key(keys[0])]
        assert sorted(info.value.landed) == sorted(eventlog.log_key(k) for k in keys[1:])
        assert info.value.shard == down


async def test_one_str_for_the_keys_trims_no_other_log(st: Stampede) -> None:
    """trim_logs(st, "ab", keep=0) used to read "ab" as the keys 'a' and 'b' and delete
    their logs; one str (or a mapping's wrong shape) is refused before anything is sent,
    with a StampedeError that says what to pass."""
    await eventlog.append_changes(st, {"a": b"1", "b": b"2", "ab": b"3"})
    with pytest.raises(InvalidKeyError, match=r"the keys of trim_logs\(\) must be a list, not"):
        await eventlog.trim_logs(st, "ab", keep=0)
    with pytest.raises(InvalidKeyError, match=r"write \['ab'\]"):
        await eventlog.latest_changes(st, "ab")
    with pytest.raises(InvalidKeyError, match=r"the parts of latest_events\(\) must be a list"):
        await eventlog.latest_events(st, "g:{4}", "ab")
    with pytest.raises(InvalidKeyError, match=r"must not be empty: name the keys whose logs"):
        await eventlog.latest_changes(st, [])
    with pytest.raises(InvalidValueError, match=r"append_changes\(\) takes a mapping"):
        await eventlog.append_changes(st, ["a"])  # type: ignore[arg-type]
    with pytest.raises(InvalidValueError, match=r"record_events\(\) takes a mapping"):
        await eventlog.record_events(st, "g:{4}", "ab", version=1, token=new_token())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="keep must be a whole number at least 0"):
        await eventlog.trim_logs(st, ["a"], keep=-1)
    for key in ("a", "b", "ab"):
        assert len(await eventlog.read_log(st, key)) == 1
