"""Fuzzing the decoders and the verdict: only the documented errors escape."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaos.fuzz import (
    REGRESSIONS,
    Defect,
    check_commit_record,
    check_envelope,
    check_pattern,
    check_stream_entry,
    check_verdict,
    commit_records,
    envelope_inputs,
    observations,
    probe,
    run_target,
    scan_patterns,
    stream_entries,
)
from stampede.verdict import Observation

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(envelope_inputs())
def test_envelope_decode_is_exact_or_malformed(raw: bytes) -> None:
    """Envelope.decode returns exactly the bytes it was given, or raises MalformedEnvelope."""
    check_envelope(raw)


@FUZZ
@given(observations())
def test_judge_never_raises_and_consistent_means_one_token(obs: Observation) -> None:
    """judge() takes any stored bytes; what it calls consistent has one token (and record)."""
    check_verdict(obs)


@FUZZ
@given(commit_records(), st.lists(st.binary(min_size=1, max_size=6), max_size=4, unique=True))
def test_commit_records_parse_or_are_ignored(raw: bytes | None, keys: list[bytes]) -> None:
    """A commit record is parsed or ignored, never raises; a written one (any key bytes)
    reads back whole."""
    check_commit_record(raw, keys)


@FUZZ
@given(stream_entries())
def test_stream_entries_always_become_jobs(entry: Any) -> None:
    """Any stream entry becomes a job that fail() and dead_letter() can write back."""
    check_stream_entry(entry)


@FUZZ
@given(scan_patterns())
def test_scan_patterns_compile_or_are_configuration_errors(pattern: str | bytes) -> None:
    """compile_pattern returns a regex with a `group`, or raises ConfigurationError."""
    check_pattern(pattern)


def test_the_chaos_fuzz_runner_counts_cases() -> None:
    """run_target runs the requested cases and reports no unexpected failure."""
    result = run_target("envelope", 50)
    assert result.cases == 50 and result.failure is None


@pytest.mark.parametrize("defect", REGRESSIONS, ids=lambda d: d.name)
def test_defects_fuzzing_found_stay_fixed(defect: Defect) -> None:
    """Each defect fuzzing found (all fixed) raises only documented errors now."""
    assert probe(defect) is None
