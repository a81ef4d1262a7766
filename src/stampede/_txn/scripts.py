"""The read-atomic transaction's Lua scripts (`stampede/_lua/txn_*.lua`; the keys and
fields are in `stampede.wire`'s transaction layout).

Every script takes pairs of keys, a data key and its version hash, which share one
hash slot; one call carries the pairs of one shard (one slot on a cluster).

PREPARE     ARGV[1] hold ms, then per pair: version, token, limit, expire-at, envelope,
            metadata
            stores the version (d:, m:) without touching the data key; a version
            hash that did not exist lives `hold` ms unless a commit makes its
            version current (then it lives as long as the data key); replies per
            key with the guard's codes: 1 prepared, or a refusal that makes the
            writer abort (-1 WRONGTYPE, -2 mixed kinds, -3 future, -4 foreign).
COMMIT      ARGV[1] grace ms, then per pair: version, token, expire-at ("" for the
            one stored when it was prepared); the envelope, metadata and limit are
            the prepare's
            makes the version current where it is newer (the guard's comparison),
            keeping the value it replaces for the grace window; collects what is
            older than that. Replies per key: 1 made current, 2 already current, 0
            kept out by a newer value, 3 its expiry instant had passed (nothing
            written: that write is gone), -5 the prepared version is gone, or a
            refusal code. Resending it is harmless.
COMMIT_ONE  COMMIT for a transaction whose keys share one slot, all or nothing: a
            refusal at any key writes nothing (the other keys reply -6). Per pair it
            takes six arguments: version, token, expire-at, limit, envelope,
            metadata.
COLLECT     ARGV[1] grace ms, ARGV[2] hold ms; per pair: what the sweep does for
            keys no longer written (marks versions of a vanished key and abandoned
            prepares, collects as a commit does, deletes a hash nothing needs);
            replies how many hashes it deleted
ROUND1      per pair: [the data key's value, the metadata of its version] (nil if none)
            (a fourth element: the key holds another type)
ROUND2      per pair ARGV: a stamp; per pair [code, envelope]: v the value to return,
            p a prepared version to return and complete, g gone (read as missing),
            r collected since round 1 (read again), l lost (no record; refuse)
"""

from __future__ import annotations

from .._lua import script

__all__ = ["COLLECT", "COMMIT", "COMMIT_ONE", "PREPARE", "ROUND1", "ROUND2"]

COLLECT = script("txn_collect")
PREPARE = script("txn_prepare")
COMMIT = script("txn_commit")
COMMIT_ONE = script("txn_commit_one")
ROUND1 = script("txn_round1")
ROUND2 = script("txn_round2")
