"""The leak guard on synthetic and recorded progress dicts (no JVM)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tidemark.stateful import LeakGuard, LeakWarning

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "stateful" / "leaky_progress.jsonl"


def _progress(batch: int, watermark_minute: int | None, *rows: int) -> dict[str, Any]:
    progress: dict[str, Any] = {
        "batchId": batch,
        "stateOperators": [{"operatorName": f"op{i}", "numRowsTotal": n} for i, n in enumerate(rows)],
    }
    if watermark_minute is not None:
        progress["eventTime"] = {"watermark": f"2024-01-01T00:{watermark_minute:02d}:00.000Z"}
    return progress


def _feed(guard: LeakGuard, batches: list[dict[str, Any]]) -> list[LeakWarning]:
    return [warning for batch in batches for warning in guard.observe(batch)]


def test_growth_across_n_batches_with_advancing_watermark_warns_once_naming_the_operator() -> None:
    batches = [_progress(b, b, 10 + 5 * b) for b in range(8)]
    warnings = _feed(LeakGuard(batches=3), batches)
    assert len(warnings) == 1
    warning = warnings[0]
    # batch 0 is the baseline; growth in batches 1, 2, 3 makes three consecutive batches
    assert (warning.batch_id, warning.batches, warning.rows_before, warning.rows_now) == (3, 3, 10, 25)
    assert (warning.operator_index, warning.operator_name, warning.code) == (0, "op0", "STATE_LEAK")
    assert "op0" in warning.message
    assert warning.watermark == "2024-01-01T00:03:00.000Z"


def test_one_growth_short_of_n_does_not_warn() -> None:
    batches = [_progress(b, b, 10 + b) for b in range(3)]
    assert _feed(LeakGuard(batches=3), batches) == []


def test_growth_while_the_watermark_stands_still_is_not_a_leak() -> None:
    batches = [_progress(b, 5, 10 + b) for b in range(10)]
    assert _feed(LeakGuard(batches=3), batches) == []


def test_without_a_watermark_nothing_is_reported() -> None:
    batches = [_progress(b, None, 10 + b) for b in range(10)]
    assert _feed(LeakGuard(batches=3), batches) == []


def test_shrinking_state_resets_the_count() -> None:
    rows = [10, 11, 12, 5, 6, 7]  # grows twice, shrinks, grows twice: never three in a row
    batches = [_progress(b, b, n) for b, n in enumerate(rows)]
    assert _feed(LeakGuard(batches=3), batches) == []


def test_idle_batches_between_growth_do_not_hide_a_leak() -> None:
    rows = [10, 11, 11, 12, 12, 13]  # equal rows in idle batches: neither growth nor removal
    batches = [_progress(b, b, n) for b, n in enumerate(rows)]
    warnings = _feed(LeakGuard(batches=3), batches)
    assert [(w.batch_id, w.rows_before, w.rows_now) for w in warnings] == [(5, 10, 13)]


def test_each_operator_is_tracked_on_its_own() -> None:
    batches = [_progress(b, b, 100, 10 + b) for b in range(5)]  # op0 steady, op1 leaking
    warnings = _feed(LeakGuard(batches=4), batches)
    assert [(w.operator_index, w.operator_name) for w in warnings] == [(1, "op1")]


def test_a_new_leak_after_recovery_warns_again() -> None:
    rows = [1, 2, 3, 0, 1, 2, 3]
    batches = [_progress(b, b, n) for b, n in enumerate(rows)]
    assert [w.batch_id for w in _feed(LeakGuard(batches=2), batches)] == [2, 5]


def test_fewer_than_two_batches_is_rejected() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        LeakGuard(batches=1)


def test_warning_round_trips_through_json() -> None:
    from dataclasses import asdict

    warning = _feed(LeakGuard(batches=2), [_progress(b, b, b) for b in range(3)])[0]
    assert LeakWarning.from_json(json.loads(json.dumps(asdict(warning)))) == warning


def test_recorded_progress_of_a_processor_that_never_removes_state() -> None:
    # recorded from a real run of stateful_processors:NeverRemoves (6 files, one per batch) on pyspark 4.1.1
    batches = [json.loads(line) for line in RECORDED.read_text(encoding="utf-8").splitlines() if line]
    warnings = _feed(LeakGuard(batches=3), batches)
    assert len(warnings) == 1
    assert "transformWithState" in warnings[0].operator_name
