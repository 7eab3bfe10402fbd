"""Benchmark: Spark's own offline repartition (4.2+) beside `tidemark state repartition`, on the same checkpoints.

Run with a Spark 4.2+ environment's python (tools/spark_lines/smoke.py env 4.2@3.11 prints one, tidemark in it):

    $(python3 tools/spark_lines/smoke.py env 4.2@3.11) benchmarks/repartition_vs_spark.py --dir /tmp/rvs

For each case (a stateful operator on a state store provider), in one local[2] session:
1. a source of events (k, t, v) in 4 Parquet files, no late events; the query runs over the first 2 files with 2
   shuffle partitions (available-now) into a checkpoint, its output collected per batch (foreachBatch -> Parquet);
2. three copies of that checkpoint: A stays as it is, B gets `spark._streamingCheckpointManager.repartition(B, 4)`
   (Spark's), C gets `repartition_checkpoint(C, 4, apply=True)` (tidemark's: rewrite, verify, archive, swap);
   each call is timed, and a refusal is recorded with its error class or message;
3. the last 2 files arrive and A, B and C each continue (available-now); the whole output of B and of C must equal
   A's (Spark's own continuation without a repartition), row for row, and for the aggregation and the
   deduplication also an independent pandas computation over the files.
Cases: aggregation (window + count + sum), dropDuplicates, session windows, a stream-stream join,
applyInPandasWithState and transformWithStateInPandas (RocksDB only), on HDFS-backed and RocksDB (changelog)
stores; `--keys` sets the keys per file (state size), `--cases` picks some. One JSON line per case.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pandas as pd

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
START = datetime(2026, 1, 1, tzinfo=timezone.utc)
FILES, BEFORE = 4, 2
OLD, NEW = 2, 4


def _session() -> Any:
    from tidemark.session import build_session

    return build_session(
        "local[2]",
        {
            "spark.sql.shuffle.partitions": str(OLD),
            "spark.sql.session.timeZone": "UTC",
            "spark.driver.memory": "2g",
            "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        },
    )


def write_source(folder: Path, keys: int) -> list[Path]:
    """4 files of events; file i covers minutes [5i, 5i+5) of event time, every key once a minute."""
    folder.mkdir(parents=True)
    files = []
    for index in range(FILES):
        rows = [
            {"k": f"k{key:06d}", "t": START + timedelta(minutes=5 * index + minute, seconds=key % 60), "v": key}
            for minute in range(5)
            for key in range(keys)
        ]
        path = folder / f"part-{index}.parquet"
        pd.DataFrame(rows).to_parquet(path, index=False, coerce_timestamps="us")  # Spark reads no nanoseconds
        files.append(path)
    return files


def _events(spark: Any, source: Path) -> Any:
    return (
        spark.readStream.schema("k STRING, t TIMESTAMP, v BIGINT").option("maxFilesPerTrigger", 1).parquet(str(source))
    )


def aggregation(spark: Any, source: Path) -> tuple[Any, str]:
    from pyspark.sql import functions as F

    events = _events(spark, source).withWatermark("t", "1 minute")
    grouped = events.groupBy(F.window("t", "1 minute"), "k").agg(F.count(F.lit(1)).alias("n"), F.sum("v").alias("s"))
    return grouped.select("k", F.col("window.start").alias("start"), "n", "s"), "append"


def dedup(spark: Any, source: Path) -> tuple[Any, str]:
    return _events(spark, source).withWatermark("t", "1 minute").dropDuplicates(["k", "t"]), "append"


def session(spark: Any, source: Path) -> tuple[Any, str]:
    from pyspark.sql import functions as F

    events = _events(spark, source).withWatermark("t", "1 minute")
    grouped = events.groupBy(F.session_window("t", "30 seconds"), "k").agg(F.count(F.lit(1)).alias("n"))
    return grouped.select("k", F.col("session_window.start").alias("start"), "n"), "append"


def join(spark: Any, source: Path) -> tuple[Any, str]:
    from pyspark.sql import functions as F

    left = _events(spark, source).selectExpr("k AS lk", "t AS lt", "v AS lv").withWatermark("lt", "1 minute")
    right = _events(spark, source).selectExpr("k AS rk", "t AS rt").withWatermark("rt", "1 minute")
    condition = F.expr("lk = rk AND rt BETWEEN lt AND lt + INTERVAL 30 SECONDS")
    return left.join(right, condition).select("lk", "lt", "rt"), "append"


def _count(key: tuple[Any, ...], frames: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
    total = (state.get[0] if state.exists else 0) + sum(len(f) for f in frames)
    state.update((total,))
    yield pd.DataFrame({"k": [key[0]], "n": [total]})


def apply_in_pandas_with_state(spark: Any, source: Path) -> tuple[Any, str]:
    from pyspark.sql.streaming.state import GroupStateTimeout

    grouped = _events(spark, source).groupBy("k")
    timeout = GroupStateTimeout.NoTimeout
    return grouped.applyInPandasWithState(_count, "k STRING, n LONG", "n LONG", "update", timeout), "update"


def transform_with_state(spark: Any, source: Path) -> tuple[Any, str]:
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor
    from pyspark.sql.types import LongType, StructField, StructType

    class Count(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.count = handle.getValueState("count", StructType([StructField("n", LongType())]))

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[pd.DataFrame]:
            total = (self.count.get()[0] if self.count.exists() else 0) + sum(len(f) for f in rows)
            self.count.update((total,))
            yield pd.DataFrame({"k": [key[0]], "n": [total]})

        def close(self) -> None:
            pass

    grouped = _events(spark, source).groupBy("k")
    return grouped.transformWithStateInPandas(Count(), "k STRING, n LONG", "Update", "None"), "update"


OPERATORS: dict[str, Callable[[Any, Path], tuple[Any, str]]] = {
    "aggregation": aggregation,
    "dedup": dedup,
    "session": session,
    "join": join,
    "apply_in_pandas_with_state": apply_in_pandas_with_state,
    "transform_with_state": transform_with_state,
}


def run_query(spark: Any, operator: str, provider: str, source: Path, checkpoint: Path, out: Path) -> None:
    """The case's query over what the source holds now, available-now; each batch's rows to out/batch=<id>."""
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", provider)
    frame, mode = OPERATORS[operator](spark, source)

    def write(batch: Any, batch_id: int) -> None:
        batch.write.mode("overwrite").parquet(str(out / f"batch={batch_id}"))

    query = (
        frame.writeStream.foreachBatch(write)
        .outputMode(mode)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))


def output(*folders: Path) -> pd.DataFrame:
    """Every row the runs wrote, sorted (for update-mode operators: each key's final row)."""
    frames = [pd.read_parquet(p) for folder in folders if folder.exists() for p in sorted(folder.glob("batch=*"))]
    frame = pd.concat([f for f in frames if len(f)], ignore_index=True)
    if "n" in frame.columns and list(frame.columns) == ["k", "n"]:
        frame = frame.groupby("k", as_index=False)["n"].max()
    return frame.sort_values(list(frame.columns)).reset_index(drop=True)


def pandas_oracle(operator: str, files: list[Path]) -> pd.DataFrame | None:
    """An independent computation where one is simple: the aggregation and the deduplication (no late events)."""
    events = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
    watermark = events["t"].max() - timedelta(minutes=1)
    if operator == "dedup":
        return events.drop_duplicates(["k", "t"]).sort_values(["k", "t", "v"]).reset_index(drop=True)
    if operator == "aggregation":
        events["start"] = events["t"].dt.floor("1min")
        grouped = events.groupby(["k", "start"], as_index=False).agg(n=("v", "size"), s=("v", "sum"))
        final = grouped[grouped["start"] + timedelta(minutes=1) <= watermark]
        return final.sort_values(["k", "start", "n", "s"]).reset_index(drop=True)
    return None


def _same(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    if list(a.columns) != list(b.columns) or len(a) != len(b):
        return False
    a, b = a.reset_index(drop=True), b.reset_index(drop=True)
    for column in a.columns:
        left, right = a[column], b[column]
        if pd.api.types.is_datetime64_any_dtype(left):
            left, right = pd.to_datetime(left, utc=True), pd.to_datetime(right, utc=True)
        if not (left.astype(str).to_numpy() == right.astype(str).to_numpy()).all():
            return False
    return True


def spark_repartition(spark: Any, checkpoint: Path) -> tuple[float, str | None]:
    started = time.perf_counter()
    try:
        spark._streamingCheckpointManager.repartition(str(checkpoint), NEW)
    except Exception as exc:  # Spark's refusal: keep its error class
        text = str(exc)
        reason = next((w for w in text.replace("]", " ").replace("[", " ").split() if "REPARTITION" in w), text[:200])
        return time.perf_counter() - started, reason
    return time.perf_counter() - started, None


def tidemark_repartition(checkpoint: Path, engine: str) -> tuple[float, str | None]:
    from tidemark.errors import TidemarkError
    from tidemark.evolve.repartition import Engine, repartition_checkpoint

    started = time.perf_counter()
    try:
        repartition_checkpoint(str(checkpoint), NEW, apply=True, engine=Engine(engine))
    except TidemarkError as exc:
        return time.perf_counter() - started, str(exc)[:300]
    return time.perf_counter() - started, None


def run_case(spark: Any, root: Path, operator: str, provider: str, keys: int) -> dict[str, Any]:
    name = f"{operator}-{'rocksdb' if provider == ROCKSDB else 'hdfs'}"
    work = root / name
    shutil.rmtree(work, ignore_errors=True)
    files = write_source(work / "all", keys)
    source = work / "source"
    source.mkdir()
    for file in files[:BEFORE]:
        shutil.copy2(file, source / file.name)
    started = time.perf_counter()
    run_query(spark, operator, provider, source, work / "base", work / "out-base")
    result: dict[str, Any] = {"case": name, "keys": keys, "build_s": round(time.perf_counter() - started, 1)}
    # A: untouched; B: Spark's own; C: tidemark's own writer; D: tidemark with Spark's engine (copy, Spark's,
    # verify, swap), on RocksDB only (tidemark's auto choice elsewhere is its own writer, which C measures).
    copies = {"spark": "B", "tidemark": "C", **({"tidemark_spark_engine": "D"} if provider == ROCKSDB else {})}
    for copy in ["A", *copies.values()]:
        shutil.copytree(work / "base", work / copy)
    # Rotate which goes first, so none always runs on the warmest JVM.
    order = list(copies)
    shift = sum(map(ord, name)) % len(order)
    order = order[shift:] + order[:shift]
    refusals: dict[str, str | None] = {}
    for who in order:
        if who == "spark":
            seconds, refusal = spark_repartition(spark, work / copies[who])
        else:
            engine = "tidemark" if who == "tidemark" else "spark"
            seconds, refusal = tidemark_repartition(work / copies[who], engine)
        result[f"{who}_s"] = round(seconds, 2)
        refusals[who] = refusal
        result[f"{who}_refused"] = refusal
    for file in files[BEFORE:]:
        shutil.copy2(file, source / file.name)
    run_query(spark, operator, provider, source, work / "A", work / "out-A")
    reference = output(work / "out-base", work / "out-A")
    oracle = pandas_oracle(operator, files)
    if oracle is not None:
        result["reference_equals_pandas"] = _same(reference, oracle)
    for who, copy in copies.items():
        if refusals[who] is None:
            run_query(spark, operator, provider, source, work / copy, work / f"out-{copy}")
            result[f"{who}_equals_reference"] = _same(output(work / "out-base", work / f"out-{copy}"), reference)
    result["rows"] = len(reference)
    if not os.environ.get("KEEP"):
        shutil.rmtree(work, ignore_errors=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--keys", type=int, default=200)
    parser.add_argument("--cases", nargs="*", help="operator-provider names, e.g. aggregation-rocksdb")
    args = parser.parse_args()
    import pyspark

    spark = _session()
    print(json.dumps({"spark": pyspark.__version__, "python": sys.version.split()[0]}), flush=True)
    for operator in OPERATORS:
        for provider in (HDFS, ROCKSDB):
            name = f"{operator}-{'rocksdb' if provider == ROCKSDB else 'hdfs'}"
            if operator == "transform_with_state" and provider == HDFS:
                continue  # transformWithState needs RocksDB
            if args.cases and name not in args.cases:
                continue
            try:
                print(json.dumps(run_case(spark, args.dir, operator, provider, args.keys), default=str), flush=True)
            except Exception as exc:  # one broken case must not hide the others
                print(json.dumps({"case": name, "error": str(exc)[:400]}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
