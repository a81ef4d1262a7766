"""A whole user module under one hash tag: profile, settings, sessions, notifications, stats.

Every key of user 42 carries the tag `{42}` (built with `KeySpace`), so all of them,
and the group's commit record, share one slot: one shard of the independent
primaries, one node of a cluster. That buys three things at once:

- a stamped group write of profile + settings is one atomic server-side call;
- one MULTI/EXEC can span strings, hashes, sorted sets and lists of the user;
- reading the whole module is a single request to a single shard.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

import _run

import stampede
from stampede import atomic, fanout
from stampede.keys import KeySpace

USERS = KeySpace(env="demo", service="app", module="users")
UID = 42
GROUP = USERS.group(UID)  # demo:app:users:{42}
PROFILE = USERS.key(UID, "profile")  # envelope (stamped)
SETTINGS = USERS.key(UID, "settings")  # envelope (stamped)
SESSIONS = USERS.key(UID, "sessions")  # sorted set: session id -> expiry (ms)
NOTIFICATIONS = USERS.key(UID, "notifications")  # list, newest last
STATS = USERS.key(UID, "stats")  # hash of counters


async def main(urls: Sequence[str], *, cluster: bool = False) -> None:
    """Write, update and read user 42's module through its one slot."""
    async with stampede.connect(urls, cluster=cluster) as st:
        keys = [PROFILE, SETTINGS, SESSIONS, NOTIFICATIONS, STATS, f"{GROUP}:stampede:commit"]
        slots = {stampede.keyslot(k) for k in keys}
        assert len(slots) == 1, slots
        print(f"user {UID}: {len(keys)} keys, all in slot {slots.pop()}")

        receipt = await st.write(
            GROUP,
            {PROFILE: json.dumps({"name": "Ada"}), SETTINGS: json.dumps({"theme": "dark"})},
            mode="commit",
        )
        assert receipt.atomic, "a tagged group (record included) is written in one call"

        now = int(time.time() * 1000)
        replies = await atomic.multi(
            st,
            [
                ("ZADD", SESSIONS, now + 3_600_000, "sess-1"),
                ("RPUSH", NOTIFICATIONS, "welcome back"),
                ("LTRIM", NOTIFICATIONS, -50, -1),
                ("HINCRBY", STATS, "logins", 1),
            ],
        )
        assert replies[3] == 1
        print("login: session, notification and counter in one MULTI/EXEC")

        result = await st.read(GROUP, [PROFILE, SETTINGS], mode="commit")
        assert result.consistent and result.token == receipt.token
        assert json.loads(result[PROFILE] or b"{}") == {"name": "Ada"}

        plan = fanout.shards_for(st, [PROFILE, SETTINGS])
        assert len(plan) == 1, "one tag, one shard, one request"
        (shard,) = plan
        sessions, notes, stats = await atomic.multi(
            st, [("ZRANGE", SESSIONS, 0, -1), ("LRANGE", NOTIFICATIONS, 0, -1), ("HGETALL", STATS)]
        )
        assert sessions == [b"sess-1"] and notes == [b"welcome back"]
        assert stats == {b"logins": b"1"}
        print(f"read: consistent at version {result.version}, module read from {shard}")


if __name__ == "__main__":
    _run.run(main, __doc__)
