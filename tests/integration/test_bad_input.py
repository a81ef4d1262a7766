"""Bad input gets a clear `StampedeError` naming what was wrong and what to do.

Never a bare builtin `TypeError`/`ValueError` or an `AttributeError` from deep
inside: each message below is pinned.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

import stampede
from stampede import (
    ConfigurationError,
    InvalidKeyError,
    InvalidValueError,
    RepairError,
    RetryPolicy,
    Stampede,
    StampedeError,
    TornReadError,
    TypedGroup,
    atomic,
    eventlog,
    fanout,
)
from stampede.repair import NewestWins, Refetch, RepairQueue, Worker
from stampede.testing import RedisNode
from stampede.testing.memory import MemoryTopology

from ..support import FAST, run_cli, write_newer


def _raises(kind: type[StampedeError], match: str) -> Any:
    return pytest.raises(kind, match=match)


# -- connect() -------------------------------------------------------------------------


def test_a_strategy_class_instead_of_an_instance() -> None:
    """repair=NewestWins (the class) is refused at connect(), with the fix."""
    with _raises(ConfigurationError, r"got the class NewestWins; pass an instance of it"):
        stampede.connect(["redis://127.0.0.1:1"], repair=NewestWins)


def test_a_version_source_class_instead_of_an_instance() -> None:
    """versions=HybridClock (the class) is refused, with the fix."""
    with _raises(ConfigurationError, r"got the class HybridClock; pass an instance: versions="):
        stampede.connect(["redis://127.0.0.1:1"], versions=stampede.HybridClock)


def test_urls_that_are_not_urls() -> None:
    """A number, or a host:port without a scheme, is not a URL; the message shows the form."""
    with _raises(ConfigurationError, r"takes a URL or a list of URLs, got a value of type int"):
        stampede.connect(6379)  # type: ignore[arg-type]
    with _raises(ConfigurationError, r"localhost:6379 is not a Redis URL; write redis://host"):
        stampede.connect(["localhost:6379"])


def test_a_misspelt_mode_at_connect() -> None:
    """A misspelt mode option names the accepted values."""
    with _raises(ConfigurationError, r"^invalid stampede options: mode: Input should be 'stamp'"):
        stampede.connect(["redis://127.0.0.1:1"], mode="comit")


@pytest.mark.parametrize("option", ["ttl", "tombstone_grace", "version_grace"])
@pytest.mark.parametrize("value", [float("inf"), 1e12, 0.0001])
def test_a_ttl_or_grace_window_out_of_range_at_connect(option: str, value: float) -> None:
    """A ttl or grace window no write could use is refused at connect(), naming the
    option: it was accepted, then every write failed with a bare OverflowError
    (version_grace=inf), and every delete and every transaction with a message about
    a "ttl" and "pass None" (tombstone_grace=inf or 1e12)."""
    if option == "version_grace" and value == 0.0001:
        stampede.connect(["redis://127.0.0.1:1"], version_grace=value)  # 1 ms: fine
        return
    bound = r"less than 10000000000" if value > 1 else r"greater than or equal to 0.001"
    with _raises(
        ConfigurationError, rf"invalid stampede options: {option}: Input should be {bound}"
    ):
        stampede.connect(["redis://127.0.0.1:1"], **{option: value})  # type: ignore[arg-type]


@pytest.mark.parametrize("option", ["min_idle", "marker_ttl"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), "30", -1, True])
def test_a_repair_queue_time_that_is_no_number_of_seconds(option: str, value: object) -> None:
    """A repair queue's min_idle or marker_ttl must be a number of seconds: NaN and
    infinity raised a bare ValueError or OverflowError, "30" was taken as "30"
    repeated 1000 times, and -1 turned the marker (one pending job per group) off."""
    topology = MemoryTopology()
    if value == float("inf"):  # forever: taken as 10**10 s
        assert RepairQueue(topology, **{option: value}) is not None  # type: ignore[arg-type]
        return
    with _raises(ConfigurationError, rf"^{option} must be a number of seconds, at least 0\.001"):
        RepairQueue(topology, **{option: value})  # type: ignore[arg-type]


def test_an_option_model_given_a_bad_field() -> None:
    """ConnectOptions, RetryPolicy, Durability and Options built by hand refuse a bad
    field with a `ConfigurationError` naming it (pydantic's own error escaped them)."""
    with _raises(ConfigurationError, r"invalid ConnectOptions: socket_timeout: .*finite number"):
        stampede.ConnectOptions(socket_timeout=float("nan"))
    with _raises(ConfigurationError, r"atempts: Extra inputs .*\(known fields: attempts, base_"):
        RetryPolicy(atempts=3)  # type: ignore[call-arg]
    with _raises(ConfigurationError, r"invalid Durability: replicas: .*greater than or equal"):
        stampede.Durability(replicas=-1)
    with _raises(ConfigurationError, r"^invalid Options: retry: attempts: Input should be greater"):
        stampede.Options(retry={"attempts": 0})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "field",
    [
        "socket_timeout",
        "connect_timeout",
        "retry_base",
        "retry_cap",
        "failover_timeout",
        "refresh_interval",
    ],
)
def test_a_connection_time_that_is_infinite_is_refused(field: str) -> None:
    """ConnectOptions(socket_timeout=inf) was taken (no limit at all: a silent shard
    was waited on for ever), and so was inf for every other number of seconds of the
    connection, though NaN is refused. Infinity is refused the same way now, naming
    the field, by hand and through connect(); so is Durability(timeout=inf), which
    made every write an OverflowError."""
    with _raises(ConfigurationError, rf"invalid ConnectOptions: {field}: .*finite number"):
        stampede.ConnectOptions(**{field: float("inf")})  # type: ignore[arg-type]
    with _raises(ConfigurationError, rf"connection: {field}: .*finite number"):
        stampede.connect(["redis://127.0.0.1:1"], **{field: float("inf")})  # type: ignore[arg-type]
    with _raises(ConfigurationError, r"invalid Durability: timeout: .*finite number"):
        stampede.Durability(timeout=float("inf"))


@pytest.mark.parametrize("field", ["deadline", "base_delay", "max_delay"])
def test_a_read_retry_time_that_is_infinite_is_refused(field: str) -> None:
    """RetryPolicy(deadline=inf) was taken, then every read raised a bare
    OverflowError (its deadline bucket); max_delay=inf let a backoff sleep for ever.
    Infinity is refused as NaN is, naming the field (deadline=None reads without a
    deadline), by hand and through connect()."""
    with _raises(ConfigurationError, rf"invalid RetryPolicy: {field}: .*finite number"):
        RetryPolicy(**{field: float("inf")})  # type: ignore[arg-type]
    with _raises(ConfigurationError, rf"retry: {field}: .*finite number"):
        stampede.connect(["redis://127.0.0.1:1"], retry={field: float("inf")})
    assert RetryPolicy(deadline=None).deadline is None


def test_an_infinite_transaction_timeout_is_refused() -> None:
    """connect(transaction_timeout=inf) was taken: a transaction's commit resends to a
    shard that failed for up to that timeout, so a commit to a shard down for good
    never ended. Infinity is refused as NaN is, naming the option."""
    with _raises(ConfigurationError, r"transaction_timeout: .*finite number"):
        stampede.connect(["redis://127.0.0.1:1"], transaction_timeout=float("inf"))
    with _raises(ConfigurationError, r"invalid Options: transaction_timeout: .*finite number"):
        stampede.Options(transaction_timeout=float("inf"))


def test_expiries_every_write_would_refuse_are_refused_at_connect() -> None:
    """connect(ttl=inf) or tombstone_grace=1e-9 was taken, then every write or delete
    failed ("ttl must be ..."), and version_grace=inf made every write an
    OverflowError. Each is refused at connect(), naming the option."""
    cases: list[tuple[str, Any, str]] = [
        ("ttl", float("inf"), "less than"),
        ("ttl", 0.0001, "greater than or equal to 0.001"),
        ("tombstone_grace", 1e-9, "greater than or equal to 0.001"),
        ("version_grace", float("inf"), "less than"),
    ]
    for option, value, problem in cases:
        with _raises(ConfigurationError, rf"invalid stampede options: {option}: .*{problem}"):
            stampede.connect(["redis://127.0.0.1:1"], **{option: value})


# -- per call ----------------------------------------------------------------------------


async def test_a_misspelt_per_call_mode(st: Stampede) -> None:
    """A per-call mode is checked before anything is sent, with a suggestion."""
    with _raises(ConfigurationError, r"mode must be 'stamp' or 'commit'.*did you mean 'commit'"):
        await st.write("g", {"g:a": b"1"}, mode="comit")  # type: ignore[arg-type]
    with _raises(ConfigurationError, r"mode must be 'stamp' or 'commit'"):
        await st.read("g", ["g:a"], mode=3)  # type: ignore[arg-type]


async def test_a_per_call_strategy_or_policy_class(st: Stampede) -> None:
    """read(repair=NewestWins) and read(retry=RetryPolicy) say to pass an instance."""
    with _raises(ConfigurationError, r"got the class NewestWins; pass an instance of it"):
        await st.read("g", ["g:a"], repair=NewestWins)  # type: ignore[arg-type]
    with _raises(ConfigurationError, r"retry must be a RetryPolicy instance, got the class"):
        await st.read("g", ["g:a"], retry=RetryPolicy)  # type: ignore[arg-type]


async def test_a_per_call_durability_that_is_no_durability(st: Stampede) -> None:
    """durability=1 on a write, a delete or a transaction is refused by name before
    anything is sent (it raised AttributeError from deep inside)."""
    fix = r"durability must be a stampede.Durability, e.g. Durability\(replicas=1\), or None"
    with _raises(ConfigurationError, fix):
        await st.write("g", {"g:a": b"1"}, durability=1)  # type: ignore[arg-type]
    with _raises(ConfigurationError, fix):
        await st.delete("g", ["g:a"], durability="replicas=1")  # type: ignore[arg-type]
    with _raises(ConfigurationError, fix):
        async with st.transaction(durability=1) as tx:  # type: ignore[arg-type]
            tx.set("g:a", b"1")
    assert await st.topology.execute(b"g:a", "EXISTS", b"g:a") == 0


async def test_a_durability_that_is_not_one(st: Stampede) -> None:
    """durability= given something else (a dict, a number) is refused before anything
    is sent, naming the type to use; it was an AttributeError from deep inside."""
    fix = r"durability must be a stampede.Durability, e.g. .*, or None, got a value of type dict"
    with _raises(ConfigurationError, fix):
        await st.write("d:{1}", {"d:{1}:a": b"1"}, durability={"replicas": 1})  # type: ignore[arg-type]
    with _raises(ConfigurationError, fix):
        async with st.transaction(durability={"replicas": 1}) as tx:  # type: ignore[arg-type]
            tx.set("d:{1}:a", b"1")
    assert await st.topology.execute(b"d:{1}:a", "EXISTS", "d:{1}:a") == 0


async def test_a_ping_bound_that_is_no_number_of_seconds(st: Stampede) -> None:
    """ping(within=-1) reported every healthy shard down (TimeoutError) and within=nan
    waited unbounded; both are a `ConfigurationError` naming `within`."""
    for bad in [-1, float("nan"), 0]:
        with _raises(ConfigurationError, r"ping\(\)'s within must be a finite number of seconds"):
            await st.ping(within=bad)
    assert (await st.ping(within=5)).ok


async def test_a_str_as_the_keys(st: Stampede) -> None:
    """A single str where a list of keys belongs: read, update and delete all refuse it."""
    fix = r"must be a list of key names, not one str; write \['g:a'\]"
    with _raises(InvalidKeyError, fix):
        await st.read("g", "g:a")
    with _raises(InvalidKeyError, fix):
        await st.delete("g", "g:a")
    with _raises(InvalidKeyError, fix):
        await st.update("g", "g:a", lambda cur: {k: b"1" for k in cur})


async def test_a_delete_grace_out_of_range_is_named(st: Stampede) -> None:
    """A delete's own grace out of range is refused naming `grace`, not a ttl."""
    for bad in (0, float("inf"), 1e12):
        with _raises(ConfigurationError, r"^grace must be a number of seconds, at least 0\.001 "):
            await st.delete("g", ["g:a"], grace=bad)
    with _raises(
        ConfigurationError, r"^ttl must be .* below 10\*\*10, got 1000000000000\.0; pass None"
    ):
        await st.write("g", {"g:a": b"x"}, ttl=1e12)


async def test_a_key_named_twice_is_named_as_it_was(st: Stampede) -> None:
    """A read naming one key twice was told of "one write" and a str/bytes mix it did
    not make; the message names the call and mentions the mix only when there is one."""
    with _raises(InvalidKeyError, r"named twice in one call on group b'g'; name each key once"):
        await st.read("g", ["g:a", "g:a"])
    with _raises(InvalidKeyError, r"named twice in one call on group b'g' \(as str and as bytes\)"):
        await st.delete("g", ["g:a", b"g:a"])  # type: ignore[type-var]


async def test_update_needs_a_function(st: Stampede) -> None:
    """update() given a mapping instead of a function says what fn is."""
    with _raises(InvalidValueError, r"needs fn, a function current -> new values, got a value"):
        await st.update("g:{1}", ["g:{1}:a"], {"g:{1}:a": b"1"})  # type: ignore[arg-type]


async def test_a_group_name_that_is_not_text(st: Stampede) -> None:
    """A group named by a number is refused with an example."""
    with _raises(InvalidKeyError, r"group name must be str or bytes, got a value of type int"):
        await st.write(42, {"g:a": b"1"})  # type: ignore[arg-type]


async def test_values_that_are_not_bytes(st: Stampede) -> None:
    """A value that is not bytes or str names its key and says to serialise it."""
    with _raises(InvalidValueError, r"value for key b'g:a' must be bytes or str, got int"):
        await st.write("g", {"g:a": 1})  # type: ignore[dict-item]
    with _raises(InvalidValueError, r"must be a mapping of key -> bytes, got list"):
        await st.write("g", [b"1"])  # type: ignore[arg-type]


async def test_a_str_value_that_is_not_utf8(st: Stampede) -> None:
    """A str value with a lone surrogate (a `surrogateescape`d file name, say): write,
    update and a transaction name its key and say to pass bytes; nothing is written."""
    keys = ["u:{1}:a", "u:{1}:b"]
    bad = "caf\udce9"
    fix = r"value for key b'u:\{1\}:b' is a str that cannot be encoded as UTF-8.*raw bytes"
    with _raises(InvalidValueError, fix):
        await st.write("u:{1}", {keys[0]: b"1", keys[1]: bad})
    with _raises(InvalidValueError, fix):
        await st.update("u:{1}", keys, lambda cur: {keys[0]: b"1", keys[1]: bad})
    with _raises(InvalidValueError, fix):
        async with st.transaction() as tx:
            tx.set(keys[0], b"1")
            tx.set(keys[1], bad)
    assert await st.topology.execute(b"u:{1}:a", "EXISTS", *keys) == 0
    assert (await st.read("u:{1}", keys)).status is stampede.Status.NOT_FOUND


async def test_newest_wins_on_a_group_with_a_missing_key(st: Stampede) -> None:
    """NewestWins cannot re-stamp a key that is missing; the message says what to use."""
    keys = ["p:{1}:a", "p:{1}:b"]
    await st.write("p:{1}", {keys[0]: b"1"})
    await write_newer(st, [keys[0].encode()], b"2")
    await st.topology.execute(keys[1].encode(), "SET", keys[1], b"")
    await st.topology.execute(keys[1].encode(), "DEL", keys[1])
    with _raises(TornReadError, r"NewestWins without rebuild cannot repair it.*Refetch\(loader\)"):
        await st.read(
            "p:{1}", keys, retry=RetryPolicy(attempts=2, deadline=30.0), repair=NewestWins()
        )


def test_repair_strategies_given_no_function() -> None:
    """A loader or rebuild that is not a function, or a fills_missing that is not a
    bool, is refused when the strategy is made, not at the first torn read."""
    with _raises(ConfigurationError, r"Refetch\(loader\) takes an async function .* got NoneType"):
        Refetch(None)  # type: ignore[arg-type]
    with _raises(ConfigurationError, r"fills_missing is True or False, got str"):
        Refetch(lambda g, k: None, fills_missing="no")  # type: ignore[arg-type,return-value]
    with _raises(ConfigurationError, r"NewestWins\(rebuild=...\) takes a function .* got int"):
        NewestWins(rebuild=123)  # type: ignore[arg-type]


async def test_repair_functions_returning_the_wrong_things(st: Stampede) -> None:
    """A rebuild that raises or returns no bytes, a loader naming its keys as str: a
    StampedeError naming the group and the key, and nothing is written; a plain
    (not async) loader is called like an async one."""
    keys = ["rp:{1}:a", "rp:{1}:b"]
    await st.write("rp:{1}", dict.fromkeys(keys, b"1"))
    await write_newer(st, [keys[0].encode()], b"2")
    stored = [await st.topology.execute(k.encode(), "GET", k) for k in keys]
    quick = RetryPolicy(attempts=2, deadline=30.0)

    def boom(truth: Any, stale: Any) -> Any:
        raise KeyError("profile")

    cases: list[tuple[Any, type[StampedeError], str]] = [
        (NewestWins(rebuild=boom), RepairError, r"'rp:\{1\}' failed: the rebuild raised KeyError"),
        (
            NewestWins(rebuild=lambda truth, stale: dict.fromkeys(stale, "text")),  # type: ignore[arg-type]
            InvalidValueError,
            r"rebuild for group 'rp:\{1\}' returned str for key b'rp:\{1\}:b'; it must return",
        ),
        (
            NewestWins(rebuild=lambda truth, stale: [b"x"]),  # type: ignore[arg-type,return-value]
            InvalidValueError,
            r"rebuild for group 'rp:\{1\}' returned list; it must return a mapping stale key",
        ),
        (
            NewestWins(rebuild=lambda truth, stale: dict.fromkeys(stale)),  # type: ignore[arg-type,return-value]
            RepairError,
            r"rebuild returned no payload for \[b'rp:\{1\}:b'\]; it must return every stale key",
        ),
        (
            Refetch(lambda group, ks: {k.decode(): b"x" for k in ks}),  # type: ignore[arg-type,return-value]
            RepairError,
            r"no payload for .* \(it named \['rp:\{1\}:a', 'rp:\{1\}:b'\] as str: the keys are",
        ),
    ]
    for repair, kind, message in cases:
        with _raises(kind, message):
            await st.read("rp:{1}", keys, retry=quick, repair=repair)
        assert [await st.topology.execute(k.encode(), "GET", k) for k in keys] == stored
    plain = Refetch(lambda group, ks: dict.fromkeys(ks, b"loaded"))  # type: ignore[arg-type,return-value]
    result = await st.read("rp:{1}", keys, retry=quick, repair=plain)
    assert result.repaired and result.values == dict.fromkeys(keys, b"loaded")


# -- arguments that cannot be sent -------------------------------------------------------


async def test_an_argument_that_cannot_be_sent_is_refused_before_anything_is(
    st: Stampede,
) -> None:
    """None, a bool, or a str that is not UTF-8 as a script argument or in a MULTI block:
    an `InvalidValueError` naming the argument, and nothing of the call applied."""
    keep = atomic.script("redis.call('SET', KEYS[1], ARGV[1]); return 1", name="keep")
    for bad, what in [(None, "got NoneType"), (True, "got bool"), ("\udcff", "not be encoded")]:
        with _raises(InvalidValueError, rf"args\[1\] of Lua keep .*{what}.*nothing was sent"):
            await keep(st, keys=["s:{1}:a"], args=[b"ok", bad])
        with _raises(InvalidValueError, rf"argument 2 of SET .*{what}.*nothing was sent"):
            await atomic.multi(st, [("SET", "s:{1}:a", b"1"), ("SET", "s:{1}:b", bad)])
    assert await st.topology.execute(b"s:{1}:a", "EXISTS", "s:{1}:a", "s:{1}:b") == 0
    assert await keep(st, keys=["s:{1}:a"], args=[b"ok"]) == 1  # the connection still serves


# -- atomic helpers, update() and the repair queue ---------------------------------------


async def test_atomic_helpers_refuse_malformed_commands(st: Stampede) -> None:
    """A malformed command or plan is an `InvalidValueError` saying what shape to use,
    before anything is sent (a bare ValueError, TypeError or UnicodeDecodeError)."""
    with _raises(InvalidValueError, r"an empty command; write it as a tuple"):
        await atomic.multi(st, [()])
    with _raises(InvalidKeyError, r"EVAL takes the number of its keys before them, got 'x'"):
        await atomic.multi(st, [("EVAL", "return 1", "x", "a:{1}")])
    with _raises(InvalidValueError, r"a command must be a tuple .*got str 'SET a:\{1\} 1'"):
        await atomic.multi(st, ["SET a:{1} 1"])  # type: ignore[list-item]
    with _raises(InvalidKeyError, r"cannot tell which keys b'\\xff' touches"):
        await atomic.multi(st, [(b"\xff", "a:{1}")])
    with _raises(InvalidValueError, r"watch\(\) needs fn, a function tx -> commands"):
        await atomic.watch(st, ["a:{1}"], None)  # type: ignore[arg-type]
    for plan in ["SET a:{1} 1", 5]:
        with _raises(InvalidValueError, r"the function of watch\(\) returns None or a list"):
            await atomic.watch(st, ["a:{1}"], lambda tx, plan=plan: plan)  # type: ignore[misc]
    with _raises(InvalidValueError, r"a Lua script's source must be non-empty str or bytes"):
        atomic.script(5)  # type: ignore[arg-type]
    with _raises(InvalidKeyError, r"the keys of Lua one must be a list, not one str"):
        await atomic.script("return 1", name="one")(st, keys="a:{1}")
    assert await st.topology.execute(b"a:{1}", "EXISTS", "a:{1}") == 0


async def test_attempt_counts_and_delays_that_are_not(st: Stampede) -> None:
    """max_attempts of 0 (update() reported "lost 0 times"), a str, a float; a NaN
    delay: a `ConfigurationError` naming the parameter, before anything is sent."""
    grow = lambda cur: {k: b"1" for k in cur}  # noqa: E731
    for bad in [0, -1, "3", 1.5, True]:
        with _raises(ConfigurationError, rf"update\(\)'s max_attempts must be .*{bad!r}"):
            await st.update("n:{1}", ["n:{1}:a"], grow, max_attempts=bad)  # type: ignore[arg-type]
        with _raises(ConfigurationError, r"watch\(\)'s max_attempts must be a whole number"):
            await atomic.watch(st, ["n:{1}:a"], lambda tx: None, max_attempts=bad)  # type: ignore[arg-type]
    with _raises(ConfigurationError, r"watch\(\)'s base_delay must be a finite number of seconds"):
        await atomic.watch(st, ["n:{1}:a"], lambda tx: None, base_delay=float("nan"))
    bad_fields: list[tuple[str, Any]] = [
        ("partitions", "2"),
        ("max_attempts", 0),
        ("min_idle", float("nan")),
    ]
    for field, value in bad_fields:
        with _raises(ConfigurationError, rf"{field} must be a"):
            RepairQueue(st.topology, **{field: value})
    assert await st.topology.execute(b"n:{1}:a", "EXISTS", "n:{1}:a") == 0


async def test_event_logs_fanout_and_envelopes_refuse_bad_input(st: Stampede) -> None:
    """The event log, fanout, `Envelope` and `SlotMap` raised bare ValueError / TypeError
    / AttributeError / UnicodeEncodeError; each is a `StampedeError` now, and nothing
    of the call is sent."""
    token = stampede.new_token()
    with _raises(InvalidValueError, r"a log change must be bytes or str, got NoneType"):
        await eventlog.append_changes(st, {"e:{1}:a": b"1", "e:{1}:b": None})  # type: ignore[dict-item]
    with _raises(InvalidValueError, r"a log change is a str that cannot be encoded as UTF-8"):
        await eventlog.append_changes(st, {"e:{1}:a": "\udcff"})
    with _raises(
        InvalidValueError, r"append_changes\(\) takes a mapping \{name: value, ...\}, got str"
    ):
        await eventlog.append_changes(st, "e:{1}:a")  # type: ignore[arg-type]
    with _raises(ConfigurationError, r"token must be a 26-character upper-case ULID"):
        await eventlog.append_changes(st, {"e:{1}:a": b"1"}, token="x")
    with _raises(InvalidKeyError, r"record_events\(\) got an empty mapping"):
        await eventlog.record_events(st, "e:{1}", {}, version=1, token=token)
    with _raises(ConfigurationError, r"version must be a whole number in 0\.\..*got '1'"):
        await eventlog.record_events(st, "e:{1}", {"p": b"x"}, version="1", token=token)  # type: ignore[arg-type]
    with _raises(ConfigurationError, r"depth must be a whole number at least 1, got 0"):
        await eventlog.latest_changes(st, ["e:{1}:a"], depth=0)
    with _raises(ConfigurationError, r"keep must be a whole number at least 0, got -1"):
        await eventlog.trim_logs(st, ["e:{1}:a"], keep=-1)
    with _raises(ConfigurationError, r"takes exactly one of keep= or before="):
        await eventlog.trim_events(st, "e:{1}")
    with _raises(InvalidValueError, r"takes a sequence of keys, not one key; wrap it"):
        await fanout.mget(st, "e:{1}:a")
    assert await st.topology.execute(b"e:{1}:a", "EXISTS", "e:{1}:a:log", "e:{1}:b:log") == 0
    # a wrong type is a TypeError in both builds: InvalidValueError naming the field in
    # the pure one, the compiled class's own check in the mypyc one (docs/performance.md)
    with pytest.raises(TypeError):
        stampede.Envelope("1", token, b"x")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        stampede.Envelope(1, token, "x")  # type: ignore[arg-type]
    with _raises(ConfigurationError, r"slot must be in 0\.\.16383, got 16384"):
        stampede.SlotMap.even(3).shard_of(16384)


async def test_a_worker_or_a_job_given_bad_parameters(st: Stampede) -> None:
    """Worker(concurrency="2") was a TypeError, concurrency=0 a ValueError, and a NaN
    grace or sweep interval, a negative job timeout were taken as they were; a job
    enqueued with no keys (or one str for them) went on the queue. Each is refused,
    naming the parameter, and nothing is queued."""
    queue = RepairQueue(st.topology, name="bad-input-jobs")
    bad: list[tuple[str, Any]] = [
        ("concurrency", "2"),
        ("concurrency", 0),
        ("grace", float("nan")),
        ("sweep_interval", float("inf")),
        ("job_timeout", -1),
        ("health_interval", 0),
    ]
    for field, value in bad:
        with _raises(ConfigurationError, rf"{field} must be .*got {value!r}"):
            Worker(st.topology, queue, NewestWins(), **{field: value})
    for keys in [[], "g:{1}:a"]:
        with _raises(InvalidKeyError, r"group 'g:\{1\}' (names no keys|must be a list of key)"):
            await queue.enqueue("g:{1}", keys, {}, "torn")
    assert (await queue.stats())["length"] == 0


# -- typed groups ------------------------------------------------------------------------


class Profile(BaseModel):
    name: str


def test_typed_group_given_a_str_or_an_instance() -> None:
    """TypedGroup takes model classes; a str or a model instance is refused with the fix."""
    with _raises(ConfigurationError, r"TypedGroup takes a TypedDict of pydantic models or a"):
        TypedGroup("profile")  # type: ignore[call-overload]
    with _raises(ConfigurationError, r"maps to an instance of Profile; give the model class"):
        TypedGroup({"profile": Profile(name="x")})  # type: ignore[dict-item]


async def test_typed_write_given_a_str(st: Stampede) -> None:
    """A typed write given a str for its parts says to give a mapping."""
    users = TypedGroup({"profile": Profile})
    with _raises(InvalidValueError, r"takes the parts as a mapping part -> model, got str"):
        await users.write(st, "user:{1}", "Ada")  # type: ignore[arg-type]
    with _raises(InvalidValueError, r"a typed group's name must be text, got int"):
        await users.read(st, 1)  # type: ignore[arg-type]


async def test_typed_write_of_text_that_is_not_utf8(st: Stampede) -> None:
    """A model whose str field holds a lone surrogate: pydantic's serialisation error
    escaped a typed write; it is an `InvalidValueError` naming the part, and no part
    is written."""
    users = TypedGroup({"profile": Profile, "extra": Profile})
    with _raises(InvalidValueError, r"part 'extra' of 'user:\{1\}' cannot be encoded.*UTF-8"):
        await users.write(
            st, "user:{1}", {"profile": Profile(name="a"), "extra": Profile(name="\udcff")}
        )
    assert await st.topology.execute(b"user:{1}", "EXISTS", *users.keys("user:{1}").values()) == 0


# -- credentials, ACL and TLS --------------------------------------------------------------


@pytest.fixture
def secured() -> Iterator[RedisNode]:
    with RedisNode() as node:
        node.client().config_set("requirepass", "s3cret")
        admin = node.client(password="s3cret")
        admin.acl_setuser(
            "pinger", enabled=True, passwords=["+pw"], keys=["*"], commands=["+ping", "+info"]
        )
        try:
            yield node
        finally:
            admin.config_set("requirepass", "")


async def test_missing_credentials_on_the_data_path(secured: RedisNode) -> None:
    """Without open(), a call to a server that needs a password says so, and no more."""
    st = stampede.connect(secured.url, connection=FAST)
    try:
        with _raises(
            stampede.ShardUnavailable, r"authentication required; put user:password"
        ) as info:
            await st.read("g", ["g:a"])
    finally:
        await st.aclose()
    assert "reachable" not in str(info.value)


async def test_an_acl_user_without_a_permission(secured: RedisNode) -> None:
    """An ACL user allowed to connect but not to read is told what to grant: at open(),
    and on the data path when open() was skipped."""
    url = f"redis://pinger:pw@{secured.address}"
    with _raises(stampede.SetupError, r"the ACL user may not run what stampede needs.*ACL SETUSER"):
        async with stampede.connect(url, connection=FAST):
            pass
    st = stampede.connect(url, connection=FAST)
    try:
        with _raises(stampede.ShardResponseError, r"the ACL user may not do this.*ACL SETUSER"):
            await st.read("g", ["g:a"])
    finally:
        await st.aclose()


async def test_rediss_to_a_plain_port(secured: RedisNode) -> None:
    """TLS against a plain port: the fix is redis:// or the tls-port."""
    url = f"rediss://:s3cret@{secured.address}"
    quick = stampede.ConnectOptions(connect_timeout=0.5, socket_timeout=0.5)
    with _raises(stampede.SetupError, r"does not seem to speak TLS: use redis:// for a plain"):
        async with stampede.connect(url, connection=quick):
            pass


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("ssl_ca_certs=/nonexistent/ca.pem", r"cannot load the CA file ssl_ca_certs='/nonexist"),
        ("ssl_ca_certs={here}", r"cannot load the CA file .*give a readable PEM file"),
        ("ssl_certfile={here}", r"cannot load the client certificate ssl_certfile="),
        ("client_name=bad%20name", r"client_name 'bad name' may hold only printable ASCII"),
    ],
    ids=["ca-missing", "ca-not-pem", "cert-not-pem", "client-name-space"],
)
async def test_url_options_that_cannot_work_are_refused_up_front(
    stampede_primaries: Any, query: str, message: str
) -> None:
    """A TLS file that is missing or not PEM was a FileNotFoundError / ssl.SSLError
    (a traceback on the command line); a client name Redis refuses passed as a server
    that "refused stampede's checks", problem "unreachable" (CLI exit 3). Both are
    `ConfigurationError`s naming the option before anything is sent; the CLI's usage
    error (exit 2)."""
    scheme = "redis" if query.startswith("client_name") else "rediss"
    url = f"{scheme}://{stampede_primaries.nodes[0].address}?{query.format(here=__file__)}"
    with _raises(ConfigurationError, message):
        async with stampede.connect(url):
            pass
    cli = run_cli("queue", "stats", "--url", url, "--no-check-identity", timeout=60)
    err = cli.stderr.decode()
    assert cli.returncode == 2 and "bad Redis URL" in err and "Traceback" not in err, err


# -- the command line without its extra ----------------------------------------------------


def test_the_cli_without_its_extra_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without click (the `cli` extra), the console script names the extra to install."""
    from stampede import _console

    monkeypatch.setitem(sys.modules, "click", None)
    with pytest.raises(SystemExit) as info:
        _console.main()
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert "needs the 'cli' extra (click is not installed)" in err
    assert "pip install 'stampede-redis[cli]'" in err


def test_importing_the_library_needs_neither_click_nor_rich() -> None:
    """`import stampede` works without the command line's dependencies."""
    code = "import sys, stampede; print(sorted({'click', 'rich'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- the helpers' arguments (eventlog, atomic, fanout, the worker, Envelope) -----------


async def test_helper_arguments_out_of_range(st: Stampede) -> None:
    """Each raised a bare ValueError or TypeError before; nothing is sent."""
    from stampede import atomic, eventlog, fanout
    from stampede.repair import Worker
    from stampede.wire import Envelope

    with _raises(ConfigurationError, "keep must be a whole number at least 0, got -1"):
        await eventlog.trim_logs(st, ["k"], keep=-1)
    with _raises(ConfigurationError, "count must be a whole number at least 0, got -2"):
        await eventlog.read_log(st, "k", count=-2)
    with _raises(ConfigurationError, "exactly one of keep= or before="):
        await eventlog.trim_events(st, "g")
    with _raises(InvalidValueError, "an event payload must be bytes or str, got int"):
        await eventlog.record_events(st, "g", {"a": 1}, version=1, token="0" * 26)  # type: ignore[dict-item]
    with _raises(ConfigurationError, "max_attempts must be a whole number at least 1, got 0"):
        await atomic.watch(st, ["k"], lambda _: [], max_attempts=0)
    with _raises(InvalidValueError, "not one key; wrap it"):
        await fanout.mget(st, "k")
    with _raises(ConfigurationError, "concurrency must be at least 1, got 0"):
        Worker(st.topology, None, None, concurrency=0)  # type: ignore[arg-type]
    with _raises(ConfigurationError, "version must be an int in 0..2\\*\\*63-1, got -1"):
        Envelope(-1, "0" * 26)
    with pytest.raises(TypeError):  # (InvalidValueError in the pure build)
        Envelope(1, "0" * 26, "x")  # type: ignore[arg-type]
    assert await st.topology.execute(b"k", "EXISTS", b"k") == 0


@pytest.mark.parametrize(
    ("argument", "value"),
    [("grace", float("inf")), ("grace", float("nan")), ("hold", -1), ("grace", "5"), ("count", 0)],
)
async def test_sweep_arguments_out_of_range(st: Stampede, argument: str, value: object) -> None:
    """`sweep_versions(grace=inf)` raised a bare OverflowError, NaN a ValueError, a
    str a TypeError; each is now a ConfigurationError naming the argument."""
    from stampede.repair import sweep_versions

    with _raises(ConfigurationError, rf"^{argument} must be a "):
        await sweep_versions(st.topology, **{argument: value})  # type: ignore[arg-type]
