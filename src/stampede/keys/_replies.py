"""Parsing the server's replies that live slot analysis reads: CLUSTER SHARDS,
CLUSTER SLOTS and CLUSTER SLOT-STATS, in RESP2 or RESP3 shapes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "decode",
    "pairs",
    "parse_slot_stats",
    "primary_of_shard",
    "ranges_from_shards",
    "ranges_from_slots",
    "text",
]


def text(raw: bytes) -> str:
    return raw.decode("utf-8", "backslashreplace")


def pairs(entry: Any) -> dict[str, Any]:
    """A RESP2 flat [name, value, ...] list or a RESP3 map, as a dict with str names."""
    items = entry.items() if isinstance(entry, dict) else zip(entry[::2], entry[1::2], strict=True)
    return {(k.decode() if isinstance(k, bytes) else str(k)): v for k, v in items}


def decode(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def primary_of_shard(
    nodes: Sequence[Any], known: Sequence[str], ids: Mapping[str, str] | None = None
) -> str | None:
    """The name of the shard's primary: the topology's own name for its node id
    (`ids`: the address it connects to, which a NAT or proxy makes differ from the
    one announced), else the announced address."""
    for node in map(pairs, nodes):
        if decode(node.get("role", b"")) != "master":
            continue
        if ids and decode(node.get("id", b"")) in ids:
            return ids[decode(node["id"])]
        port: Any = node.get("port") or node.get("tls-port") or 0
        for host_field in ("endpoint", "ip", "hostname"):
            host = node.get(host_field)
            if host is not None and decode(host) not in ("", "?"):
                name = f"{decode(host)}:{int(port)}"
                if name in known or host_field == "hostname":
                    return name
        host = node.get("ip") or node.get("endpoint")
        return f"{decode(host)}:{int(port)}"
    return None


def ranges_from_shards(
    reply: Any, known: Sequence[str], ids: Mapping[str, str] | None = None
) -> dict[str, list[tuple[int, int]]]:
    owned: dict[str, list[tuple[int, int]]] = {}
    for shard in reply:
        fields = pairs(shard)
        slots = [int(s) for s in fields.get("slots", [])]
        if not slots:
            continue
        primary = primary_of_shard(fields.get("nodes", []), known, ids)
        if primary is None:
            continue
        owned.setdefault(primary, []).extend(zip(slots[::2], slots[1::2], strict=True))
    return owned


def ranges_from_slots(
    reply: Any, ids: Mapping[str, str] | None = None
) -> dict[str, list[tuple[int, int]]]:
    owned: dict[str, list[tuple[int, int]]] = {}
    for first, last, master, *_ in reply:
        node_id = decode(master[2]) if len(master) > 2 else ""
        name = (ids or {}).get(node_id) or f"{decode(master[0])}:{int(master[1])}"
        owned.setdefault(name, []).append((int(first), int(last)))
    return owned


def parse_slot_stats(reply: Any) -> dict[int, dict[str, int]]:
    stats: dict[int, dict[str, int]] = {}
    for entry in reply:
        slot, fields = entry[0], entry[1]
        stats[int(slot)] = {name: int(value) for name, value in pairs(fields).items()}
    return stats
