"""Key design for sharded Redis: hash slots, naming, lint and slot analysis.

Pure: no Redis client, no I/O (except `live`, which talks to a `Topology` it is
given). `keyslot` is Redis Cluster's own rule, so the same keys land in the same
slots on a cluster and on client-side shards.

- `slots`: `keyslot`, `hash_tag`, `HashPolicy` (regex hashing), `SlotMap`
- `naming`: `KeySpace` builds `<env>:<service>:<module>[:v<N>]:{<affinity>}:<suffix>`
- `rules`: `lint(keys)` -> `Finding`s with stable codes (`RULES`)
- `analysis`: `analyze(keys, shards=n)` -> `Distribution` (hottest slots, skew)
- `live`: `await live_slots(topology)` -> `LiveSlots` (the same over live servers,
  with the cluster's real slot map; SCAN or `CLUSTER SLOT-STATS`)
"""

from ._analysis import Distribution as Distribution
from ._analysis import SlotCount as SlotCount
from ._analysis import SlotCounter as SlotCounter
from ._analysis import analyze as analyze
from ._catalog import CONSTANT_TAGS as CONSTANT_TAGS
from ._catalog import RULES as RULES
from ._catalog import Rule as Rule
from ._live import HotSlot as HotSlot
from ._live import LiveSlots as LiveSlots
from ._live import ScanProgress as ScanProgress
from ._live import cluster_slot_map as cluster_slot_map
from ._live import live_slots as live_slots
from ._naming import KeyName as KeyName
from ._naming import KeySpace as KeySpace
from ._naming import Part as Part
from ._naming import parse as parse
from ._rules import Finding as Finding
from ._rules import GroupOf as GroupOf
from ._rules import lint as lint
from ._rules import lint_key as lint_key
from ._slotmap import SlotMap as SlotMap
from ._slots import SLOTS as SLOTS
from ._slots import HashPolicy as HashPolicy
from ._slots import PatternLike as PatternLike
from ._slots import hash_tag as hash_tag
from ._slots import hashed_part as hashed_part
from ._slots import keyslot as keyslot
from ._slots import keyslots as keyslots
from ._slots import to_bytes as to_bytes

__all__ = [
    "CONSTANT_TAGS",
    "RULES",
    "SLOTS",
    "Distribution",
    "Finding",
    "GroupOf",
    "HashPolicy",
    "HotSlot",
    "KeyName",
    "KeySpace",
    "LiveSlots",
    "Part",
    "PatternLike",
    "Rule",
    "ScanProgress",
    "SlotCount",
    "SlotCounter",
    "SlotMap",
    "analyze",
    "cluster_slot_map",
    "hash_tag",
    "hashed_part",
    "keyslot",
    "keyslots",
    "lint",
    "lint_key",
    "live_slots",
    "parse",
    "to_bytes",
]
