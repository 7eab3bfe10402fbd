"""The smoke subset's custom per-key logic (imported as "smoke_processors:RunningCount")."""

from __future__ import annotations

from typing import Any

import pandas as pd

from tidemark.stateful import KeyContext, KeyedProcessor


class RunningCount(KeyedProcessor):
    """Emits each user's running event count whenever events of the user arrive; keeps the count in state."""

    state_schema = "events BIGINT"
    output_schema = "user STRING, events BIGINT"

    def on_events(self, key: tuple[Any, ...], events: pd.DataFrame, ctx: KeyContext) -> pd.DataFrame | None:
        total = ((ctx.state or {}).get("events") or 0) + len(events)
        ctx.set_state({"events": total})
        return pd.DataFrame({"user": [key[0]], "events": [total]})
