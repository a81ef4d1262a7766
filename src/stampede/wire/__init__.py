"""What stampede stores in Redis: envelopes, tokens, derived key names, commit
records and the read-atomic transactions' version hashes. Pure: no I/O.

These formats are stable (docs/wire-formats.md); other programs, and older and
newer versions of stampede, read them.
"""

from ._envelope import (
    CLOCK_FLOOR,
    MAX_VERSION,
    TOKEN_LENGTH,
    Envelope,
    VersionKind,
    is_token,
    kind_of,
    new_token,
    token_after,
)
from ._names import COMMIT_SUFFIX, COUNTER_SUFFIX, commit_key, is_reserved, version_key
from ._record import CommitRecord, decode_commit, encode_commit, expire_at
from ._txn import side_key as version_hash_key

__all__ = [
    "CLOCK_FLOOR",
    "COMMIT_SUFFIX",
    "COUNTER_SUFFIX",
    "MAX_VERSION",
    "TOKEN_LENGTH",
    "CommitRecord",
    "Envelope",
    "VersionKind",
    "commit_key",
    "decode_commit",
    "encode_commit",
    "expire_at",
    "is_reserved",
    "is_token",
    "kind_of",
    "new_token",
    "token_after",
    "version_hash_key",
    "version_key",
]
