"""Judge one group read: Consistent, NotFound, InFlight or Torn(reason).

Pure: `judge` looks only at the bytes a read returned. The reader decides what
to do with an `IN_FLIGHT` verdict (retry with backoff) and turns it into `TORN`
when its retries or deadline run out (`Verdict.exhausted`).

| what it saw                                                 | verdict     |
| ----------------------------------------------------------- | ----------- |
| every key stamped with one token (commit mode: and the      | CONSISTENT  |
| record names that token and covers the keys)                |             |
| no live value: every key missing or a tombstone (deleted)   | NOT_FOUND   |
| tokens differ, keys missing, record missing/older/newer     | IN_FLIGHT   |
| a value that is not an envelope                             | TORN        |
|   (waiting cannot fix it: reason `unstamped`)               |             |
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from .errors import ConfigurationError, MalformedEnvelope
from .wire import CommitRecord, Envelope, decode_commit
from .wire._envelope import decode_all

__all__ = ["Mode", "Observation", "Reason", "Status", "Verdict", "judge", "live_write", "stamped"]


class Mode(StrEnum):
    """How a write is made visible: by stamps alone, or with a commit record."""

    STAMP = "stamp"
    COMMIT = "commit"


class Status(StrEnum):
    CONSISTENT = "consistent"
    NOT_FOUND = "not_found"
    IN_FLIGHT = "in_flight"
    TORN = "torn"


class Reason(StrEnum):
    """Why a group is not consistent; the values are the repair stream's `reason`."""

    TORN = "torn"  # keys carry different tokens
    UNCOMMITTED = "uncommitted"  # data whole, commit record missing, older or different
    UNSTAMPED = "unstamped"  # a value is not an envelope
    PARTIAL = "partial"  # some keys are missing


@dataclass(frozen=True, slots=True)
class Observation:
    """What one read of a group saw: raw values per key, and the commit record."""

    group: bytes
    keys: tuple[bytes, ...]
    raw: tuple[bytes | None, ...]
    mode: Mode = Mode.STAMP
    commit_raw: bytes | None = None
    envelopes: tuple[Envelope | None, ...] = field(init=False, repr=False)
    errors: dict[bytes, MalformedEnvelope] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if len(self.keys) != len(self.raw):
            raise ConfigurationError(f"{len(self.keys)} keys but {len(self.raw)} values")
        decode = Envelope.decode
        envelopes: list[Envelope | None] = []
        errors: dict[bytes, MalformedEnvelope] = {}
        try:  # the common case: every value decodes (or is missing)
            envelopes = decode_all(self.raw)
        except MalformedEnvelope:
            envelopes = []
            for key, raw in zip(self.keys, self.raw, strict=True):
                try:
                    envelopes.append(None if raw is None else decode(raw, key=key))
                except MalformedEnvelope as exc:
                    envelopes.append(None)
                    errors[key] = exc
        _set_envelopes(self, tuple(envelopes))
        _set_errors(self, errors)

    def __reduce__(
        self,
    ) -> tuple[
        type[Observation],
        tuple[bytes, tuple[bytes, ...], tuple[bytes | None, ...], Mode, bytes | None],
    ]:
        # copy and pickle through the constructor, as `Envelope` (the same when compiled)
        return (type(self), (self.group, self.keys, self.raw, self.mode, self.commit_raw))

    def seen(self) -> dict[str, str | None]:
        """key -> `<version>:<token>` (`<version>:<token>:deleted` for a tombstone),
        `"unstamped"` or None (missing), as JSON-ready text."""
        out: dict[str, str | None] = {}
        for key, raw, env in zip(self.keys, self.raw, self.envelopes, strict=True):
            name = key.decode("utf-8", "backslashreplace")
            if env is not None:
                out[name] = env.stamp + ":deleted" if env.tombstone else env.stamp
            else:
                out[name] = None if raw is None else "unstamped"
        return out

    def newest(self) -> Envelope | None:
        """The newest envelope among the keys (tombstones included), by (version, token)."""
        best: Envelope | None = None
        for env in self.envelopes:
            if env is not None and (best is None or env.newer_than(best)):
                best = env
        return best

    def commit(self) -> CommitRecord | None:
        """The decoded commit record, or None when absent or unreadable."""
        return decode_commit(self.commit_raw, self.group)


_set_envelopes: Final = vars(Observation)["envelopes"].__set__
_set_errors: Final = vars(Observation)["errors"].__set__
_new_observation: Final = Observation.__new__
_set_group: Final = vars(Observation)["group"].__set__
_set_keys: Final = vars(Observation)["keys"].__set__
_set_raw: Final = vars(Observation)["raw"].__set__
_set_mode: Final = vars(Observation)["mode"].__set__
_set_commit_raw: Final = vars(Observation)["commit_raw"].__set__


def stamped(group: bytes, keys: Sequence[bytes], raw: Sequence[bytes | None]) -> Observation:
    """`Observation(group, keys, tuple(raw))` (stamp mode), made without the frozen
    dataclass's __init__ (every read makes one): the same fields, set through the slots.
    A value that is not an envelope takes `__post_init__`'s way (its errors named)."""
    if len(keys) != len(raw):
        return Observation(group, tuple(keys), tuple(raw))  # raises its ValueError
    try:
        envelopes = tuple(decode_all(raw))
    except MalformedEnvelope:
        return Observation(group, tuple(keys), tuple(raw))
    obs: Observation = _new_observation(Observation)
    _set_group(obs, group)
    _set_keys(obs, tuple(keys))
    _set_raw(obs, tuple(raw))
    _set_mode(obs, Mode.STAMP)
    _set_commit_raw(obs, None)
    _set_envelopes(obs, envelopes)
    _set_errors(obs, {})
    return obs


@dataclass(frozen=True, slots=True)
class Verdict:
    status: Status
    reason: Reason | None = None
    envelope: Envelope | None = None  # the consistent write (any key's envelope)

    def __reduce__(self) -> tuple[type[Verdict], tuple[Status, Reason | None, Envelope | None]]:
        # copy and pickle through the constructor, as `Envelope` (the same when compiled)
        return (type(self), (self.status, self.reason, self.envelope))

    @property
    def consistent(self) -> bool:
        return self.status is Status.CONSISTENT

    def exhausted(self) -> Verdict:
        """The verdict once retries ran out: an in-flight group becomes torn."""
        if self.status is Status.IN_FLIGHT:
            return Verdict(Status.TORN, self.reason, None)
        return self


_NOT_FOUND: Final = Verdict(Status.NOT_FOUND)


def judge(obs: Observation) -> Verdict:
    """The verdict for one observation (see the module table)."""
    # The common case first: every key holds the live value of one write (in commit
    # mode, the record's checks follow); anything else takes the long way below.
    envelopes = obs.envelopes
    first = envelopes[0] if envelopes else None
    if first is not None and not first.tombstone:
        token, version = first.token, first.version
        for env in envelopes:
            if env is None or env.version != version or env.token != token:
                return _judged(obs)
        if obs.mode is Mode.STAMP:
            return _consistent(first)
    return _judged(obs)


def live_write(obs: Observation) -> Envelope | None:
    """`judge`'s common case without its `Verdict`: in stamp mode, the envelope every
    key holds live (the first key's), when `judge` finds the group consistent through
    it; None for anything else (then ask `judge`)."""
    envelopes = obs.envelopes
    first = envelopes[0] if envelopes else None
    if first is None or first.tombstone or obs.mode is not Mode.STAMP:
        return None
    token, version = first.token, first.version
    for env in envelopes:
        if env is None or env.version != version or env.token != token:
            return None
    return first


def _consistent(env: Envelope) -> Verdict:
    """`Verdict(Status.CONSISTENT, None, env)`, made without the dataclass's __init__."""
    verdict = _new_verdict(Verdict)
    _set_status(verdict, Status.CONSISTENT)
    _set_reason(verdict, None)
    _set_envelope(verdict, env)
    return verdict


_new_verdict: Final = Verdict.__new__
_set_status: Final = vars(Verdict)["status"].__set__
_set_reason: Final = vars(Verdict)["reason"].__set__
_set_envelope: Final = vars(Verdict)["envelope"].__set__


def _judged(obs: Observation) -> Verdict:
    """`judge`, every case."""
    if obs.errors:
        return Verdict(Status.TORN, Reason.UNSTAMPED)
    envelopes = obs.envelopes
    present = [env for env in envelopes if env is not None]
    if all(env.tombstone for env in present):
        # No live value anywhere: never written, deleted (tombstones), or expired
        # (a commit record that outlived its data by a clock tick vouches for nothing).
        newest = obs.newest()
        return _NOT_FOUND if newest is None else Verdict(Status.NOT_FOUND, None, newest)
    if len(present) != len(envelopes):
        return Verdict(Status.IN_FLIGHT, Reason.PARTIAL)
    first = present[0]
    token, version = first.token, first.version
    for env in present:
        if env.token != token or env.version != version:
            return Verdict(Status.IN_FLIGHT, Reason.TORN)
    if obs.mode is Mode.COMMIT:
        record = obs.commit()
        if record is None or record.token != token or record.version != first.version:
            return Verdict(Status.IN_FLIGHT, Reason.UNCOMMITTED)
        if not record.keys.issuperset(obs.keys):
            return Verdict(Status.IN_FLIGHT, Reason.PARTIAL)
    return Verdict(Status.CONSISTENT, None, first)
