"""The public surface is exactly what the docs promise."""

from __future__ import annotations

import inspect

import stampede
import stampede.repair
import stampede.testing

EXPECTED = [
    "AtomicRead", "ClockSkewError", "Cluster", "ConfigurationError", "ConnectOptions",
    "Counter", "CrossSlotError", "Durability", "Envelope", "GuardCode", "GuardStamp",
    "HashPolicy", "Health", "HybridClock",
    "InvalidKeyError", "InvalidValueError", "JsonCodec", "KeySpace", "MalformedEntry",
    "MalformedEnvelope", "MixedWritersError", "Mode", "ModelValidationError", "Options",
    "OrderingError",
    "OutcomeUnknownError", "PartialWriteError", "PayloadCodec", "ReadError", "ReadOptions",
    "ReadResult",
    "ReadTimeout", "Reason", "Receipt", "RepairError", "RepliesLostError", "RetryPolicy",
    "SetupError", "ShardError", "ShardResponseError", "ShardTimeout", "ShardUnavailable",
    "Shards", "SlotMap", "Stampede", "StampedeError", "Status", "Topology", "TornReadError",
    "Transaction", "TransactionAborted", "TransactionReceipt", "TypedGroup", "TypedRead",
    "VersionSource", "WriteConflict", "WriteError", "WriteTimeout", "analyze", "atomic",
    "connect", "eventlog", "fanout", "hash_tag", "keyslot", "lint", "new_token", "repair",
    "wire",
]  # fmt: skip


def test_all_is_pinned_and_sorted() -> None:
    """`stampede.__all__` is exactly the public names, sorted, and each one exists."""
    assert stampede.__all__ == EXPECTED
    assert sorted(stampede.__all__) == stampede.__all__
    for name in stampede.__all__:
        assert getattr(stampede, name) is not None


def test_every_error_derives_from_the_root() -> None:
    """One root: every exported error class is a StampedeError."""
    objects = [getattr(stampede, n) for n in stampede.__all__]
    errors = [o for o in objects if isinstance(o, type) and issubclass(o, BaseException)]
    assert errors and all(issubclass(e, stampede.StampedeError) for e in errors)
    assert issubclass(stampede.ShardTimeout, TimeoutError)
    assert issubclass(stampede.WriteTimeout, TimeoutError)
    assert issubclass(stampede.ShardUnavailable, ConnectionError)


def test_subpackages_pin_their_names() -> None:
    """The repair and testing packages export their documented names."""
    assert set(stampede.repair.__all__) >= {
        "Enqueue", "NewestWins", "Refetch", "RepairQueue", "RepairStrategy", "RepairContext",
    }  # fmt: skip
    assert set(stampede.testing.__all__) >= {
        "LocalCluster", "LocalPrimaries", "RedisNode", "RedisProxy",
    }  # fmt: skip


def test_design_names_are_callable_as_documented() -> None:
    """The documented examples: keyslot, hash_tag and the envelope codec."""
    assert stampede.keyslot("{user1000}.following") == stampede.keyslot("{user1000}.followers")
    assert stampede.hash_tag("foo{}{bar}") is None
    assert stampede.hash_tag("{a}:{b}") == b"a"
    env = stampede.Envelope(1, "01JD0000000000000000000000", b"p")
    assert stampede.Envelope.decode(env.encode()) == env


def test_connect_takes_the_data_nodes_url_of_a_sentinel_set_up() -> None:
    """`connect(..., data_url=...)`: the credentials and TLS settings of
    Sentinel-managed data nodes, apart from the Sentinels' (keyword only)."""
    parameter = inspect.signature(stampede.connect).parameters["data_url"]
    assert parameter.kind is inspect.Parameter.KEYWORD_ONLY and parameter.default is None


def test_guard_codes_are_pinned() -> None:
    """The guard's reply codes (stored in scripts, read by callers of `write_guarded`)."""
    assert {c.name: int(c) for c in stampede.GuardCode} == {
        "KEPT": 0, "WRITTEN": 1, "SAME": 2, "WRONGTYPE": -1, "MIXED": -2, "FUTURE": -3,
        "FOREIGN": -4, "WITHHELD": -6, "EXPIRED": -7,
    }  # fmt: skip


def test_repair_queue_failure_calls_take_the_holder() -> None:
    """`RepairQueue.fail` and `dead_letter` take the consumer that holds the job
    (keyword only): a job another worker took over is left alone."""
    import inspect

    from stampede.repair import RepairQueue

    for method in (RepairQueue.fail, RepairQueue.dead_letter):
        holder = inspect.signature(method).parameters["holder"]
        assert holder.kind is inspect.Parameter.KEYWORD_ONLY and holder.default is None
    assert inspect.signature(RepairQueue.fail).return_annotation == "bool | None"


def test_repair_queue_postpone_is_public() -> None:
    """`RepairQueue.postpone(job, why, *, delay, holder=None)` puts a job off without
    counting an attempt; a job's `waited` is the seconds it was put off in all."""
    import inspect

    from stampede.repair import RepairQueue
    from stampede.repair._jobs import Job

    params = inspect.signature(RepairQueue.postpone).parameters
    assert list(params) == ["self", "job", "why", "delay", "holder"]
    assert params["delay"].kind is inspect.Parameter.KEYWORD_ONLY
    assert Job.__dataclass_fields__["waited"].default == 0.0
