"""Moving one hash slot between masters of a local cluster, step by step.

The steps are the ones Redis Cluster resharding uses, so clients meet real
redirections:

1. `begin`: the target marks the slot IMPORTING from the source, the source marks
   it MIGRATING to the target. From now on the source answers `-ASK` for keys of
   the slot it no longer holds (and for new keys).
2. `move_keys`: MIGRATE keys (some, or all in batches found with
   CLUSTER GETKEYSINSLOT) from the source to the target.
3. `finish`: move what is left, then CLUSTER SETSLOT <slot> NODE <target> on the
   target, the source and every other master. From now on the old owner answers
   `-MOVED`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ._admin import command, is_master, node_id, reachable
from .node import RedisNode

__all__ = ["MIGRATE_TIMEOUT_MS", "SlotMigration"]


MIGRATE_TIMEOUT_MS = 5000
_BATCH = 100


def _as_bytes(key: bytes | str) -> bytes:
    return key.encode() if isinstance(key, str) else key


class SlotMigration:
    """One slot in flight from `source` to `target`; made by `LocalCluster.begin_migration`."""

    def __init__(
        self, slot: int, *, source: RedisNode, target: RedisNode, nodes: Sequence[RedisNode]
    ) -> None:
        if not 0 <= slot < 16384:
            raise ValueError(f"slot must be in 0..16383, not {slot}")
        if source is target:
            raise ValueError(f"slot {slot} is already served by {target.address}")
        self.slot = slot
        self.source = source
        self.target = target
        self._nodes = list(nodes)
        self._target_id = node_id(target)
        self.finished = False

    def __repr__(self) -> str:
        state = "finished" if self.finished else "in flight"
        return (
            f"<SlotMigration slot {self.slot} {self.source.address} -> "
            f"{self.target.address} {state}>"
        )

    def begin(self) -> None:
        """Mark the slot IMPORTING on the target and MIGRATING on the source."""
        source_id = node_id(self.source)
        command(self.target, "CLUSTER", "SETSLOT", self.slot, "IMPORTING", source_id)
        command(self.source, "CLUSTER", "SETSLOT", self.slot, "MIGRATING", self._target_id)

    def move_keys(self, keys: Iterable[bytes | str] | None = None, *, batch: int = _BATCH) -> int:
        """MIGRATE the given keys (default: every key left in the slot); return how many.

        Keys that the source does not hold are skipped by MIGRATE. A key outside the
        slot is refused with ValueError before anything moves.
        """
        self._require_open()
        if keys is None:
            moved = 0
            while found := command(self.source, "CLUSTER", "GETKEYSINSLOT", self.slot, batch):
                self._migrate(found)
                moved += len(found)
            return moved
        wanted = [_as_bytes(key) for key in keys]
        for key in wanted:
            slot = command(self.source, "CLUSTER", "KEYSLOT", key)
            if slot != self.slot:
                raise ValueError(f"key {key!r} is in slot {slot}, not {self.slot}")
        for start in range(0, len(wanted), batch):
            self._migrate(wanted[start : start + batch])
        return len(wanted)

    def finish(self) -> None:
        """Move the remaining keys and assign the slot to the target on every master."""
        self._require_open()
        self.move_keys()
        others = [n for n in self._nodes if n is not self.source and n is not self.target]
        for node in [self.target, self.source, *others]:
            if node in (self.target, self.source) or (reachable(node) and is_master(node)):
                command(node, "CLUSTER", "SETSLOT", self.slot, "NODE", self._target_id)
        self.finished = True

    def _require_open(self) -> None:
        if self.finished:
            raise RuntimeError(f"{self!r} is already finished")

    def _migrate(self, keys: Sequence[bytes]) -> None:
        command(
            self.source,
            "MIGRATE",
            self.target.host,
            self.target.port,
            "",
            0,
            MIGRATE_TIMEOUT_MS,
            "KEYS",
            *keys,
            timeout=MIGRATE_TIMEOUT_MS / 1000 + 5,
        )
