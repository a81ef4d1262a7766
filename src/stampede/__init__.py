"""stampede: keep related Redis keys consistent when one write spans shards."""

# First: Ctrl-C while the `stampede` command loads this package exits 130 quietly.
# Then: a compiled build's modules fall back to their .py when they cannot load.
from . import _compiled as _compiled
from . import _startup as _startup
from . import atomic as atomic
from . import eventlog as eventlog
from . import fanout as fanout
from . import repair as repair
from . import wire as wire
from ._client import ReadOptions as ReadOptions
from ._client import Stampede as Stampede
from ._connect import connect as connect
from ._txn import Transaction as Transaction
from ._typed import JsonCodec as JsonCodec
from ._typed import TypedGroup as TypedGroup
from ._typed import TypedRead as TypedRead
from .errors import ClockSkewError as ClockSkewError
from .errors import ConfigurationError as ConfigurationError
from .errors import CrossSlotError as CrossSlotError
from .errors import InvalidKeyError as InvalidKeyError
from .errors import InvalidValueError as InvalidValueError
from .errors import MalformedEntry as MalformedEntry
from .errors import MalformedEnvelope as MalformedEnvelope
from .errors import MixedWritersError as MixedWritersError
from .errors import ModelValidationError as ModelValidationError
from .errors import OrderingError as OrderingError
from .errors import OutcomeUnknownError as OutcomeUnknownError
from .errors import PartialWriteError as PartialWriteError
from .errors import ReadError as ReadError
from .errors import ReadTimeout as ReadTimeout
from .errors import RepairError as RepairError
from .errors import RepliesLostError as RepliesLostError
from .errors import SetupError as SetupError
from .errors import ShardError as ShardError
from .errors import ShardResponseError as ShardResponseError
from .errors import ShardTimeout as ShardTimeout
from .errors import ShardUnavailable as ShardUnavailable
from .errors import StampedeError as StampedeError
from .errors import TornReadError as TornReadError
from .errors import TransactionAborted as TransactionAborted
from .errors import WriteConflict as WriteConflict
from .errors import WriteError as WriteError
from .errors import WriteTimeout as WriteTimeout
from .keys import HashPolicy as HashPolicy
from .keys import KeySpace as KeySpace
from .keys import SlotMap as SlotMap
from .keys import analyze as analyze
from .keys import hash_tag as hash_tag
from .keys import keyslot as keyslot
from .keys import lint as lint
from .options import ConnectOptions as ConnectOptions
from .options import Durability as Durability
from .options import Options as Options
from .options import RetryPolicy as RetryPolicy
from .results import AtomicRead as AtomicRead
from .results import GuardCode as GuardCode
from .results import Health as Health
from .results import ReadResult as ReadResult
from .results import Receipt as Receipt
from .results import TransactionReceipt as TransactionReceipt
from .topology import Cluster as Cluster
from .topology import Shards as Shards
from .typing import GuardStamp as GuardStamp
from .typing import PayloadCodec as PayloadCodec
from .typing import Topology as Topology
from .typing import VersionSource as VersionSource
from .verdict import Mode as Mode
from .verdict import Reason as Reason
from .verdict import Status as Status
from .versions import Counter as Counter
from .versions import HybridClock as HybridClock
from .wire import Envelope as Envelope
from .wire import new_token as new_token

__version__ = "0.1.0.dev0"

__all__ = [
    "AtomicRead",
    "ClockSkewError",
    "Cluster",
    "ConfigurationError",
    "ConnectOptions",
    "Counter",
    "CrossSlotError",
    "Durability",
    "Envelope",
    "GuardCode",
    "GuardStamp",
    "HashPolicy",
    "Health",
    "HybridClock",
    "InvalidKeyError",
    "InvalidValueError",
    "JsonCodec",
    "KeySpace",
    "MalformedEntry",
    "MalformedEnvelope",
    "MixedWritersError",
    "Mode",
    "ModelValidationError",
    "Options",
    "OrderingError",
    "OutcomeUnknownError",
    "PartialWriteError",
    "PayloadCodec",
    "ReadError",
    "ReadOptions",
    "ReadResult",
    "ReadTimeout",
    "Reason",
    "Receipt",
    "RepairError",
    "RepliesLostError",
    "RetryPolicy",
    "SetupError",
    "ShardError",
    "ShardResponseError",
    "ShardTimeout",
    "ShardUnavailable",
    "Shards",
    "SlotMap",
    "Stampede",
    "StampedeError",
    "Status",
    "Topology",
    "TornReadError",
    "Transaction",
    "TransactionAborted",
    "TransactionReceipt",
    "TypedGroup",
    "TypedRead",
    "VersionSource",
    "WriteConflict",
    "WriteError",
    "WriteTimeout",
    "analyze",
    "atomic",
    "connect",
    "eventlog",
    "fanout",
    "hash_tag",
    "keyslot",
    "lint",
    "new_token",
    "repair",
    "wire",
]
