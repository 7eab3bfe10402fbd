"""A running session (a notebook's) lent to a tidemark command: the command's settings last only while it runs,
and nothing is fetched for a JVM that is already started."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers import write_config
from tidemark.config import load_config
from tidemark.needs import kafka_session

pytestmark = [pytest.mark.integration]


def test_kafka_offsets_on_a_running_session_fetch_no_jar_and_give_its_settings_back(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_fetch(*args: object, **kwargs: object) -> None:
        raise AssertionError("a jar fetched for a JVM that is already running")

    monkeypatch.setattr("tidemark.spark.environment.fetch", no_fetch)
    config = load_config(write_config(tmp_path))
    before = spark.conf.get("spark.sql.shuffle.partitions")
    assert before != "1"
    with kafka_session(config) as session:
        assert session is spark
        assert session.conf.get("spark.sql.shuffle.partitions") == "1"
    assert spark.conf.get("spark.sql.shuffle.partitions") == before
