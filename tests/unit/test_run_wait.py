"""The run's wait for its last progress event: a trigger that ran no batch (Spark's idle progress) sends no event,
so nothing is waited for; an executed batch is waited for until the listener has it."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest

from tidemark.pipeline.listener import RunCounters
from tidemark.pipeline.run import _wait_for_listener

# query.lastProgress after an available-now restart with nothing new (Spark 4.1.1, recorded): the next batch's id,
# no addBatch time, no state operators; no QueryProgressEvent was posted for it.
IDLE = {
    "batchId": 5,
    "batchDuration": 30,
    "durationMs": {"latestOffset": 2, "triggerExecution": 26},
    "stateOperators": [],
    "sources": [{"startOffset": "{'logOffset': 3}", "endOffset": "{'logOffset': 3}", "numInputRows": 0}],
    "numInputRows": 0,
}
EXECUTED = {**IDLE, "durationMs": {"addBatch": 812, "latestOffset": 2, "triggerExecution": 900}, "numInputRows": 40}


class _Query:
    def __init__(self, last: dict[str, Any] | None) -> None:
        self.lastProgress = last


def test_an_idle_trigger_is_not_waited_for(caplog: pytest.LogCaptureFixture) -> None:
    counters = RunCounters(last_batch=4)
    with caplog.at_level(logging.WARNING):
        _wait_for_listener(_Query(IDLE), counters, threading.Lock())  # type: ignore[arg-type]
    assert "did not arrive" not in caplog.text


def test_an_executed_batch_is_waited_for_until_the_listener_has_it(caplog: pytest.LogCaptureFixture) -> None:
    counters, lock = RunCounters(last_batch=4), threading.Lock()

    def report() -> None:
        time.sleep(0.3)
        with lock:
            counters.last_batch = 5
        with lock:  # then its hooks ran (pipeline/listener.py)
            counters.hooked_batch = 5

    reporter = threading.Thread(target=report)
    reporter.start()
    with caplog.at_level(logging.WARNING):
        _wait_for_listener(_Query(EXECUTED), counters, lock)  # type: ignore[arg-type]
    with lock:
        seen = counters.last_batch
    reporter.join()
    assert seen == 5 and "did not arrive" not in caplog.text  # it returned only once the event was in


def test_the_last_batch_s_hooks_are_waited_for_before_the_run_returns(caplog: pytest.LogCaptureFixture) -> None:
    """The event is in but its hooks (the sink's ledger entry) still write: the run waits for them."""
    counters, lock = RunCounters(last_batch=5, hooked_batch=4), threading.Lock()

    def hooks() -> None:
        time.sleep(0.3)
        with lock:
            counters.hooked_batch = 5

    runner = threading.Thread(target=hooks)
    runner.start()
    with caplog.at_level(logging.WARNING):
        _wait_for_listener(_Query(EXECUTED), counters, lock)  # type: ignore[arg-type]
    with lock:
        hooked = counters.hooked_batch
    runner.join()
    assert hooked == 5 and not caplog.text


def test_hooks_that_never_finish_are_given_up_on_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    counters = RunCounters(last_batch=5, hooked_batch=4)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING):
        _wait_for_listener(_Query(EXECUTED), counters, threading.Lock(), hooks_timeout=0.2)  # type: ignore[arg-type]
    assert time.monotonic() - started < 5 and "hooks did not finish" in caplog.text
