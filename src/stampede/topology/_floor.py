"""The floor a guarded write could not raise in its own call.

A write that is no transaction's (a group write, a delete, a repair, an `update()`,
whose MULTI/EXEC runs `floor_commands` after its SETs) and makes stamp S
current at a key raises the floor of the key's version hash to S (`version_hash.lua`):
a transaction pending there at or below S is then known to be superseded, and no
reader or sweep completes it, even once the value that superseded it is gone (a
tombstone expired). The guard does it in the same call when it can reach the hash.
Two cases where it cannot:

- a key with braces but no hash tag (`a{}b`): its hash is `stampede:v:{<n>}:<key>`,
  with an `n` only the client works out (`wire._txn.side_key`);
- a call while the key's slot migrates, with the key on one node and its hash on the
  other: on the exporting node once the hash has moved, and on the importing node
  (after ASK) while it has not, where its absence proves nothing.

A third: over independent primaries hashed by a `HashPolicy`, the name the guard
derives (`{<key>}:stampede:v:u`, `<key>:stampede:v`) may be in another slot than the
key under the policy, and the client then names the hash `stampede:v:{<n>}:<key>`;
the guard, raising the floor of a hash nobody uses, cannot tell. `raise_floors` then
raises the floor of every key written whose name the client gives otherwise.

There the guard replies `FLOOR_ELSEWHERE` for the key, or `SAME_ELSEWHERE` for a key
it found already written (a resend after a lost reply, whose first call may have
left the floor to the client); the cluster's router turns every key written by a
guard call that followed ASK into the first, and every key such a call found already
written into the second. `raise_floors` then sends `RAISE_FLOOR` for each to the
key's hash, routed as any command (following ASK), before the write returns, and the
key reads `WRITTEN` (`SAME`). A key found already written whose name has braces but
no tag gets the same whatever the guard replied. A durable write sends each such
call with its own `WAIT` (`WAITAOF`), and its outcome counts the fewest replicas the
write and its floors reached per shard. A key whose floor call fails is reported
failed with that error: its value was written, but nothing vouches for its floor,
so the write does not count as done.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._lua import script
from ..errors import ShardError
from ..keys._slots import hash_tag
from ..results import GuardCode
from ..wire._txn import side_key
from ._base import carried
from ._guard import CAS, GUARD_SCRIPT, GUARD_SHA

if TYPE_CHECKING:
    from ..typing import GuardStamp, Topology
    from ._base import WriteOutcome

__all__ = [
    "FLOOR_ELSEWHERE",
    "RAISE_FLOOR",
    "SAME_ELSEWHERE",
    "after_ask",
    "client_named",
    "floor_commands",
    "needs_floors",
    "raise_floor",
    "raise_floors",
    "renames",
]

FLOOR_ELSEWHERE = 10
"""Guard code: written, but the call could not reach the key's version hash."""
SAME_ELSEWHERE = 12
"""Guard code: `SAME` (already written), and the call could not reach the key's
version hash either (or it followed ASK): its floor is for the client too."""
_AFTER = {FLOOR_ELSEWHERE: GuardCode.WRITTEN, SAME_ELSEWHERE: GuardCode.SAME}
_GUARD_ASKED = {GuardCode.WRITTEN: FLOOR_ELSEWHERE, GuardCode.SAME: SAME_ELSEWHERE}
_CAS_ASKED = {1: FLOOR_ELSEWHERE}  # a compare-and-set's "set" (it has no SAME)

RAISE_FLOOR = script("raise_floor")


async def raise_floor(
    topology: Topology, key: bytes, version: int, token: str, then: list[Any] | None = None
) -> int | None:
    """Raise the floor of `key`'s version hash to (`version`, `token`), if it has one;
    with `then` (a durable write's `WAIT`, and `WAITAOF`), on the same connection,
    returning how many replicas acknowledged it."""
    side = side_key(key, topology.slot_of)
    if then is None:
        await topology.script(RAISE_FLOOR, [side], [version, token])
        return None
    _, count = await topology.durable_script(RAISE_FLOOR, [side], [version, token], then)
    return int(count)


def floor_commands(
    topology: Topology, keys: Sequence[bytes], values: Sequence[bytes]
) -> list[tuple[Any, ...]]:
    """For keys set outside any script (`update()`'s MULTI/EXEC, one slot): the
    `RAISE_FLOOR` call of each key's version hash to the stamp of the envelope it is
    set to, to run in the same MULTI, after the SETs. EVAL, not EVALSHA: a NOSCRIPT
    inside EXEC would come after the writes had applied."""
    out: list[tuple[Any, ...]] = []
    for key, value in zip(keys, values, strict=True):
        version, token, *_ = value.split(b":", 2)
        side = side_key(key, topology.slot_of)
        out.append(("EVAL", RAISE_FLOOR.source, 1, side, version, token))
    return out


def needs_floors(codes: Any, topology: Topology | None = None) -> bool:
    """Whether `raise_floors` has anything to look at in these codes (a view of an
    outcome's results: usually none of the three, so no call at all), or, over a
    `topology` that `renames`, in any key written."""
    if FLOOR_ELSEWHERE in codes or SAME_ELSEWHERE in codes or GuardCode.SAME in codes:
        return True
    return topology is not None and renames(topology) and GuardCode.WRITTEN in codes


def renames(topology: Topology) -> bool:
    """Whether `topology` hashes keys by a policy (`Shards(policy=...)`), under which the
    name the guard gives a key's version hash may not be the client's."""
    return getattr(topology, "hash_policy", None) is not None


def client_named(topology: Topology, key: bytes) -> bool:
    """Whether the guard's own call cannot name `key`'s version hash: braces but no
    tag, or a name the client gives otherwise (under a topology that `renames`)."""
    if hash_tag(key) is not None:
        named = key + b":stampede:v"
    elif b"{" in key or b"}" in key:
        return True
    else:
        named = b"{" + key + b"}:stampede:v:u"
    return side_key(key, topology.slot_of) != named


async def raise_floors(
    topology: Topology, outcome: WriteOutcome, stamp: GuardStamp, then: list[Any] | None = None
) -> None:
    """Raise the floor of each key of `outcome` coded `FLOOR_ELSEWHERE` or
    `SAME_ELSEWHERE` (or `SAME`, `WRITTEN`, with a hash only the client names)
    to the write's stamp; each such key then reads `WRITTEN` (`SAME`), or failed
    with its error. A durable write passes its `then`: each floor waits for the same
    replicas, and a shard's `acks` become the fewest of its write's and its floors'."""
    done = outcome.results
    keys = [
        key
        for key, code in done.items()
        if code in _AFTER
        or (code in (GuardCode.SAME, GuardCode.WRITTEN) and client_named(topology, key))
    ]
    if not keys:
        return
    version, token = stamp["version"], stamp["token"]
    # carried: once started, every floor is raised even if the writer is cancelled
    # meanwhile (its value landed; a floor left behind lets deleted data come back)
    replies = await carried(
        asyncio.gather(
            *(raise_floor(topology, key, version, token, then) for key in keys),
            return_exceptions=True,
        )
    )
    for key, reply in zip(keys, replies, strict=True):
        if isinstance(reply, ShardError):
            del done[key]
            outcome.failed[key] = reply
        elif isinstance(reply, BaseException):
            raise reply
        else:
            done[key] = _AFTER.get(done[key], done[key])
            if reply is not None:
                shard = topology.shard_of(side_key(key, topology.slot_of))
                outcome.acks[shard] = min(reply, outcome.acks.get(shard, reply))


def after_ask(command: tuple[Any, ...], reply: Any) -> Any:
    """The reply of a guard (or repair compare-and-set) call that followed ASK, each
    key it wrote coded `FLOOR_ELSEWHERE`: on the importing node a key's version hash
    may not have moved yet, and its absence there proves nothing. Any other reply as
    it is."""
    if len(command) < 2 or command[1] not in (GUARD_SHA, GUARD_SCRIPT, CAS.sha, CAS.source):
        return reply
    if not isinstance(reply, list):
        return reply
    asked = _CAS_ASKED if command[1] in (CAS.sha, CAS.source) else _GUARD_ASKED
    return [asked.get(code, code) for code in reply]
