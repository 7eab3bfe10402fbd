"""Session and custom kinds through the whole pipeline run (config -> run_pipeline -> Parquet)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.helpers import write_config
from tests.oracles import read_valid_events
from tidemark.config import load_config
from tidemark.pipeline.generate import generate_events
from tidemark.pipeline.run import run_pipeline

pytestmark = pytest.mark.integration
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "stateful"


def session_oracle(files: list[Path], gap: timedelta, watermark: timedelta) -> pd.DataFrame:
    """Per-user sessions split where consecutive events are more than gap apart; closed ones only."""
    events = pd.DataFrame(read_valid_events(files)).sort_values(["user", "ts"])
    final_watermark = events["ts"].max() - watermark
    rows = []
    for user, group in events.groupby("user"):
        times = list(group["ts"])
        start = times[0]
        previous = times[0]
        count = 1
        for when in [*times[1:], None]:
            if when is None or when - previous > gap:
                rows.append({"user": user, "sessionStart": start, "sessionEnd": previous + gap, "count": count})
                if when is not None:
                    start, count = when, 0
            if when is not None:
                previous = when
                count += 1
    frame = pd.DataFrame(rows)
    return frame[frame["sessionEnd"] <= final_watermark].sort_values(["user", "sessionStart"]).reset_index(drop=True)


def test_session_kind_equals_pandas_sessionization(spark: Any, tmp_path: Path) -> None:
    # Few events over many keys and 6 hours: plenty of idle gaps longer than 20 minutes.
    data = generate_events(tmp_path / "landing", events=600, keys=12, files=4, seed=21)
    config = load_config(
        write_config(tmp_path, aggregation={"kind": "session", "gap": "20 minutes", "window": None, "extra": None})
    )
    assert config.partition_by == []
    run_pipeline(config)

    expected = session_oracle(list(data.files), timedelta(minutes=20), timedelta(minutes=10))
    actual = pd.read_parquet(tmp_path / "output")
    for column in ("sessionStart", "sessionEnd", "firstEventTime", "lastEventTime"):
        actual[column] = pd.to_datetime(actual[column], utc=True)
    actual = actual.sort_values(["user", "sessionStart"]).reset_index(drop=True)
    assert len(expected) > 15
    assert list(actual["user"]) == list(expected["user"])
    assert (actual["sessionStart"] == expected["sessionStart"]).all()
    assert (actual["sessionEnd"] == expected["sessionEnd"]).all()
    assert (actual["count"] == expected["count"]).all()
    assert (actual["lastEventTime"] + timedelta(minutes=20) == actual["sessionEnd"]).all()


@pytest.fixture
def processors() -> Iterator[None]:
    sys.path.insert(0, str(FIXTURES))
    try:
        yield
    finally:
        sys.path.remove(str(FIXTURES))


def test_custom_processor_that_never_removes_state_warns_in_run(spark: Any, tmp_path: Path, processors: None) -> None:
    # Many keys, few events per file: every batch brings new keys, so state rows grow batch after batch.
    generate_events(tmp_path / "landing", events=400, keys=400, files=6, seed=4)
    config = load_config(
        write_config(
            tmp_path,
            aggregation={
                "kind": "custom",
                "processor": "stateful_processors:NeverRemoves",
                "window": None,
                "extra": None,
            },
            monitor={"leak_batches": 3},
        )
    )
    warnings: list[str] = []
    result = run_pipeline(config, on_warning=warnings.append)
    assert result.warnings and warnings == list(result.warnings)
    assert "STATE_LEAK" in warnings[0] and "operator 0" in warnings[0]
