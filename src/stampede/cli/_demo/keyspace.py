"""The demo's keyspace: users (profile + settings) and orders (header + items).

Keys carry no shared hash tag, as in a keyspace laid out before anyone thought of
hash tags (or one where the parts belong to different services): the parts of one
entity land on different shards, so no server-side transaction can cover a write
of the whole entity. That is the case stamps are for.

`Database` is the demo's source of truth, an in-memory dict standing in for the
real database behind a cache. Writers update it first, then Redis; `Refetch`
repairs read it back.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["GROUP_PATTERN", "MATCH", "PREFIX", "Database", "Entity", "entities", "payloads"]

PREFIX = "stampede-demo"
MATCH = f"{PREFIX}:*"
GROUP_PATTERN = rf"(?P<group>{PREFIX}:(?:user|order):\d+):[a-z]+"

_PARTS = {"user": ("profile", "settings"), "order": ("header", "items")}
_NAMES = ("Ada", "Grace", "Edsger", "Barbara", "Donald", "Frances", "Ken", "Radia", "Tony")
_THEMES = ("light", "dark", "solarized")
_SKUS = ("mug", "tea", "kettle", "spoon", "cosy", "biscuits")
_STATUS = ("placed", "paid", "packed", "shipped", "delivered")


@dataclass(frozen=True, slots=True)
class Entity:
    """One user or order: a group of keys written together."""

    kind: str
    ident: int

    @property
    def group(self) -> str:
        return f"{PREFIX}:{self.kind}:{self.ident}"

    @property
    def parts(self) -> tuple[str, ...]:
        return _PARTS[self.kind]

    @property
    def keys(self) -> list[str]:
        return [f"{self.group}:{part}" for part in self.parts]


def entities(size: int) -> list[Entity]:
    """`size` entities: the first half (rounded up) users, the rest orders."""
    users = (size + 1) // 2
    return [Entity("user", i) for i in range(users)] + [
        Entity("order", i) for i in range(size - users)
    ]


def payloads(entity: Entity, revision: int, rng: random.Random) -> dict[str, bytes]:
    """Fresh JSON payloads for every key of `entity`; each part names its `revision`."""
    if entity.kind == "user":
        name = rng.choice(_NAMES)
        parts: Sequence[object] = (
            {"id": entity.ident, "name": name, "email": f"{name.lower()}@example.org"},
            {"theme": rng.choice(_THEMES), "newsletter": rng.random() < 0.5},
        )
    else:
        lines = [
            (rng.choice(_SKUS), rng.randint(1, 4), rng.randint(150, 4000))
            for _ in range(rng.randint(1, 4))
        ]
        parts = (
            {
                "id": entity.ident,
                "user": rng.randrange(1000),
                "status": rng.choice(_STATUS),
                "total_cents": sum(qty * cents for _, qty, cents in lines),
            },
            {"items": [{"sku": s, "qty": q, "cents": c} for s, q, c in lines]},
        )
    out = {}
    for key, body in zip(entity.keys, parts, strict=True):
        assert isinstance(body, dict)
        out[key] = json.dumps({**body, "rev": revision}, separators=(",", ":")).encode()
    return out


class Database:
    """The source of truth: group -> key -> payload, plus a revision per group."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, bytes]] = {}
        self.revisions: dict[str, int] = {}
        self.loads = 0

    def next_revision(self, group: str) -> int:
        self.revisions[group] = self.revisions.get(group, 0) + 1
        return self.revisions[group]

    def put(self, group: str, values: Mapping[str, bytes]) -> None:
        self.rows[group] = dict(values)

    async def load(self, group: bytes, keys: Sequence[bytes]) -> dict[bytes, bytes] | None:
        """The `Refetch` loader: every key's payload, or None when the entity is gone."""
        self.loads += 1
        row = self.rows.get(group.decode())
        if row is None:
            return None
        return {key: row[key.decode()] for key in keys}
