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

from .analysis import Distribution as Distribution
from .analysis import SlotCount as SlotCount
from .analysis import SlotCounter as SlotCounter
from .analysis import analyze as analyze
from .live import HotSlot as HotSlot
from .live import LiveSlots as LiveSlots
from .live import ScanProgress as ScanProgress
from .live import cluster_slot_map as cluster_slot_map
from .live import live_slots as live_slots
from .naming import KeyName as KeyName
from .naming import KeySpace as KeySpace
from .naming import Part as Part
from .naming import parse as parse
from .rules import CONSTANT_TAGS as CONSTANT_TAGS
from .rules import RULES as RULES
from .rules import Finding as Finding
from .rules import GroupOf as GroupOf
from .rules import Rule as Rule
from .rules import lint as lint
from .rules import lint_key as lint_key
from .slots import SLOTS as SLOTS
from .slots import HashPolicy as HashPolicy
from .slots import PatternLike as PatternLike
from .slots import SlotMap as SlotMap
from .slots import hash_tag as hash_tag
from .slots import hashed_part as hashed_part
from .slots import keyslot as keyslot
from .slots import keyslots as keyslots
from .slots import to_bytes as to_bytes

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
