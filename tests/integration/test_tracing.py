"""OpenTelemetry spans for writes, reads, transactions and repair jobs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from stampede import Stampede, TornReadError, tracing

from ..support import spread_keys, write_newer

EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def provider() -> Iterator[None]:
    """One SDK tracer provider for the process (OpenTelemetry allows one)."""
    sdk = TracerProvider()
    sdk.add_span_processor(SimpleSpanProcessor(EXPORTER))
    trace.set_tracer_provider(sdk)
    tracing.refresh()  # spans from now on, not within the second
    yield


async def test_spans_name_the_operation_and_never_carry_payloads(st: Stampede) -> None:
    """write, read, transaction and read_atomic each leave one span with their facts;
    a torn read's span ends in error."""
    EXPORTER.clear()
    keys = spread_keys(st, "traced", 2)
    receipt = await st.write("traced", dict.fromkeys(keys, b"secret payload"))
    await st.read("traced", keys)
    async with st.transaction() as tx:
        tx.set(keys[0], b"secret payload")
        tx.set(keys[1], b"secret payload")
    await st.read_atomic(keys)
    await write_newer(st, [keys[0].encode()], b"newer")
    with pytest.raises(TornReadError):
        await st.read("traced", keys)
    spans = {s.name: s for s in EXPORTER.get_finished_spans()}
    write = spans["stampede.write"].attributes or {}
    assert write["stampede.group"] == "traced" and write["stampede.keys"] == 2
    assert write["stampede.token"] == receipt.token
    assert spans["stampede.transaction"].attributes["stampede.keys"] == 2  # type: ignore[index]
    assert spans["stampede.read_atomic"].attributes["stampede.rounds"] == 1  # type: ignore[index]
    reads = [s for s in EXPORTER.get_finished_spans() if s.name == "stampede.read"]
    assert reads[0].attributes["stampede.status"] == "consistent"  # type: ignore[index]
    assert not reads[-1].status.is_ok and reads[-1].events[0].name == "exception"
    for s in EXPORTER.get_finished_spans():
        assert all(b"secret" not in str(v).encode() for v in (s.attributes or {}).values())
