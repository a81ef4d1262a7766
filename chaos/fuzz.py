"""Fuzz the decoders and the verdict with hypothesis: only the documented errors escape.

| target           | function                          | may raise                    |
| ---------------- | --------------------------------- | ---------------------------- |
| `envelope`       | `Envelope.decode(raw)`            | `MalformedEnvelope`          |
| `verdict`        | `judge(Observation(...))`         | nothing                      |
| `commit-record`  | `Observation.commit()`            | nothing (None if unreadable) |
| `stream-entry`   | `RepairQueue._job(stream, id, f)` | nothing (a malformed job)    |
| `scan-pattern`   | `scan.compile_pattern(pattern)`   | `ConfigurationError`         |

Beyond "no other exception", each target checks a property: an envelope decodes
to exactly the bytes it came from; a consistent verdict really has one token
everywhere (and the record names it); a commit record written by the writer reads
back with its keys; a stream entry written by the queue parses back to its job; a
compiled scan pattern has its `group`.

Inputs mix random bytes with near misses built from the formats' own parts, and
the hostile inputs that found defects before: JSON nested past the recursion limit,
keys that are not UTF-8, lone surrogates, repeat counts past 2**32. Those defects
(`REGRESSIONS`, all fixed; see CHANGELOG.md) keep their minimal reproductions,
which `probe` replays on every run.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stampede.errors import ConfigurationError, MalformedEnvelope
from stampede.repair._jobs import encode_fields, flatten, parse_job
from stampede.repair._queue import RepairQueue
from stampede.scan import compile_pattern
from stampede.topology._shards import Shards
from stampede.verdict import Mode, Observation, Status, judge
from stampede.wire import MAX_VERSION, Envelope
from stampede.wire import encode_commit as commit_payload

__all__ = [
    "REGRESSIONS",
    "TARGETS",
    "Defect",
    "FuzzResult",
    "check_commit_record",
    "check_envelope",
    "check_pattern",
    "check_stream_entry",
    "check_verdict",
    "commit_records",
    "envelope_inputs",
    "observations",
    "offline_queue",
    "probe",
    "run_target",
    "scan_patterns",
    "stream_entries",
]

TOKEN = "01JD0000000000000000000000"
_TOKEN_CHARS = "0123456789ABCDEFGHJKMNPQRSTVWXYZabcdefhijklmnopqrstuvwxyzILOU-:"
DEEP = 5000  # nesting past Python's recursion limit


# -- defects fuzzing found ---------------------------------------------------------------


@dataclass(frozen=True)
class Defect:
    """A library defect fuzzing found: an input that raised an undocumented error."""

    name: str
    target: str
    summary: str
    reproduce: Callable[[], object]
    raises: type[BaseException]


def _repro_surrogate_record() -> object:
    keys = (b"g:\xff",)
    record = Envelope(1, TOKEN, commit_payload(list(keys))).encode()
    return judge(Observation(b"g", keys, (Envelope(1, TOKEN, b"x").encode(),), Mode.COMMIT, record))


def _repro_deep_record() -> object:
    record = Envelope(1, TOKEN, b"[" * DEEP + b"]" * DEEP).encode()
    return judge(Observation(b"g", (b"a",), (Envelope(1, TOKEN).encode(),), Mode.COMMIT, record))


def _repro_deep_job() -> object:
    return parse_job(b"s", b"1-1", [b"group", b"g", b"keys", b"[" * DEEP + b"]" * DEEP], 1, 5)


def _repro_seen_not_object() -> object:
    job = parse_job(b"s", b"1-1", [b"group", b"g", b"keys", b'["g:a"]', b"seen", b"0"], 1, 5)
    return job.fields()


REGRESSIONS: tuple[Defect, ...] = (
    Defect(
        "commit-record-non-utf8-key",
        "verdict",
        "judge() (so every commit-mode read) raised UnicodeEncodeError when the group had a "
        "key that is not UTF-8: commit_payload writes it with surrogateescape, "
        "Observation.commit() encoded it back strictly",
        _repro_surrogate_record,
        UnicodeEncodeError,
    ),
    Defect(
        "commit-record-deep-json",
        "verdict",
        "judge() raised RecursionError for a commit record whose JSON nests deeper than "
        "Python's recursion limit (Observation.commit caught only ValueError)",
        _repro_deep_record,
        RecursionError,
    ),
    Defect(
        "stream-entry-deep-json",
        "stream-entry",
        "RepairQueue._job raised RecursionError for an entry whose keys/seen JSON nests too "
        "deep; claim() raised it and Worker.run died (it caught StampedeError only), and "
        "the entry, left pending, killed the next worker too",
        _repro_deep_job,
        RecursionError,
    ),
    Defect(
        "stream-entry-seen-not-object",
        "stream-entry",
        "RepairQueue._job accepted an entry whose seen field is JSON but not an object; "
        "Job.fields() then raised TypeError, and so did queue.fail() and dead_letter(): "
        "the worker's task died, the job was never dead-lettered and was reclaimed forever",
        _repro_seen_not_object,
        TypeError,
    ),
    Defect(
        "pattern-repeat-overflow",
        "scan-pattern",
        "compile_pattern raised OverflowError for a repeat count of 2**32-1 or more",
        lambda: compile_pattern("(?P<group>a{4294967295})"),
        OverflowError,
    ),
    Defect(
        "pattern-deep-nesting",
        "scan-pattern",
        "compile_pattern raised RecursionError for parentheses nested about 1000 deep",
        lambda: compile_pattern("(" * 2000 + "(?P<group>a)" + ")" * 2000),
        RecursionError,
    ),
    Defect(
        "pattern-surrogate",
        "scan-pattern",
        "compile_pattern raised UnicodeEncodeError for a str pattern with a lone surrogate "
        "(what a non-UTF-8 command-line argument decodes to)",
        lambda: compile_pattern("(?P<group>\udcff)"),
        UnicodeEncodeError,
    ),
)


def probe(defect: Defect) -> str | None:
    """The exception its reproduction raises again (`Type: message`); None while fixed."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            defect.reproduce()
    except defect.raises as exc:
        return f"{type(exc).__name__}: {str(exc)[:80]}"
    except (MalformedEnvelope, ConfigurationError):
        return None
    return None


# -- strategies -------------------------------------------------------------------------

_versions = st.one_of(
    st.integers(0, MAX_VERSION).map(lambda v: str(v).encode()),
    st.integers(MAX_VERSION + 1, 10**20).map(lambda v: str(v).encode()),
    st.sampled_from([b"", b"-1", b"+1", b"01", b"00", b"1.0", b" 1", b"1e3", b"\xd9\xa1"]),
    st.binary(max_size=4),
)
_tokens = st.one_of(
    st.just(TOKEN.encode()),
    st.text(_TOKEN_CHARS, min_size=24, max_size=28).map(str.encode),
    st.binary(max_size=30),
)


def envelope_inputs() -> st.SearchStrategy[bytes]:
    """Random bytes, real envelopes, and envelopes with one part broken."""
    near = st.builds(
        lambda v, t, p, sep: v + sep + t + sep + p,
        _versions,
        _tokens,
        st.binary(max_size=16),
        st.sampled_from([b":", b":", b";", b"::"]),
    )
    real = st.builds(
        lambda v, p: Envelope(v, TOKEN, p).encode(), st.integers(0, MAX_VERSION), st.binary()
    )
    return st.one_of(st.binary(max_size=64), near, real)


def _json_keys() -> st.SearchStrategy[bytes]:
    """JSON of key lists, other JSON, junk, deep nesting, keys that are not UTF-8."""
    keys = st.lists(st.text(max_size=8), max_size=4).map(lambda ks: json.dumps(ks).encode())
    junk = st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
        max_leaves=8,
    ).map(lambda v: json.dumps(v).encode())
    deep = st.integers(300, DEEP).map(lambda n: b"[" * n + b"]" * n)
    foreign = st.lists(st.binary(min_size=1, max_size=6), min_size=1, max_size=3).map(
        lambda ks: commit_payload(ks)
    )
    return st.one_of(keys, junk, st.binary(max_size=24), deep, foreign)


def commit_records() -> st.SearchStrategy[bytes | None]:
    """None, junk, and envelopes whose payload is (near-)JSON of keys."""
    stamped = st.builds(
        lambda v, t, p: Envelope(v, t, p).encode(),
        st.integers(0, 3),
        st.sampled_from([TOKEN, "01JD0000000000000000000001"]),
        _json_keys(),
    )
    return st.one_of(st.none(), envelope_inputs(), stamped)


def observations() -> st.SearchStrategy[Observation]:
    """Group reads: 1-4 keys, each missing, junk, or stamped by one of a few writes."""
    value = st.one_of(
        st.none(),
        st.builds(
            lambda v, t, p: Envelope(v, t, p).encode(),
            st.integers(0, 3),
            st.sampled_from([TOKEN, "01JD0000000000000000000001"]),
            st.binary(max_size=4),
        ),
        envelope_inputs(),
    )

    def build(n: int, raws: list[bytes | None], mode: Mode, record: bytes | None) -> Observation:
        keys = tuple(b"g:%d" % i for i in range(n))
        return Observation(b"g", keys, tuple(raws[:n]), mode, record)

    return st.builds(
        build,
        st.integers(1, 4),
        st.lists(value, min_size=4, max_size=4),
        st.sampled_from(list(Mode)),
        commit_records(),
    )


_FIELD_NAMES = [b"group", b"keys", b"seen", b"reason", b"enqueued_at", b"attempts"]
_FIELD_NAMES += [b"last_error", b"mode", b"failed_at", b"GROUP", b""]


def stream_entries() -> st.SearchStrategy[Any]:
    """Stream entries as Redis returns them: flat field/value lists (or dicts, RESP3)."""
    values = st.one_of(
        st.binary(max_size=24),
        _json_keys(),
        st.integers().map(lambda i: str(i).encode()),
        st.floats(allow_nan=True).map(lambda f: repr(f).encode()),
        st.sampled_from([b"stamp", b"commit", b"torn", b"inf", b"nan", b"1e999", b"-0", b"0"]),
    )
    pairs = st.lists(st.tuples(st.sampled_from(_FIELD_NAMES) | st.binary(max_size=6), values))
    flat = pairs.map(lambda ps: [part for pair in ps for part in pair])
    as_dict = pairs.map(dict)
    written = st.builds(
        lambda g, ks, r, a, m: flatten(
            encode_fields(g, ks, {k.decode(): None for k in ks}, r, 1.5, a, m)
        ),
        st.binary(min_size=1, max_size=8),
        st.lists(st.text(min_size=1, max_size=6).map(str.encode), max_size=3),
        st.sampled_from(["torn", "partial", "uncommitted", "unstamped"]),
        st.integers(0, 9),
        st.sampled_from([None, "stamp", "commit"]),
    )
    return st.one_of(flat, as_dict, written)


_REGEX_PARTS = [
    "(?P<group>", ")", "(", "(?:", "\\", "[", "]", "a", ".", "*", "+", "?", "{", "}", ",",
    "|", "^", "$", "(?P<", ">", "group", "(?P=group)", "\\d", "\\{", "\\}", ":", "(?i)",
    "(?<", "(?=", "(?!", "\\1", "(?a)", "(?u)", "(?x)", "#", "\\N{", "-", "\\x", "ø",
]  # fmt: skip


def scan_patterns() -> st.SearchStrategy[str | bytes]:
    """Regex-shaped token soup, with and without a `group`, as str and as bytes."""
    repeats = st.integers(0, 2**40).map(lambda n: f"{{{n}}}")
    soup = st.lists(st.sampled_from(_REGEX_PARTS) | repeats, max_size=16).map("".join)
    grouped = soup.map(lambda s: f"(?P<group>{s})")
    deep = st.integers(1000, 3000).map(lambda n: "(" * n + "(?P<group>a)" + ")" * n)
    return st.one_of(
        soup,
        grouped,
        grouped.map(str.encode),
        st.text(st.characters(), max_size=12),  # lone surrogates included
        st.binary(max_size=12),
        deep,
    )


# -- properties -------------------------------------------------------------------------


def check_envelope(raw: bytes) -> None:
    """Decodes to exactly these bytes, or raises MalformedEnvelope."""
    try:
        env = Envelope.decode(raw, key=b"k")
    except MalformedEnvelope:
        return
    assert env.encode() == raw, "decode then encode changed the bytes"


def check_verdict(obs: Observation) -> None:
    """judge() never raises, and what it calls consistent is (independently) one write."""
    verdict = judge(obs)
    if verdict.status is Status.NOT_FOUND:
        assert all(raw is None for raw in obs.raw), "not found, but a key holds a value"
    if verdict.status is not Status.CONSISTENT:
        return
    envs = [Envelope.decode(raw) for raw in obs.raw if raw is not None]
    assert len(envs) == len(obs.keys), "consistent, but a key is missing"
    # The stamps rule: one token everywhere (a token names one write; versions are not compared)
    assert len({e.token for e in envs}) == 1, "consistent, but several tokens"
    if obs.mode is Mode.COMMIT:
        assert obs.commit_raw is not None
        head = Envelope.decode(obs.commit_raw)
        assert (head.version, head.token) == (envs[0].version, envs[0].token)


def check_commit_record(raw: bytes | None, keys: list[bytes]) -> None:
    """commit() returns a record or None; a record the writer wrote reads back whole."""
    obs = Observation(b"g", (), (), Mode.COMMIT, raw)
    record = obs.commit()
    assert record is None or all(isinstance(k, bytes) for k in record.keys)
    written = Envelope(5, TOKEN, commit_payload(keys)).encode()
    back = Observation(b"g", (), (), Mode.COMMIT, written).commit()
    assert back is not None and back.keys == frozenset(keys), "a written record reads back wrong"


_QUEUE: RepairQueue | None = None


def offline_queue() -> RepairQueue:
    """A `RepairQueue` over a never-connected `Shards` (parsing needs no server)."""
    global _QUEUE
    if _QUEUE is None:
        _QUEUE = RepairQueue(Shards(["redis://127.0.0.1:1"]))
    return _QUEUE


def check_stream_entry(entry: Any) -> None:
    """Any entry becomes a Job that can be written back (retried or dead-lettered);
    an entry the queue wrote parses back to the same group and keys."""
    job = parse_job(b"stampede:repairs", b"1700000000000-0", entry, 1, 5)
    assert job.id == "1700000000000-0"
    again = job.fields()  # what fail() and dead_letter() write: must work for any job
    fields = _as_fields(entry)
    if job.reason == "malformed" or not _is_key_list(fields.get(b"keys")):
        return
    assert again[b"group"] == fields[b"group"], "the group changed"
    assert json.loads(again[b"keys"]) == json.loads(fields[b"keys"]), "the keys changed"


def _as_fields(entry: Any) -> dict[Any, Any]:
    if isinstance(entry, list):
        return dict(zip(entry[::2], entry[1::2], strict=True))
    return dict(entry)


def _is_key_list(raw: Any) -> bool:
    """True when `raw` is the JSON of a list of strings (what the queue writes)."""
    try:
        keys = json.loads(raw)
    except (TypeError, ValueError, RecursionError):
        return False
    return isinstance(keys, list) and all(isinstance(k, str) for k in keys)


def check_pattern(pattern: str | bytes) -> None:
    """A compiled pattern with a `group`, or ConfigurationError."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # re's FutureWarnings are warnings, not errors
            compiled = compile_pattern(pattern)
    except ConfigurationError:
        return
    assert "group" in compiled.groupindex


# -- running ----------------------------------------------------------------------------


@dataclass
class FuzzResult:
    target: str
    cases: int = 0
    failure: str | None = None


def _commit_case() -> st.SearchStrategy[tuple[bytes | None, list[bytes]]]:
    keys = st.lists(st.binary(min_size=1, max_size=6), max_size=4, unique=True)
    return st.tuples(commit_records(), keys)


TARGETS: dict[str, tuple[Callable[[], st.SearchStrategy[Any]], Callable[[Any], None]]] = {
    "envelope": (envelope_inputs, check_envelope),
    "verdict": (observations, check_verdict),
    "commit-record": (_commit_case, lambda case: check_commit_record(*case)),
    "stream-entry": (stream_entries, check_stream_entry),
    "scan-pattern": (scan_patterns, check_pattern),
}


def run_target(target: str, cases: int) -> FuzzResult:
    """Run `cases` hypothesis cases of `target`; `failure` describes what went wrong."""
    strategy_of, prop = TARGETS[target]
    result = FuzzResult(target)

    def one(case: Any) -> None:
        result.cases += 1
        prop(case)

    runner = settings(
        max_examples=cases,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )(given(strategy_of())(one))
    try:
        runner()
    except Exception as exc:
        result.failure = _describe(exc)
    return result


def _describe(exc: BaseException) -> str:
    """Each failure hypothesis found, with its falsifying example."""
    subs = exc.exceptions if isinstance(exc, BaseExceptionGroup) else (exc,)
    lines = []
    for sub in subs:
        lines.append(f"{type(sub).__name__}: {str(sub)[:300]}")
        lines += [f"    {note[:500]}" for note in getattr(sub, "__notes__", ())]
    return "\n".join(lines)
