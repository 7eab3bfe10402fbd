"""One cheap bridge from Spark's streaming listener bus to Python: each event arrives as its JSON.

PySpark's own bridge converts every event into Python objects field by field, dozens of py4j round
trips per progress event, on a driver that shares its cores with the batch. This one asks the JVM
event for its JSON once and hands the parsed dict to a handler, which tidemark's run fans out to
the pipeline's bookkeeping and the monitor.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any, ClassVar

from tidemark.compat import StrEnum

log = logging.getLogger(__name__)


class EventKind(StrEnum):
    """The listener bus events, as named in the progress log."""

    STARTED = "started"
    PROGRESS = "progress"
    IDLE = "idle"
    TERMINATED = "terminated"


EventHandler = Callable[[EventKind, dict[str, Any]], None]


class _JsonBridge:
    """The py4j callback object the JVM calls; implements PythonStreamingQueryListener."""

    def __init__(self, handler: EventHandler) -> None:
        self._handler = handler

    def _deliver(self, kind: EventKind, jevent: Any) -> None:
        try:
            self._handler(kind, json.loads(jevent.json()))
        except Exception:  # an error here must never reach Spark's listener bus
            log.exception("handling a streaming %s event failed", kind.value)

    def onQueryStarted(self, jevent: Any) -> None:
        self._deliver(EventKind.STARTED, jevent)

    def onQueryProgress(self, jevent: Any) -> None:
        self._deliver(EventKind.PROGRESS, jevent)

    def onQueryIdle(self, jevent: Any) -> None:
        self._deliver(EventKind.IDLE, jevent)

    def onQueryTerminated(self, jevent: Any) -> None:
        self._deliver(EventKind.TERMINATED, jevent)

    class Java:
        implements: ClassVar[list[str]] = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]


def json_listener(handler: EventHandler) -> Any:
    """A StreamingQueryListener for spark.streams.addListener that passes each event's JSON to handler.

    Progress events carry {"progress": <StreamingQueryProgress JSON>}; started {"id", "runId", "name",
    ...}; idle {"id", "runId", ...}; terminated {"id", "runId", "exception", ...}.
    """
    from pyspark.sql.streaming.listener import StreamingQueryListener

    class _JsonListener(StreamingQueryListener):
        # A local session calls _jlistener's bridge (the JVM's JSON); Spark Connect's client (4.0+) calls these
        # with PySpark's event objects, which are turned into the same JSON here.
        def _deliver(self, kind: EventKind, event: dict[str, Any]) -> None:
            try:
                handler(kind, event)
            except Exception:  # an error here must never reach the listener bus
                log.exception("handling a streaming %s event failed", kind.value)

        def onQueryStarted(self, event: Any) -> None:
            started = {"id": str(event.id), "runId": str(event.runId), "name": event.name}
            self._deliver(EventKind.STARTED, {**started, "timestamp": event.timestamp})

        def onQueryProgress(self, event: Any) -> None:
            self._deliver(EventKind.PROGRESS, {"progress": json.loads(event.progress.json)})

        def onQueryIdle(self, event: Any) -> None:
            idle = {"id": str(event.id), "runId": str(event.runId), "timestamp": event.timestamp}
            self._deliver(EventKind.IDLE, idle)

        def onQueryTerminated(self, event: Any) -> None:
            ended = {"id": str(event.id), "runId": str(event.runId), "exception": event.exception}
            self._deliver(EventKind.TERMINATED, {**ended, "errorClassOnException": event.errorClassOnException})

        @property
        def _jlistener(self) -> Any:
            if not hasattr(self, "_bridge"):
                from pyspark import SparkContext

                jvm: Any = SparkContext._jvm
                self._bridge = jvm.PythonStreamingQueryListenerWrapper(_JsonBridge(handler))
            return self._bridge

    return _JsonListener()
