"""Synthesize Spark 2.4-style checkpoints (no Spark 2 can run here: it needs Java 8), and prove them with Spark 3.5.

    python3 tools/spark_lines/synthesize_spark2.py write                               # any Python, no Spark
    $(python3 tools/spark_lines/env.py 3.5) tools/spark_lines/synthesize_spark2.py prove   # Spark 3.5

`write` runs the recorder's window aggregation and dropDuplicates over the recorder's 4 input files in plain Python,
batch by batch as Spark 2.4's StateStoreSaveExec (append) and StreamingDeduplicateExec do, and writes what a 2.4.8
query on the HDFS-backed store leaves behind: `metadata`, offsets "v1" with 2.4's five OffsetSeqMetadata confs,
commits "v1", the file source log, and `state/0/<partition>/<version>.delta` in the provider's framing
(spark2_format.py), each file with Hadoop's `.crc` sibling. No state schema files: they arrived in 3.1.

`prove` checks each synthesized case three ways, and writes proof.json beside expected.json:
1. the delta records equal, per partition and version, those Spark 3.5.9 wrote for the same query and input
   (tests/fixtures/corpus/spark-3.5.9/<case>; the state formats of these two operators did not change since 2.4);
2. Spark 3.5 continues a copy of the checkpoint on new input (rows that fall into windows / duplicate keys held
   only in the synthesized state) and its output (foreachBatch to parquet) equals an independent pandas
   computation over ALL input, old and new: possible only if Spark read every synthesized state row;
3. Spark's own state store (HDFSBackedStateStoreProvider via the continued query) raised nothing: format
   validation of UnsafeRows is on by default in 3.5, and a bad checksum or framing fails the load.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from record_corpus import CORPUS, HDFS, SHUFFLE_PARTITIONS, input_rows, write_input
from spark2_format import (
    read_state_file,
    read_unsafe_row,
    shuffle_partition,
    state_file,
    unsafe_row,
    write_with_crc,
)

SPARK2_VERSION = "2.4.8"
FILES = 4
DELAY_MS = 60_000
# The landing folder the synthesized 2.4 run read; `prove` puts the continuation's input there, since a file source
# only continues on the folder its log names.
INPUT_DIR = "/tmp/tidemark-spark2-landing"  # noqa: S108
# 2024-01-01T00:10:00Z, the wall clock of the first batch (just after the events); batches one minute apart.
BATCH_CLOCK_MS = 1_704_067_800_000
# OffsetSeqMetadata.relevantSQLConfs of Spark 2.4 (OffsetSeq.scala), with their 2.4 defaults.
SPARK2_OFFSET_CONF = {
    "spark.sql.streaming.stateStore.providerClass": HDFS,
    "spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion": "2",
    "spark.sql.streaming.multipleWatermarkPolicy": "min",
    "spark.sql.streaming.aggregation.stateFormatVersion": "2",
    "spark.sql.shuffle.partitions": str(SHUFFLE_PARTITIONS),
}
WINDOW_KEY_KINDS: list[Any] = [["timestamp", "timestamp"], "string"]
DEDUP_KEY_KINDS: list[Any] = ["string", "timestamp"]


def _ms(ts: str) -> int:
    return int(datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp() * 1000)


@dataclass
class Batch:
    batch_id: int
    watermark_ms: int
    next_watermark_ms: int
    puts: dict[tuple[Any, ...], tuple[Any, ...]] = field(default_factory=dict)
    removes: list[tuple[Any, ...]] = field(default_factory=list)


def simulate(query: str, files: int) -> tuple[list[Batch], dict[tuple[Any, ...], tuple[Any, ...]]]:
    """Batch by batch, the state updates of the 2.4 operator; keys and values in milliseconds and ints."""
    state: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    watermark = 0
    max_event = None
    batches = []
    for batch_id in range(files):
        rows = input_rows(batch_id)
        batch = Batch(batch_id, watermark, watermark)
        events = [(row["k"], _ms(row["ts"]), row["v"]) for row in rows]
        if any(ts <= watermark for _, ts, _ in events):
            msg = "the synthesized input must have no late rows"
            raise ValueError(msg)
        if query == "window":
            for k, ts, v in events:
                start = ts - ts % 60_000
                key = (start, start + 60_000, k)
                count, total = state.get(key, (0, 0))
                state[key] = (count + 1, total + v)
                batch.puts[key] = state[key]
            expired = sorted(key for key in state if key[1] <= watermark)
        else:
            for k, ts, _ in events:
                if (k, ts) not in state:
                    state[(k, ts)] = ()
                    batch.puts[(k, ts)] = ()
            expired = sorted(key for key in state if key[1] <= watermark)
        for key in expired:
            del state[key]
            batch.removes.append(key)
        max_event = max([ts for _, ts, _ in events] + ([max_event] if max_event is not None else []))
        watermark = max(watermark, max_event - DELAY_MS)
        batch.next_watermark_ms = watermark
        batches.append(batch)
    return batches, state


def key_fields(query: str, key: tuple[Any, ...]) -> list[tuple[str, Any]]:
    if query == "window":
        start, end, k = key
        return [("struct", [("timestamp", start * 1000), ("timestamp", end * 1000)]), ("string", k)]
    k, ts = key
    return [("string", k), ("timestamp", ts * 1000)]


def value_fields(query: str, value: tuple[Any, ...]) -> list[tuple[str, Any]]:
    # Window: the aggregation buffer of count(1) and sum(v) (state format 2: keys not repeated in the value).
    # Dedup: StreamingDeduplicateExec.EMPTY_ROW, one NullType field, null.
    return [("long", value[0]), ("long", value[1])] if query == "window" else [("null", None)]


def write_case(case: str, query: str, target: Path) -> dict[str, Any]:
    batches, final_state = simulate(query, FILES)
    shutil.rmtree(target, ignore_errors=True)
    checkpoint = target / "checkpoint"
    query_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"tidemark-corpus-spark2-{case}"))
    write_with_crc(checkpoint / "metadata", json.dumps({"id": query_id}, separators=(",", ":")).encode())
    for batch in batches:
        clock = BATCH_CLOCK_MS + 60_000 * batch.batch_id
        metadata = {"batchWatermarkMs": batch.watermark_ms, "batchTimestampMs": clock, "conf": SPARK2_OFFSET_CONF}
        offsets = "v1\n" + json.dumps(metadata, separators=(",", ":")) + "\n" + f'{{"logOffset":{batch.batch_id}}}'
        write_with_crc(checkpoint / "offsets" / str(batch.batch_id), offsets.encode())
        entry = {"path": f"file://{INPUT_DIR}/m{batch.batch_id:03d}.json", "timestamp": clock - 30_000}
        source = "v1\n" + json.dumps({**entry, "batchId": batch.batch_id}, separators=(",", ":"))
        write_with_crc(checkpoint / "sources" / "0" / str(batch.batch_id), source.encode())
        commit = "v1\n" + json.dumps({"nextBatchWatermarkMs": batch.next_watermark_ms}, separators=(",", ":"))
        write_with_crc(checkpoint / "commits" / str(batch.batch_id), commit.encode())
        for partition in range(SHUFFLE_PARTITIONS):
            records: list[tuple[bytes, bytes | None]] = []
            for key, value in sorted(batch.puts.items()):
                if shuffle_partition(key_fields(query, key), SHUFFLE_PARTITIONS) == partition:
                    records.append((unsafe_row(key_fields(query, key)), unsafe_row(value_fields(query, value))))
            for key in batch.removes:
                if shuffle_partition(key_fields(query, key), SHUFFLE_PARTITIONS) == partition:
                    records.append((unsafe_row(key_fields(query, key)), None))
            delta = checkpoint / "state" / "0" / str(partition) / f"{batch.batch_id + 1}.delta"
            write_with_crc(delta, state_file(records))
    last = batches[-1]
    operator_name = "stateStoreSave" if query == "window" else "dedupe"
    rows_source = (
        "synthesize_spark2.py's simulation of the 2.4 operator (the rows its deltas leave in state after version"
        f" {last.batch_id + 1}); equal to numRowsTotal of Spark 3.5.9's recording of the same case, and proven"
        " by continuing the checkpoint with Spark 3.5 (proof.json)"
    )
    expected = {
        "spark_version": SPARK2_VERSION,
        "case": case,
        "description": (
            "synthesized Spark 2.4.8-style checkpoint: "
            + ("the window aggregation" if query == "window" else "the dropDuplicates(k, ts) query")
            + " of the recorder, HDFS-backed state, no state schema files"
        ),
        "synthesized_by": "tools/spark_lines/synthesize_spark2.py write",
        "settings": {
            **SPARK2_OFFSET_CONF,
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.streaming.noDataMicroBatches.enabled": "false",
        },
        "output_mode": "append",
        "input": {"files": FILES, "rows_per_file": len(input_rows(0)), "maxFilesPerTrigger": 1},
        "last_committed_batch": last.batch_id,
        "last_committed_batch_source": "highest file name in commits/ (written by the synthesizer)",
        "offsets_batches": [batch.batch_id for batch in batches],
        "commits_batches": [batch.batch_id for batch in batches],
        "operators": [
            {
                "operator_id": 0,
                "operator_name": operator_name,
                "stores": [{"name": "default", "rows": len(final_state), "rows_source": rows_source}],
                "store_names_source": "the single store of the operator (no store folders in the partitions)",
                "num_rows_total": len(final_state),
                "num_rows_total_source": rows_source,
            }
        ],
    }
    (target / "expected.json").write_text(json.dumps(expected, indent=2) + "\n")
    return expected


CASES = {"hdfs_window": "window", "hdfs_dedup": "dedup"}


def write_all() -> None:
    for case, query in CASES.items():
        target = CORPUS / f"spark-{SPARK2_VERSION}" / case
        expected = write_case(case, query, target)
        rows = expected["operators"][0]["num_rows_total"]
        print(f"{target}: last batch {expected['last_committed_batch']}, {rows} rows in state")


# ---------------------------------------------------------------- prove (Spark 3.5)


def deltas_by_version(checkpoint: Path, kinds: list[Any]) -> dict[str, list[Any]]:
    """{"<partition>/<version>": sorted [key, value-or-None]} decoded from every .delta file."""
    decoded: dict[str, list[Any]] = {}
    for path in sorted((checkpoint / "state" / "0").glob("*/*.delta")):
        value_kinds: list[Any] = ["long", "long"] if kinds is WINDOW_KEY_KINDS else ["null"]
        records = [
            [read_unsafe_row(key, kinds), None if value is None else read_unsafe_row(value, value_kinds)]
            for key, value in read_state_file(path.read_bytes())
        ]
        decoded[f"{path.parent.name}/{path.stem}"] = sorted(records, key=json.dumps)
    return decoded


def continuation_input(query: str) -> list[list[dict[str, Any]]]:
    """New files after the synthesized 4: rows that can only come out right together with the old state."""
    if query == "window":
        # Minute 2 and 3 windows are still in state when batch 4 runs (watermark 00:02:50): add to them.
        extra = [
            {"k": "k0", "ts": "2024-01-01T00:02:55Z", "v": 900},
            {"k": "k1", "ts": "2024-01-01T00:03:55Z", "v": 901},
        ]
        flush = [{"k": "k2", "ts": "2024-01-01T00:10:00Z", "v": 902}]
        return [input_rows(4) + extra, input_rows(5), flush]
    # Duplicates of every minute-3 key (held in the synthesized state), with other values.
    duplicates = [dict(row, v=row["v"] + 1000) for row in input_rows(3)]
    return [input_rows(4) + duplicates, input_rows(5)]


def _text(ts: Any) -> str:
    return ts.strftime("%Y-%m-%d %H:%M:%S")


def oracle(query: str, old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the continued query must output, computed with pandas over all input, old and new."""
    import pandas as pd

    frame = pd.DataFrame(old + new)
    frame["ts"] = pd.to_datetime(frame["ts"], utc=True)
    if query == "window":
        # Windows the 2.x batches had already evicted (end <= the watermark of their last batch) are not
        # emitted again; the continuation emits every other window the final watermark closes.
        evicted_before = pd.Timestamp(simulate(query, FILES)[0][-1].watermark_ms, unit="ms", tz="UTC")
        final_watermark = frame["ts"].max() - pd.Timedelta(minutes=1)
        frame["start"] = frame["ts"].dt.floor("1min")
        grouped = frame.groupby(["start", "k"]).agg(n=("v", "size"), s=("v", "sum")).reset_index()
        end = grouped["start"] + pd.Timedelta(minutes=1)
        emitted = grouped[(end > evicted_before) & (end <= final_watermark)]
        return [{"start": _text(r.start), "k": r.k, "n": int(r.n), "s": int(r.s)} for r in emitted.itertuples()]
    seen = {(r["k"], r["ts"]) for r in old}
    out = []
    for row in new:
        if (row["k"], row["ts"]) not in seen:
            seen.add((row["k"], row["ts"]))
            out.append({"k": row["k"], "ts": _text(pd.Timestamp(row["ts"])), "v": row["v"]})
    return out


def continue_with_spark(case: str, query: str, spark: Any) -> dict[str, Any]:
    import os

    from record_corpus import SCHEMA, dedup_query, window_query

    source_case = CORPUS / f"spark-{SPARK2_VERSION}" / case
    with tempfile.TemporaryDirectory(prefix="spark2-proof-") as scratch:
        checkpoint = Path(scratch) / "checkpoint"
        shutil.copytree(source_case / "checkpoint", checkpoint)
        input_dir, output = Path(INPUT_DIR), Path(scratch) / "output"
        shutil.rmtree(input_dir, ignore_errors=True)
        write_input(input_dir, FILES)  # the old files stay in the landing folder, as they would
        new_files = continuation_input(query)
        for index, rows in enumerate(new_files):
            path = input_dir / f"m{FILES + index:03d}.json"
            path.write_text("".join(json.dumps(row) + "\n" for row in rows))
            os.utime(path, (1_800_000_000 + index, 1_800_000_000 + index))
        build = window_query if query == "window" else dedup_query
        frame = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(input_dir))
        handle = (
            build(frame)
            .writeStream.foreachBatch(lambda batch, _: batch.write.mode("append").parquet(str(output)))
            .option("checkpointLocation", str(checkpoint))
            .outputMode("append")
            .trigger(availableNow=True)
            .start()
        )
        handle.awaitTermination()
        written = spark.read.parquet(str(output))
        if query == "window":
            columns = ["date_format(window.start, 'yyyy-MM-dd HH:mm:ss') AS start", "k", "n", "s"]
        else:
            columns = ["k", "date_format(ts, 'yyyy-MM-dd HH:mm:ss') AS ts", "v"]
        got = [row.asDict() for row in written.selectExpr(*columns).collect()]
        batches = sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
        shutil.rmtree(input_dir)
    old = [row for minute in range(FILES) for row in input_rows(minute)]
    expected = oracle(query, old, [row for rows in new_files for row in rows])
    got_sorted, expected_sorted = sorted(got, key=json.dumps), sorted(expected, key=json.dumps)
    return {
        "spark_version": spark.version,
        "new_input_rows": sum(len(rows) for rows in new_files),
        "batches_after_continuation": batches,
        "output_rows": len(got_sorted),
        "output_equals_pandas_oracle": got_sorted == expected_sorted,
        "output": got_sorted,
        "oracle": expected_sorted,
    }


def prove() -> None:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("prove-spark2-corpus")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    failed = False
    try:
        for case, query in CASES.items():
            kinds = WINDOW_KEY_KINDS if query == "window" else DEDUP_KEY_KINDS
            ours = deltas_by_version(CORPUS / f"spark-{SPARK2_VERSION}" / case / "checkpoint", kinds)
            recorded_case = CORPUS / "spark-3.5.9" / case / "checkpoint"
            same_as_35 = ours == deltas_by_version(recorded_case, kinds) if recorded_case.is_dir() else None
            continued = continue_with_spark(case, query, spark)
            proof = {
                "case": case,
                "delta_records_equal_spark_3_5_9_recording": same_as_35,
                "continued_with": continued,
                "how": "tools/spark_lines/synthesize_spark2.py (docstring) and tests/fixtures/corpus/README.md",
            }
            path = CORPUS / f"spark-{SPARK2_VERSION}" / case / "proof.json"
            path.write_text(json.dumps(proof, indent=2) + "\n")
            ok = bool(same_as_35) and continued["output_equals_pandas_oracle"]
            failed |= not ok
            print(
                f"{case}: deltas equal 3.5.9's={same_as_35}, continuation output equals oracle="
                f"{continued['output_equals_pandas_oracle']} ({continued['output_rows']} rows)"
            )
    finally:
        spark.stop()
    if failed:
        raise SystemExit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["write", "prove"])
    args = parser.parse_args()
    if not Path("tests/fixtures").is_dir():
        msg = "run from the repository root"
        raise SystemExit(msg)
    write_all() if args.action == "write" else prove()


if __name__ == "__main__":
    main()
