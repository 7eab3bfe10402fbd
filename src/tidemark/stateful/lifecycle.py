"""The lifecycle wrapper over transformWithStateInPandas: timers registered and cleared, state removed on expiry."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import StructType

from tidemark.config.model import PROVIDER_KEY, ROCKSDB_PROVIDER
from tidemark.errors import EnvironmentProblem, UsageError
from tidemark.spark.lines import protobuf_problem
from tidemark.stateful.api import STATE_VARIABLE, KeyContext, KeyedProcessor, TimeMode

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame


def events_to_epoch_ms(column: pd.Series) -> pd.Series:
    """Epoch milliseconds of a pandas timestamp column (naive values are UTC, as the session time zone is)."""
    import pandas as pd

    stamps = pd.to_datetime(column, utc=True)
    epoch_ms: pd.Series = (stamps - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(milliseconds=1)
    return epoch_ms


class LifecycleProcessor(StatefulProcessor):
    """Runs a KeyedProcessor inside transformWithStateInPandas and owns its state variable and timers."""

    def __init__(
        self,
        processor: KeyedProcessor,
        state_type: StructType,
        output_fields: list[str],
        event_time_column: str | None,
    ) -> None:
        self._processor = processor
        self._state_type = state_type
        self._state_fields = [field.name for field in state_type.fields]
        self._output_fields = output_fields
        self._event_time_column = event_time_column
        self._mode = TimeMode(processor.time_mode)

    def init(self, handle: StatefulProcessorHandle) -> None:
        """Create the one value state variable (with TTL when asked, processing-time mode only)."""
        self._handle = handle
        ttl = self._processor.ttl
        ttl_ms = None if ttl is None else int(ttl.total_seconds() * 1000)
        self._state = handle.getValueState(STATE_VARIABLE, self._state_type, ttl_ms)

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        """Give the key's new events to on_events, then settle its state and expiry."""
        import pandas as pd

        events = pd.concat(list(rows), ignore_index=True)
        if self._event_time_column and self._event_time_column in events.columns:
            events = events.sort_values(self._event_time_column, kind="stable", ignore_index=True)
        timers = list(self._handle.listTimers())
        ctx = self._context(key, timerValues, expiry_ms=min(timers) if timers else None, expiring=False)
        out = self._processor.on_events(ctx.key, events, ctx)
        self._settle_after_events(ctx, timers, events)
        yield from self._emit(out)

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        """Run on_expire, then delete the key's state and timers unless the processor kept it."""
        fired = expiredTimerInfo.getExpiryTimeInMs()
        ctx = self._context(key, timerValues, expiry_ms=fired, expiring=True)
        out = self._processor.on_expire(ctx.key, ctx)
        # Spark deletes the fired timer itself once this call returns.
        others = [timer for timer in self._handle.listTimers() if timer != fired]
        if ctx.kept and not ctx.removed:
            self._write_state(ctx)
            if ctx.requested_expiry is not None:
                self._replace_timers(others, ctx.requested_expiry.effective_ms)
        else:
            self._state.clear()
            for timer in others:
                self._handle.deleteTimer(timer)
        yield from self._emit(out)

    def close(self) -> None:
        """Nothing to release: Spark owns the state store."""

    def _context(self, key: Any, values: TimerValues, *, expiry_ms: int | None, expiring: bool) -> KeyContext:
        raw = self._state.get() if self._state.exists() else None
        state = None if raw is None else dict(zip(self._state_fields, raw, strict=False))
        return KeyContext(
            tuple(key),
            state,
            watermark_ms=values.getCurrentWatermarkInMs(),
            processing_time_ms=values.getCurrentProcessingTimeInMs(),
            time_mode=self._mode,
            expiry_ms=expiry_ms,
            expiring=expiring,
        )

    def _settle_after_events(self, ctx: KeyContext, timers: list[int], events: pd.DataFrame) -> None:
        if ctx.removed:
            self._state.clear()
            for timer in timers:
                self._handle.deleteTimer(timer)
            return
        self._write_state(ctx)
        target = None if ctx.requested_expiry is None else ctx.requested_expiry.effective_ms
        idle = self._processor.idle_timeout
        if target is None and idle is not None and self._state.exists():
            target = self._idle_expiry(ctx, timers, events, int(idle.total_seconds() * 1000))
        if target is not None:
            self._replace_timers(timers, target)

    def _idle_expiry(self, ctx: KeyContext, timers: list[int], events: pd.DataFrame, idle_ms: int) -> int:
        column = self._event_time_column
        if self._mode is TimeMode.EVENT_TIME and column and column in events.columns and len(events):
            last_seen = int(events_to_epoch_ms(events[column]).max())
        else:
            last_seen = ctx.now_ms
        # The pending timer is the previous last event + idle, so the later of the two is the true idle end.
        wanted = max([last_seen + idle_ms, *timers])
        ctx.expire_at(wanted)
        assert ctx.requested_expiry is not None
        return ctx.requested_expiry.effective_ms

    def _replace_timers(self, timers: list[int], target: int) -> None:
        for timer in timers:
            if timer != target:
                self._handle.deleteTimer(timer)
        if target not in timers:
            self._handle.registerTimer(target)

    def _write_state(self, ctx: KeyContext) -> None:
        state = ctx.state
        if not ctx.state_changed or state is None:
            return
        unknown = sorted(set(state) - set(self._state_fields))
        if unknown:
            msg = f"state fields {unknown} are not in state_schema {self._state_fields}"
            raise ValueError(msg)
        self._state.update(tuple(state.get(name) for name in self._state_fields))

    def _emit(self, out: pd.DataFrame | None) -> Iterator[pd.DataFrame]:
        if out is None or out.empty:
            return
        missing = [name for name in self._output_fields if name not in out.columns]
        if missing:
            msg = f"{type(self._processor).__name__} returned rows without the output columns {missing}"
            raise ValueError(msg)
        yield out[self._output_fields]


def _struct(ddl: str, what: str, processor: KeyedProcessor) -> StructType:
    from tidemark.schema import parse_ddl

    try:
        return parse_ddl(ddl)
    except ValueError as exc:
        msg = f"{type(processor).__name__}.{what}: {exc} (e.g. 'count BIGINT, last TIMESTAMP')"
        raise UsageError(msg) from exc


def check_requirements(events: DataFrame, processor: KeyedProcessor) -> None:
    """Fail early, in one line, on what transformWithStateInPandas would fail on later."""
    problem = protobuf_problem()
    if problem is not None:
        raise EnvironmentProblem(problem)
    provider = events.sparkSession.conf.get(PROVIDER_KEY, None)
    if provider != ROCKSDB_PROVIDER:
        msg = (
            "custom stateful logic and the lifecycle layer need the RocksDB state store: "
            'set [checkpoint] state_store = "rocksdb"'
        )
        raise UsageError(msg)
    if processor.ttl is not None and TimeMode(processor.time_mode) is not TimeMode.PROCESSING_TIME:
        msg = (
            f"{type(processor).__name__}.ttl works only with time_mode = TimeMode.PROCESSING_TIME in Spark; "
            "use idle_timeout or ctx.expire_at for event time"
        )
        raise UsageError(msg)


def apply_processor(
    events: DataFrame,
    processor: KeyedProcessor,
    keys: list[str],
    event_time_column: str | None = None,
) -> DataFrame:
    """Group events by keys and run processor on them through the lifecycle layer (append mode)."""
    check_requirements(events, processor)
    missing = [name for name in keys if name not in events.columns]
    if missing:
        msg = f"key columns {missing} are not in the events (columns: {', '.join(events.columns)})"
        raise UsageError(msg)
    state_type = _struct(processor.state_schema, "state_schema", processor)
    output_type = _struct(processor.output_schema, "output_schema", processor)
    wrapper = LifecycleProcessor(processor, state_type, output_type.fieldNames(), event_time_column)
    return events.groupBy(*keys).transformWithStateInPandas(
        statefulProcessor=wrapper,
        outputStructType=output_type,
        outputMode="Append",
        timeMode=TimeMode(processor.time_mode).spark_name,
    )
