"""The cut-over of a plain-Spark job that reads Kafka (docs/adopt.md, "Kafka"): nothing lost, nothing twice.

A plain PySpark job (Kafka topic, JSON values, window count per user, watermark, unpartitioned Parquet sink) reads
what is in the topic and stops. More records arrive during the switch; `tidemark adopt --apply` replays the
windows that were still open, from where the old job's offsets log says their events begin, into a new
checkpoint and sink; more records arrive and `tidemark run` continues. The old sink, untouched, plus the new one
must equal a pandas computation of every record. Before that, a config that reads another topic is refused in one
line with every file left as it was.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.helpers import read_sink, write_config
from tests.integration.test_adopt import _read_old_sink, listing, window_counts
from tests.integration.test_kafka_recovery import kafka_source
from tests.kafka_broker import KafkaBroker
from tests.kafka_data import Produced, final_windows_oracle, make_events, produce
from tests.oracles import assert_matches_oracle
from tidemark.cli.main import main
from tidemark.compat import UTC

pytestmark = [pytest.mark.integration, pytest.mark.slow]
SCHEMA = "event_id BIGINT, user STRING, ts STRING, value DOUBLE"


def _source(broker: KafkaBroker, topic: str) -> dict[str, Any]:
    return kafka_source(broker, topic, max_offsets_per_trigger=80)


def _after(produced: list[Produced]) -> datetime:
    newest = max(p.event.timestamp_ms for p in produced)
    return datetime.fromtimestamp(newest / 1000, tz=UTC) + timedelta(minutes=1)


def _old_job(spark: Any, broker: KafkaBroker, topic: str, checkpoint: Path, sink: Path) -> None:
    """What a user wrote by hand: Kafka, JSON values, grouped by window then user, no partitions."""
    from pyspark.sql import functions as F

    raw = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", 60)
        .load()
    )
    events = (
        raw.select(F.from_json(F.col("value").cast("string"), SCHEMA).alias("e"))
        .select("e.*")
        .withColumn("ts", F.to_timestamp("ts"))
        .withWatermark("ts", "10 minutes")
    )
    out = window_counts(events)
    query = (
        out.writeStream.format("parquet")
        .option("path", str(sink))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


def test_a_plain_spark_kafka_job_moves_to_tidemark_with_nothing_lost_and_nothing_twice(
    spark: Any, kafka_broker: KafkaBroker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = "adopt-kafka"
    kafka_broker.create_topic(topic, partitions=4)
    kafka_broker.create_topic("adopt-kafka-other", partitions=1)
    produced = produce(kafka_broker, topic, make_events(300, seed=31))
    _old_job(spark, kafka_broker, topic, tmp_path / "old-checkpoint", tmp_path / "old-output")
    stopped_at = kafka_broker.end_offsets(topic)
    old_sink_before = listing(tmp_path / "old-output")
    old_checkpoint_before = listing(tmp_path / "old-checkpoint")
    produced += produce(kafka_broker, topic, make_events(60, seed=32, start=_after(produced), first_id=1000))
    old = ["--from-checkpoint", str(tmp_path / "old-checkpoint"), "--old-sink", str(tmp_path / "old-output")]

    # A config that reads another topic describes another job: one line, nothing written.
    before = listing(tmp_path)
    config = write_config(tmp_path, source=_source(kafka_broker, "adopt-kafka-other"))
    assert main(["adopt", str(config), *old, "--apply"]) == 1
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip() and not ln.startswith("adopting")]
    assert len(lines) == 1 and f"read topic(s) {topic}" in lines[0] and "Nothing was changed" in lines[0], lines
    assert {k: v for k, v in listing(tmp_path).items() if k != "tidemark.toml"} == {
        k: v for k, v in before.items() if k != "tidemark.toml"
    }

    config = write_config(tmp_path, source=_source(kafka_broker, topic))
    assert main(["adopt", str(config), *old, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["plan"]
    position = plan["position"]
    assert position["kind"] == "kafka"
    assert json.loads(position["committed"])[topic] == {str(p): o for p, o in stopped_at.items()}
    assert position["arrived_since"] == 60
    starts = json.loads(position["replay_offsets"])[topic]
    # The replay starts before the old job's end (the open windows' events were read before the cut-over).
    assert all(0 <= starts[str(p)] <= o for p, o in stopped_at.items()) and starts != {
        str(p): o for p, o in stopped_at.items()
    }
    assert "offsets log" in position["method"], position["method"]
    old_rows = _read_old_sink(tmp_path / "old-output")
    assert plan["old_sink"]["rows"] == len(old_rows) > 0
    resume = pd.Timestamp(plan["resume_from"])
    assert old_rows["windowStart"].max() < resume
    assert not (tmp_path / "checkpoint").exists() and not (tmp_path / "output").exists()  # a dry run

    assert main(["adopt", str(config), *old, "--apply"]) == 0
    capsys.readouterr()
    produced += produce(kafka_broker, topic, make_events(90, seed=33, start=_after(produced), first_id=2000))
    assert main(["run", str(config), "--available-now"]) == 0
    capsys.readouterr()

    assert listing(tmp_path / "old-output") == old_sink_before  # kept as is
    assert listing(tmp_path / "old-checkpoint") == old_checkpoint_before
    new_rows = read_sink(tmp_path / "output")
    assert new_rows["windowStart"].min() >= resume
    both = pd.concat([old_rows[new_rows.columns], new_rows], ignore_index=True)
    both = both.sort_values(["user", "windowStart"]).reset_index(drop=True)
    assert_matches_oracle(both, final_windows_oracle(produced))
