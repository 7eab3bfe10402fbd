"""The monitor `tidemark run` attaches to its query (re-exported from the listener module)."""

from __future__ import annotations

from tidemark.monitor.listener import RunMonitor

__all__ = ["RunMonitor"]
