"""The records a stream's observation carries: read from a progress event, once each, out of every hook's sight."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tidemark.monitor.events import EventKind
from tidemark.pipeline.listener import make_handler
from tidemark.pipeline.quarantine import OBSERVATION, RECORDS, inline_records, unique_records


def _record(offset: int, raw: str = "not json") -> dict[str, Any]:
    return {"raw": raw, "source": f"t/0/{offset}", "reason": "unparseable record"}


def _event(batch: int, count: int, records: list[dict[str, Any]] | None) -> dict[str, Any]:
    observed: dict[str, Any] = {"count": count, "sample": None}
    if records is not None:
        observed[RECORDS] = json.dumps(records)
    else:
        observed[RECORDS] = None  # past the bound: the aggregate gave null
    return {"progress": {"name": "q", "batchId": batch, "numInputRows": 10, "observedMetrics": {OBSERVATION: observed}}}


def test_a_retried_tasks_copies_are_dropped_by_source() -> None:
    records = [_record(7), _record(3), _record(7), _record(5)]
    assert [r["source"] for r in unique_records(records)] == ["t/0/3", "t/0/5", "t/0/7"]


def test_records_reach_the_run_but_no_hook() -> None:
    seen: list[dict[str, Any]] = []
    handle, counters, _lock = make_handler("q", [seen.append])
    handle(EventKind.PROGRESS, _event(0, 2, [_record(1), _record(2)]))
    handle(EventKind.PROGRESS, _event(1, 3, None))
    assert counters.malformed == {0: 2, 1: 3}
    assert counters.records == {0: [_record(1), _record(2)]}  # batch 1 was past the bound: read again
    assert [p["observedMetrics"][OBSERVATION] for p in seen] == [
        {"count": 2, "sample": None},
        {"count": 3, "sample": None},
    ]
    assert RECORDS not in (counters.last_progress or {})["observedMetrics"][OBSERVATION]


def test_no_records_without_the_field() -> None:
    assert inline_records({OBSERVATION: {"count": 1, "sample": None}}) is None
    assert inline_records(None) is None
    assert inline_records({OBSERVATION: {"count": 0, RECORDS: "[]"}}) == []


def test_a_batch_written_from_carried_records_replaces_an_earlier_executor_write(tmp_path: Path) -> None:
    """A crash after the executors wrote a batch's folder: the same batch written again is its records, once."""
    from tidemark.pipeline.quarantine import batch_name, iter_quarantine, write_batch

    folder = tmp_path / batch_name(3).removesuffix(".jsonl")
    folder.mkdir()
    (folder / "part-00000.json").write_text(json.dumps({"batch_id": 3, **_record(9)}) + "\n")
    (folder / "_SUCCESS").write_text("")
    write_batch(str(tmp_path), 3, [_record(1), _record(2)])
    assert not folder.exists() or not any(folder.iterdir())
    assert [r["source"] for r in iter_quarantine(str(tmp_path))] == ["t/0/1", "t/0/2"]


def test_the_newest_event_time_spark_saw_is_kept_per_executed_batch() -> None:
    """Spark's own `eventTime.max` (recorded progress of a real run) is kept by batch; a batch whose plan did not run
    (no `max`: a re-run the sink skipped, or no rows) is absent, so its input is read again when it matters."""
    import pandas as pd

    recorded = Path(__file__).parents[1] / "fixtures" / "progress" / "windowed_hdfs.jsonl"
    events = [json.loads(line) for line in recorded.read_text().splitlines()]
    progress = [e["progress"] for e in events if e.get("type") == "progress"]
    handle, counters, _lock = make_handler("windowed_hdfs", [])
    for p in progress:
        handle(EventKind.PROGRESS, {"progress": p})
    expected = {
        int(p["batchId"]): int(pd.Timestamp(p["eventTime"]["max"]).value // 1_000_000)
        for p in progress
        if "max" in (p.get("eventTime") or {})
    }
    assert expected and len(expected) < len(progress)  # the recording has both kinds of batch
    assert counters.newest_event_ms == expected
    skipped = {"name": "windowed_hdfs", "batchId": 99, "numInputRows": 5, "eventTime": {"watermark": "x"}}
    handle(EventKind.PROGRESS, {"progress": skipped})
    assert 99 not in counters.newest_event_ms


def _skipped_event(batch: int, start: Any, end: Any, rows: int) -> dict[str, Any]:
    """A progress event as Spark gives it for a batch re-run after a stop (the shape of a real one: the file sink
    skipped batch 2 of a checkpoint whose commit was taken back)."""
    observed = {OBSERVATION: {"count": 0, "sample": None, RECORDS: "[]"}}
    sources = [
        {"description": "FileStreamSource[file:/x]", "startOffset": start, "endOffset": end, "numInputRows": rows}
    ]
    return {
        "progress": {
            "name": "q",
            "batchId": batch,
            "numInputRows": rows,
            "observedMetrics": observed,
            "sources": sources,
        }
    }


def test_a_batch_whose_plan_the_sink_skipped_has_no_count() -> None:
    handle, counters, _lock = make_handler("q", [])
    handle(EventKind.PROGRESS, _skipped_event(2, {"logOffset": 1}, {"logOffset": 2}, 0))  # new input, no row read
    handle(EventKind.PROGRESS, _skipped_event(3, {"logOffset": 2}, {"logOffset": 2}, 0))  # a no-data batch: clean
    handle(EventKind.PROGRESS, _skipped_event(4, None, {"logOffset": 3}, 0))  # a first batch the sink skipped
    handle(EventKind.PROGRESS, _skipped_event(5, {"logOffset": 3}, {"logOffset": 4}, 9))  # its plan ran
    assert counters.malformed == {2: -1, 3: 0, 4: -1, 5: 0}
    assert counters.records == {3: [], 5: []}  # a skipped plan's empty records are not taken for its records
