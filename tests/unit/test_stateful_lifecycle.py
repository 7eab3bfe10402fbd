"""KeyContext, clamping and the LifecycleProcessor wrapper, driven by a fake Spark handle (no JVM)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

import pandas as pd
import pytest
from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues
from pyspark.sql.types import LongType, StructField, StructType

from tidemark.compat import UTC
from tidemark.stateful import KeyContext, KeyedProcessor, TimeMode, clamp_expiry
from tidemark.stateful.expiry import from_epoch_ms, to_epoch_ms
from tidemark.stateful.lifecycle import LifecycleProcessor

MINUTE = 60_000


class FakeValueState:
    def __init__(self) -> None:
        self.value: tuple[Any, ...] | None = None

    def exists(self) -> bool:
        return self.value is not None

    def get(self) -> tuple[Any, ...] | None:
        return self.value

    def update(self, value: tuple[Any, ...]) -> None:
        self.value = value

    def clear(self) -> None:
        self.value = None


class FakeHandle:
    def __init__(self) -> None:
        self.state = FakeValueState()
        self.timers: set[int] = set()
        self.ttl_ms: int | None = None

    def getValueState(self, name: str, schema: StructType, ttl_ms: int | None = None) -> FakeValueState:
        self.ttl_ms = ttl_ms
        return self.state

    def registerTimer(self, ms: int) -> None:
        self.timers.add(ms)

    def deleteTimer(self, ms: int) -> None:
        self.timers.discard(ms)

    def listTimers(self) -> list[int]:
        return sorted(self.timers)


class Counter(KeyedProcessor):
    state_schema = "events BIGINT"
    output_schema = "user STRING, events BIGINT"
    idle_timeout = timedelta(minutes=10)

    def __init__(self, keep_on_expire: bool = False, explicit_ms: int | None = None) -> None:
        self.keep_on_expire = keep_on_expire
        self.explicit_ms = explicit_ms

    def on_events(self, key: tuple[Any, ...], events: pd.DataFrame, ctx: KeyContext) -> pd.DataFrame | None:
        ctx.set_state({"events": ((ctx.state or {}).get("events") or 0) + len(events)})
        if self.explicit_ms is not None:
            ctx.expire_at(self.explicit_ms)
        return None

    def on_expire(self, key: tuple[Any, ...], ctx: KeyContext) -> pd.DataFrame | None:
        if self.keep_on_expire:
            ctx.keep()
        return pd.DataFrame({"events": [(ctx.state or {})["events"]], "user": [key[0]], "extra": [1]})


def _wrap(processor: KeyedProcessor) -> tuple[LifecycleProcessor, FakeHandle]:
    wrapper = LifecycleProcessor(processor, StructType([StructField("events", LongType())]), ["user", "events"], "ts")
    handle = FakeHandle()
    wrapper.init(handle)  # type: ignore[arg-type]
    return wrapper, handle


def _events(*minutes: int) -> list[pd.DataFrame]:
    stamps = [datetime(2024, 1, 1, tzinfo=UTC) + timedelta(minutes=m) for m in minutes]
    return [pd.DataFrame({"user": ["a"] * len(stamps), "ts": pd.to_datetime(stamps).tz_localize(None)})]


T0_MS = to_epoch_ms(datetime(2024, 1, 1, tzinfo=UTC))


def _feed(wrapper: LifecycleProcessor, minutes: list[int], watermark_ms: int) -> list[pd.DataFrame]:
    return list(wrapper.handleInputRows(("a",), iter(_events(*minutes)), TimerValues(0, watermark_ms)))


def _expire(wrapper: LifecycleProcessor, handle: FakeHandle, watermark_ms: int) -> list[pd.DataFrame]:
    fired = min(handle.timers)
    assert fired <= watermark_ms
    out = list(wrapper.handleExpiredTimer(("a",), TimerValues(0, watermark_ms), ExpiredTimerInfo(fired)))
    handle.timers.discard(fired)  # as Spark does after the call
    return out


def test_clamp_moves_an_expiry_behind_the_watermark_up_to_it_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="tidemark.stateful"):
        result = clamp_expiry(1_000, 5_000, key=("a",))
    assert (result.requested_ms, result.effective_ms, result.clamped) == (1_000, 5_000, True)
    assert "clamped to the watermark" in caplog.text
    assert "('a',)" in caplog.text


def test_clamp_leaves_a_future_expiry_alone(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="tidemark.stateful"):
        result = clamp_expiry(9_000, 5_000)
    assert (result.effective_ms, result.clamped) == (9_000, False)
    assert caplog.text == ""


def test_epoch_conversions_are_utc() -> None:
    assert to_epoch_ms(datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)) == 1000
    assert to_epoch_ms(datetime(1970, 1, 1, 0, 0, 1)) == 1000  # noqa: DTZ001 (naive means UTC here)
    assert from_epoch_ms(1000) == datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)


def test_context_expire_after_uses_the_watermark_in_event_time_and_the_clock_in_processing_time() -> None:
    event = KeyContext(("a",), None, watermark_ms=10_000, processing_time_ms=99_000)
    event.expire_after(timedelta(seconds=5))
    processing = KeyContext(
        ("a",), None, watermark_ms=10_000, processing_time_ms=99_000, time_mode=TimeMode.PROCESSING_TIME
    )
    processing.expire_after(timedelta(seconds=5))
    assert event.requested_expiry is not None and event.requested_expiry.effective_ms == 15_000
    assert processing.requested_expiry is not None and processing.requested_expiry.effective_ms == 104_000


def test_rearming_while_expiring_lands_strictly_after_the_watermark() -> None:
    ctx = KeyContext(("a",), None, watermark_ms=10_000, processing_time_ms=0, expiry_ms=10_000, expiring=True)
    ctx.expire_at(10_000)
    assert ctx.requested_expiry is not None and ctx.requested_expiry.effective_ms == 10_001


def test_idle_timeout_sets_the_expiry_to_last_event_plus_idle_and_removes_state_on_expiry() -> None:
    wrapper, handle = _wrap(Counter())
    assert _feed(wrapper, [0, 3], watermark_ms=0) == []
    assert handle.timers == {T0_MS + 13 * MINUTE}
    _feed(wrapper, [2], watermark_ms=0)  # an older event does not pull the expiry back
    assert handle.timers == {T0_MS + 13 * MINUTE}
    _feed(wrapper, [7], watermark_ms=0)
    assert handle.timers == {T0_MS + 17 * MINUTE}  # one timer per key: the old one is deleted
    [out] = _expire(wrapper, handle, watermark_ms=T0_MS + 20 * MINUTE)
    assert list(out.columns) == ["user", "events"]  # reordered to output_schema, extra columns dropped
    assert out.to_dict("records") == [{"user": "a", "events": 4}]
    assert handle.state.value is None
    assert handle.timers == set()


def test_keep_on_expire_keeps_the_state() -> None:
    wrapper, handle = _wrap(Counter(keep_on_expire=True))
    _feed(wrapper, [0], watermark_ms=0)
    _expire(wrapper, handle, watermark_ms=T0_MS + 11 * MINUTE)
    assert handle.state.value == (1,)
    assert handle.timers == set()


def test_explicit_expiry_behind_the_watermark_is_clamped_and_wins_over_idle_timeout() -> None:
    watermark = T0_MS + 30 * MINUTE
    wrapper, handle = _wrap(Counter(explicit_ms=T0_MS))
    _feed(wrapper, [31], watermark_ms=watermark)
    assert handle.timers == {watermark}


def test_a_processor_that_returns_rows_without_an_output_column_fails_clearly() -> None:
    class Broken(Counter):
        def on_events(self, key: tuple[Any, ...], events: pd.DataFrame, ctx: KeyContext) -> pd.DataFrame | None:
            return pd.DataFrame({"user": ["a"]})

    wrapper, _ = _wrap(Broken())
    with pytest.raises(ValueError, match=r"output columns \['events'\]"):
        _feed(wrapper, [0], watermark_ms=0)


def test_ttl_is_passed_to_the_state_variable() -> None:
    class WithTtl(Counter):
        time_mode = TimeMode.PROCESSING_TIME
        ttl = timedelta(minutes=2)

    _, handle = _wrap(WithTtl())
    assert handle.ttl_ms == 120_000


def test_remove_deletes_state_and_timers_at_once() -> None:
    class Remover(Counter):
        def on_events(self, key: tuple[Any, ...], events: pd.DataFrame, ctx: KeyContext) -> pd.DataFrame | None:
            if ctx.state is None:
                return super().on_events(key, events, ctx)
            ctx.remove()
            return None

    wrapper, handle = _wrap(Remover())
    _feed(wrapper, [0], watermark_ms=0)
    assert handle.state.value == (1,) and handle.timers
    _feed(wrapper, [1], watermark_ms=0)
    assert handle.state.value is None and handle.timers == set()
