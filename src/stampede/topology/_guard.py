"""The guarded-write Lua script: write a key only if the stored envelope is older.

Every data and commit write goes through it, so a delayed, repeated or racing
write can never replace a newer one and each key converges to the newest write
that reached it. Lua numbers are doubles, which cannot hold a 63-bit version, so
versions compare as decimal strings: first by length, then byte by byte; equal
versions compare by token. A tombstone (`<version>:<token>`) is compared like
any envelope, so a late older write cannot bring a deleted key back.

One call carries the keys of many writes (the writes of one loop turn that go to
the same shard, or slot on a cluster), each key with its own stamp:

KEYS   the keys to write
ARGV   each write's stamp once, then its keys' values in the order of KEYS; the
       stamp is version, token, expire-at in unix ms ("0": no expiry), limit (the
       newest clock version this writer accepts as real; "0": none), keep (ms to
       keep the value a write replaces; "0": do not keep it). A lone write: its
       stamp, then its values (5 + n values for n keys); a batch, per write in
       order: its key count, its stamp, its values (6 per write + n, never 5 + n)
reply  one integer per key:
        1  written over an older value (or none, or a value that is no envelope)
       10  written as 1, but the call could not reach the key's version hash to
           raise its floor: the topology raises it before the write returns
           (`_floor`); no caller of `write_guarded` ever sees this code
       12  nothing done, as 2, and the call could not reach the key's version hash
           either (a resend whose first call replied 10): the client raises its
           floor
        2  the same stamp is stored: an idempotent resend, nothing changed
        0  kept out: the stored write is newer
       -1  not written: the key holds another type (WRONGTYPE)
       -2  not written: the stored version is of the other kind (clock against
           sequence), so the two cannot be ordered
       -3  not written: the stored clock version is beyond the writer's limit
           (stamped by a clock far ahead of this writer's)
       -4  not written: the stored value looks like an envelope but its version
           cannot be ordered (2**63 or more, or leading zeros)
       -6  not written: another key of the same write (same stamp) refused it in
           this call; every key is read before any is written, so a write whose
           keys share one call (one slot) is all or nothing
       -7  not written: the write's expiry instant is not after the server's clock
           (`TIME`, read once per call, only when a key to be written has an
           expiry): it would vanish as it landed, and take the older value with it
           (a writer's clock behind by more than its ttl)

Kept versions: a write that replaces an envelope pushes it onto the key's kept
list, `<key>:stampede:p` for a key with a hash tag or `{<key>}:stampede:p:u` for one
without braces (same slot either way; a key with braces but no tag keeps none):
newest first, cut back to four once it holds more than eight (one LTRIM every
fourth push), and the list expires `keep` ms after the last push, or with the new
value if that expires first (best effort: a slot that is migrating away keeps
nothing). A group read that finds the newest write still in flight returns the
newest whole write among the kept versions instead of waiting.

Cost: the keys' reads are one MGET, the writes without expiry one MSET, the
check for version hashes one EXISTS and, when a key to be written has an expiry,
the server's clock one TIME, per call; per key written the guard runs
its comparison once, and a key that replaces an envelope adds an LPUSH and a
PEXPIRE (`benchmarks.server_cost` measures it against MSET).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Unpack

from .._lua import script
from ..errors import ShardResponseError, ShardUnavailable
from ..results import GuardCode

if TYPE_CHECKING:
    from ..typing import GuardStamp

__all__ = [
    "CAS",
    "CAS_SCRIPT",
    "CROSS_SLOT_GUARD",
    "CROSS_SLOT_GUARD_SCRIPT",
    "CROSS_SLOT_GUARD_SHA",
    "EXPIRED",
    "FOREIGN",
    "FUTURE",
    "GUARD",
    "GUARD_SCRIPT",
    "GUARD_SHA",
    "KEEP_MS",
    "KEPT",
    "KEPT_DEPTH",
    "KEPT_MAX",
    "MIXED",
    "SAME",
    "STAMP_ARGS",
    "WRITTEN",
    "WRONGTYPE",
    "WriteRequest",
    "argv_at",
    "joined",
    "requests_for",
    "split_codes",
    "unknown_if_resent",
    "without_keeping",
]

KEPT = GuardCode.KEPT
WRITTEN = GuardCode.WRITTEN
SAME = GuardCode.SAME
WRONGTYPE = GuardCode.WRONGTYPE
MIXED = GuardCode.MIXED
FUTURE = GuardCode.FUTURE
FOREIGN = GuardCode.FOREIGN
EXPIRED = GuardCode.EXPIRED
STAMP_ARGS = 5
"""The ARGV of a write's stamp (version, token, expire-at, limit, keep), once per write."""
KEEP_MS = 5000
"""How long a replaced value is kept for group reads (`Options.version_grace`)."""
KEPT_DEPTH = 4
"""How many replaced values a key's kept list is cut back to."""
KEPT_MAX = 8
"""The most replaced values a key's kept list holds (cut back to `KEPT_DEPTH` past it)."""

GUARD = script("guard")
"""The guarded write (`stampede/_lua/guard.lua`, with `guard_body.lua` and `compare.lua`)."""
CROSS_SLOT_GUARD = script("guard_cross_slot")
"""The guard for a whole batch on one cluster node, keys of many slots at once.

No keys are declared (they come first in ARGV, after their count), so the node
runs it without a cross-slot check; every GET is still checked, and a key the
node does not serve right now (moved, or migrating away) aborts the script
*before anything is written*: all the reads come first. A key of another type
aborts it too. The caller then falls back to one `GUARD` call per slot.
A key that appears twice in a batch (two writes of one group in the same loop
turn) is compared against what the earlier item left, not the read-ahead value,
so the older of the two never lands over the newer.
"""
GUARD_SCRIPT = GUARD.source
GUARD_SHA = GUARD.sha
CROSS_SLOT_GUARD_SCRIPT = CROSS_SLOT_GUARD.source
CROSS_SLOT_GUARD_SHA = CROSS_SLOT_GUARD.sha


def without_keeping(command: tuple[Any, ...]) -> tuple[Any, ...]:
    """A per-slot guard call with every write's keep set to 0; any other command as is.

    A call that follows ASK runs on the node importing the slot, while the source
    may still hold the key's kept list: creating a second one there would make the
    migration's MIGRATE of the first fail with BUSYKEY. So a redirected write
    keeps nothing (keeping is best effort).
    """
    if len(command) < 3 or command[0] not in ("EVALSHA", "EVAL"):
        return command
    if command[1] not in (GUARD_SHA, GUARD_SCRIPT):
        return command
    n = int(command[2])
    head, argv = list(command[: 3 + n]), list(command[3 + n :])
    if len(argv) == STAMP_ARGS + n:  # a lone write
        argv[STAMP_ARGS - 1] = 0
    else:
        pos = 0
        while pos < len(argv):
            argv[pos + STAMP_ARGS] = 0
            pos += 1 + STAMP_ARGS + int(argv[pos])
    return (*head, *argv)


class WriteRequest:
    """The keys one guarded write sends to one shard, with their ARGV ready-made.

    `argv` is the write's stamp (version, token, expire-at, limit, keep), then one value
    per key in the order of `keys`: a lone write's ARGV as it is, and a batch's call
    is its requests' keys joined and each one's argv after its key count (`joined`);
    `slots` are the keys' hash slots where the topology routes by them (a cluster
    splits a batch per slot when a node refuses the cross-slot script).
    """

    __slots__ = ("argv", "keys", "resp", "slots")

    def __init__(
        self,
        keys: list[bytes],
        argv: list[object],
        slots: list[int],
        resp: tuple[bytes, bytes] | None = None,
    ) -> None:
        self.keys = keys
        self.argv = argv
        self.slots = slots
        self.resp = resp
        """The RESP bulk strings of `keys` and of `argv`, when `requests_for` made them
        (a batch's call is then sent as those bytes: `_shard_io.guard_call`)."""

    def __len__(self) -> int:
        return len(self.keys)

    @classmethod
    def build(
        cls,
        keys: Sequence[bytes],
        values: Sequence[bytes],
        positions: Sequence[int],
        slots: Sequence[int],
        **stamp: Unpack[GuardStamp],
    ) -> WriteRequest:
        """The request for `keys[p]`, `values[p]` at each position p, one stamp for all
        (`slots`: the keys' hash slots, or empty where the topology does not need them)."""
        return _request(keys, values, positions, slots, stamp)


def requests_for(
    keys: Sequence[bytes],
    values: Sequence[bytes],
    parts: Sequence[Sequence[int]],
    slots: Sequence[int],
    stamp: GuardStamp,
) -> list[WriteRequest]:
    """`WriteRequest.build` for each part's positions, in order, one stamp for all."""
    version, token = stamp["version"], stamp["token"]
    at = stamp.get("expire_at_ms") or 0
    limit, keep = stamp.get("limit", 0), stamp.get("keep_ms", KEEP_MS)
    head = _stamp_resp(version, token, at, limit, keep)
    out: list[WriteRequest] = []
    for positions in parts:
        argv: list[object] = [version, token, at, limit, keep]
        argv += map(values.__getitem__, positions)
        out.append(
            WriteRequest(
                list(map(keys.__getitem__, positions)),
                argv,
                list(map(slots.__getitem__, positions)) if slots else [],
                _resp(keys, values, positions, head) if head else None,
            )
        )
    return out


def _stamp_resp(version: object, token: object, at: object, limit: object, keep: object) -> bytes:
    """The RESP bulk strings of a write's stamp (its ARGV before its values); empty when
    a value is not of the plain types made here (its requests are packed by hiredis)."""
    if not (
        type(version) is int
        and type(token) is str
        and type(at) is int
        and type(limit) is int
        and type(keep) is int
    ):
        return b""
    parts = (b"%d" % version, token.encode(), b"%d" % at, b"%d" % limit, b"%d" % keep)
    return b"".join([b"$%d\r\n%s\r\n" % (len(p), p) for p in parts])


def _resp(
    keys: Sequence[bytes], values: Sequence[bytes], positions: Sequence[int], head: bytes
) -> tuple[bytes, bytes] | None:
    """The RESP of a request's keys and of its ARGV (`WriteRequest.resp`); None when a
    key or a value is not bytes."""
    names: list[bytes] = []
    args: list[bytes] = [head]
    for p in positions:
        key, value = keys[p], values[p]
        if type(key) is not bytes or type(value) is not bytes:
            return None
        names.append(b"$%d\r\n%s\r\n" % (len(key), key))
        args.append(b"$%d\r\n%s\r\n" % (len(value), value))
    return b"".join(names), b"".join(args)


def _request(
    keys: Sequence[bytes],
    values: Sequence[bytes],
    positions: Sequence[int],
    slots: Sequence[int],
    stamp: GuardStamp,
) -> WriteRequest:
    version, token = stamp["version"], stamp["token"]
    at = stamp.get("expire_at_ms") or 0
    limit, keep = stamp.get("limit", 0), stamp.get("keep_ms", KEEP_MS)
    argv: list[object] = [version, token, at, limit, keep]
    argv += [values[p] for p in positions]
    return WriteRequest(
        [keys[p] for p in positions], argv, [slots[p] for p in positions] if slots else []
    )


def joined(requests: Sequence[WriteRequest]) -> tuple[list[bytes], list[object], list[int]]:
    """The keys, ARGV and slots of a batch's requests, in order, as one call takes them
    (a lone request's ARGV as it is; each of a batch's after its key count)."""
    if len(requests) == 1:
        return requests[0].keys, requests[0].argv, requests[0].slots
    argv: list[object] = []
    for request in requests:
        argv.append(len(request.keys))
        argv += request.argv
    return (
        [key for request in requests for key in request.keys],
        argv,
        [slot for request in requests for slot in request.slots],
    )


def argv_at(requests: Sequence[WriteRequest], group: Sequence[int]) -> list[object]:
    """The ARGV of a call for the batch's keys at `group` (indexes into its joined keys,
    in order): the keys of one request that follow each other share its stamp."""
    owner: list[tuple[WriteRequest, int]] = [
        (request, i) for request in requests for i in range(len(request.keys))
    ]
    runs: list[tuple[WriteRequest, list[object]]] = []
    for g in group:
        request, i = owner[g]
        if not runs or runs[-1][0] is not request:
            runs.append((request, []))
        runs[-1][1].append(request.argv[STAMP_ARGS + i])
    if len(runs) == 1:
        request, values = runs[0]
        return [*request.argv[:STAMP_ARGS], *values]
    argv: list[object] = []
    for request, values in runs:
        argv += (len(values), *request.argv[:STAMP_ARGS], *values)
    return argv


def split_codes(requests: Sequence[WriteRequest], codes: list[Any], shard: str) -> list[Any]:
    """Per request: its keys' codes, or the error of its first key that failed.

    A code is an int from the script, or an exception when the key's call failed
    (a cluster node that could not be reached for one slot); a WRONGTYPE key
    fails its request with a `ShardResponseError` naming it.
    """
    if WRONGTYPE not in codes and set(map(type, codes)) <= _INT:  # plain codes: slices
        if len(requests) == 1:
            return [codes]
        out: list[Any] = []
        pos = 0
        for request in requests:
            n = len(request.keys)
            out.append(codes[pos : pos + n])
            pos += n
        return out
    out = []
    pos = 0
    for request in requests:
        n = len(request.keys)
        mine = codes[pos : pos + n]
        pos += n
        error = next((c for c in mine if isinstance(c, BaseException)), None)
        if error is not None:
            out.append(error)
        elif WRONGTYPE in mine:
            bad = request.keys[mine.index(WRONGTYPE)]
            out.append(
                ShardResponseError(
                    f"key {bad!r} holds a non-string value (WRONGTYPE); a stamped group's "
                    "keys must be plain strings: rename or delete it",
                    shard=shard,
                )
            )
        else:
            out.append(mine)
    return out


_INT = {int}
"""The type of every code of a plain answer (`split_codes`)."""


def unknown_if_resent(results: list[Any], shard: str, lost: int) -> list[Any]:
    """`results` (`split_codes`'s) of a guard call resent after `lost` lost replies: a
    write refused there as `EXPIRED` becomes `ShardUnavailable` (its outcome unknown).
    The send whose reply was lost may have landed, replacing the older values, and its
    instant passed before the resend: the refusal says nothing of that send, so the
    write is not reported as never written (`ClockSkewError`)."""
    if not lost:
        return results
    return [
        ShardUnavailable(
            "the reply of a guarded write with an expiry was lost, and by the time it was "
            "sent again its expiry instant had passed (refused as expired): the first send "
            "may have landed, replaced the older values and expired since, or not have "
            "landed at all; read the group to find out",
            shard=shard,
        )
        if not isinstance(codes, BaseException) and EXPIRED in codes
        else codes
        for codes in results
    ]


CAS = script("cas")
"""Compare-and-set for repairs: change a key only if it still holds what the repair saw.

KEYS   the keys
ARGV   expire-at unix ms ("0": none), then per key: present ("1"/"0"), the value
       seen, op ("s" set / "d" delete), the new value
reply  per key: 1 changed (or already holding the new value: a resend is
       harmless), 0 left alone (it changed since it was seen)
"""
CAS_SCRIPT = CAS.source
