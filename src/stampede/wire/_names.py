"""The names of stampede's own keys, derived from a group's or a key's name. Pure.

```
<group>:stampede:commit     a group's commit record
<group>:stampede:version    a group's Counter
<key>:stampede:p            a key's kept versions ({<key>}:stampede:p:u without a brace)
<key>:stampede:v            a key's version hash (read-atomic transactions; see
{<key>}:stampede:v:u        stampede.wire's transaction layout)
stampede:v:{<n>}:<key>
stampede:op:...             exactly-once markers of non-idempotent operations
<key>:stampede:op:...       (beside the key, under a rule that pins the others)
stampede:shard              a primary's shard identity record
stampede:repairs...         the repair stream, its partitions, dead letters and
{stampede:repairs}:...      markers
```

A derived name keeps the group's hash tag, so it co-locates with tagged data.
"""

from __future__ import annotations

__all__ = ["COMMIT_SUFFIX", "COUNTER_SUFFIX", "commit_key", "is_reserved", "version_key"]

COMMIT_SUFFIX = b":stampede:commit"
COUNTER_SUFFIX = b":stampede:version"

_RESERVED = (
    COMMIT_SUFFIX,
    COUNTER_SUFFIX,
    b":stampede:p",  # a key's kept versions
    b":stampede:p:u",
    b":stampede:v",  # a key's version hash (read-atomic transactions)
    b":stampede:v:u",
)
_RESERVED_PREFIXES = (b"stampede:v:{", b"stampede:op:", b"stampede:repairs", b"{stampede:repairs}")
_RESERVED_NAMES = frozenset({b"stampede:shard"})


def commit_key(group: bytes) -> bytes:
    """`<group>:stampede:commit`, co-located with the group when it carries a tag."""
    return group + COMMIT_SUFFIX


def version_key(group: bytes) -> bytes:
    """`<group>:stampede:version`, the `Counter` version source's key."""
    return group + COUNTER_SUFFIX


def is_reserved(key: bytes) -> bool:
    """True when `key` is named like one of stampede's own keys (and would collide)."""
    return (
        key.endswith(_RESERVED)
        or key.startswith(_RESERVED_PREFIXES)
        or key in _RESERVED_NAMES
        or b":stampede:op:" in key  # a marker beside its key (`topology._retries.Markers`)
    )
