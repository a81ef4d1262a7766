"""Read-atomic transactions over any keys (RAMP on Redis): `Transaction`, `read_atomic`.

Reached through `Stampede.transaction()` and `Stampede.read_atomic()`; the stored
layout is in `stampede.wire` (the transaction layout) and docs/wire-formats.md.
"""

from .read import read_atomic as read_atomic
from .write import Transaction as Transaction

__all__ = ["Transaction", "read_atomic"]
