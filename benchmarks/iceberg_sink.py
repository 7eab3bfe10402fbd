"""tidemark into Iceberg against the same query hand-written with Spark's own Iceberg sink, fresh processes.

Run by hand (issue 56):

    .venv/bin/python benchmarks/iceberg_sink.py prepare DIR [--events 500000 --files 20 --keys 2000]
    .venv/bin/python benchmarks/iceberg_sink.py compare DIR [--rounds 5]

`prepare` writes DIR/landing (the events), DIR/tidemark.toml (an Iceberg sink in a Hadoop catalog) and DIR/job.py:
the hand-written job a careful user writes with the same settings: Iceberg's runtime jar (the same files tidemark's
lock resolves), its SQL extensions and a Hadoop catalog, local[2], the same shuffle partitions, RocksDB with
changelog, 4 files a trigger, available-now, the same windows and output columns, a format-2 table partitioned by
the window start created before the query, and `writeStream.format("iceberg").toTable(...)`. Spark's Iceberg sink
keeps the query id and epoch in the snapshot summary; tidemark's `foreachBatch` writes its own transaction there
(sinks/iceberg/sink.py) and checks the table at a query's first batch.

`compare` runs `tidemark run CONFIG` and `python job.py` interleaved A B A B (after one warm-up pair), each a fresh
process writing a fresh warehouse, and times the whole process (interpreter, imports, JVM, session, query, stop).
Round 1's two tables (and every round's with --proof) are read back with pyiceberg from their newest metadata
file and must hold the same rows. Printed: min / median / max of each and of the speed ratio job / tidemark
(>= 0.95: tidemark at least 95 % of the hand-written job's throughput).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from fresh_process import SCHEMA, _timed, spread  # noqa: E402  (the fresh-process harness of issue 59)

TABLE = "lake.clicks"

JOB = '''"""The hand-written streaming job into Iceberg: Spark's own Iceberg sink, tidemark's settings."""
import sys
from pyspark.sql import SparkSession, functions as F
out = sys.argv[1]
spark = (
    SparkSession.builder.master("local[2]").appName("job")
    .config("spark.jars", "{jars}")
    .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
    .config("spark.sql.catalog.c", "org.apache.iceberg.spark.SparkCatalog")
    .config("spark.sql.catalog.c.type", "hadoop")
    .config("spark.sql.catalog.c.warehouse", out + "/warehouse")
    .config("spark.sql.shuffle.partitions", "{partitions}")
    .config("spark.sql.session.timeZone", "UTC")
    .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
    .config("spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
    .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
    .config("spark.sql.streaming.minBatchesToRetain", "20")
    .getOrCreate()
)
events = (
    spark.readStream.schema("{schema}").option("maxFilesPerTrigger", {limit}).json("{landing}")
    .withColumn("ts", F.to_timestamp("ts"))
    .where(F.col("ts").isNotNull() & F.col("user").isNotNull())
    .withWatermark("ts", "10 minutes")
)
windows = events.groupBy("user", F.window("ts", "15 minutes")).agg(
    F.min("ts").alias("firstEventTime"), F.max("ts").alias("lastEventTime"),
    F.count(F.lit(1)).alias("count"), F.sum("value").alias("value_sum"),
)
output = windows.select("user", F.col("window.start").alias("windowStart"), F.col("window.end").alias("windowEnd"),
                        "firstEventTime", "lastEventTime", "count", "value_sum")
columns = ", ".join(f"`{{f.name}}` {{f.dataType.simpleString()}}" for f in output.schema.fields)
spark.sql("CREATE NAMESPACE IF NOT EXISTS c.lake")
spark.sql(f"CREATE TABLE IF NOT EXISTS c.{table} ({{columns}}) USING iceberg PARTITIONED BY (windowStart) "
          "TBLPROPERTIES ('format-version' = '2')")
query = (
    output.writeStream.format("iceberg").outputMode("append")
    .option("checkpointLocation", out + "/checkpoint").trigger(availableNow=True).toTable("c.{table}")
)
query.awaitTermination()
spark.stop()
'''


def prepare(args: argparse.Namespace) -> None:
    """Generate the events and write tidemark's config and the hand-written job."""
    from tests.helpers import write_config

    from tidemark.pipeline.generate import generate_events
    from tidemark.spark.artifacts import JarFeature
    from tidemark.spark.jars import fetch

    work = Path(args.dir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    landing = work / "landing"
    shutil.rmtree(landing, ignore_errors=True)
    generate_events(landing, args.events, args.keys, args.files, seed=1, late_fraction=0.001, span=timedelta(hours=6))
    write_config(
        work,
        pipeline={"name": "fresh-iceberg"},
        spark={"shuffle_partitions": args.partitions},
        source={"path": str(landing), "max_files_per_trigger": args.files_per_trigger},
        sink={
            "format": "iceberg",
            "path": None,
            "table": TABLE,
            "catalog": {"type": "hadoop", "warehouse": "@OUT@/warehouse"},
        },
        checkpoint={"location": "@OUT@/checkpoint"},
        quarantine={"path": "@OUT@/quarantine"},
        aggregation={"extra": [{"function": "sum", "column": "value", "name": "value_sum"}]},
    )
    jars = ",".join(str(p) for p in fetch([JarFeature.ICEBERG]).paths)
    fields = {
        "jars": jars,
        "partitions": args.partitions,
        "schema": SCHEMA,
        "landing": str(landing),
        "limit": args.files_per_trigger,
        "table": TABLE,
    }
    (work / "job.py").write_text(JOB.format(**fields), encoding="utf-8")
    print(f"prepared {work}: {args.events:,} events, {args.files} files, {args.keys} keys")


def _command(work: Path, which: str, out: Path) -> list[str]:
    """The command of one run writing into out (a fresh folder)."""
    out.mkdir(parents=True)
    if which == "tidemark":
        config = (work / "tidemark.toml").read_text(encoding="utf-8").replace("@OUT@", str(out))
        (out / "tidemark.toml").write_text(config, encoding="utf-8")
        return [str(Path(sys.executable).with_name("tidemark")), "run", str(out / "tidemark.toml")]
    return [sys.executable, str(work / "job.py"), str(out)]


def _rows(warehouse: Path) -> list[tuple[object, ...]]:
    """The table's rows, sorted, as pyiceberg reads them from its newest metadata file (version-hint.text)."""
    from pyiceberg.table import StaticTable

    table = warehouse / "lake" / "clicks"
    version = int((table / "metadata" / "version-hint.text").read_text(encoding="utf-8").strip())
    frame = StaticTable.from_metadata(str(table / "metadata" / f"v{version}.metadata.json")).scan().to_arrow()
    columns = ["user", "windowStart", "windowEnd", "count", "value_sum"]
    return sorted(
        (r["user"], str(r["windowStart"]), str(r["windowEnd"]), r["count"], round(r["value_sum"], 6))
        for r in frame.select(columns).to_pylist()
    )


def compare(args: argparse.Namespace) -> None:
    """A B A B ...: tidemark run vs the hand-written Iceberg job, fresh processes, pair by pair."""
    work = Path(args.dir).resolve()
    runs = work / "runs"
    shutil.rmtree(runs, ignore_errors=True)
    walls: dict[str, list[float]] = {"tidemark": [], "job": []}
    for round_number in range(args.rounds + 1):  # round 0 warms the disk cache and the JVM's class data
        order = ("tidemark", "job") if round_number % 2 == 0 else ("job", "tidemark")
        for which in order:
            out = runs / f"r{round_number}-{which}"
            wall, _ = _timed(_command(work, which, out))
            print(f"{'warm-up' if round_number == 0 else f'round {round_number}'} {which}: {wall:.1f}s", flush=True)
            if round_number:
                walls[which].append(wall)
        if round_number == 1 or (round_number and args.proof):
            mine, theirs = (_rows(runs / f"r{round_number}-{w}" / "warehouse") for w in ("tidemark", "job"))
            if mine != theirs or not mine:
                msg = f"round {round_number}: tables differ ({len(mine)} vs {len(theirs)} rows)"
                raise RuntimeError(msg)
            print(f"round {round_number}: tables equal ({len(mine):,} rows)", flush=True)
        for which in ("tidemark", "job"):
            shutil.rmtree(runs / f"r{round_number}-{which}", ignore_errors=True)
    print(f"\n{'':<10} {'wall s min / median / max':>28}")
    for which, values in walls.items():
        print(f"{which:<10} {spread(values):>28}")
    ratios = [j / t for t, j in zip(walls["tidemark"], walls["job"], strict=True)]
    print(f"\njob / tidemark (speed ratio), {args.rounds} pairs: {spread(ratios)}")
    print(f"median of the walls: {statistics.median(walls['job']) / statistics.median(walls['tidemark']):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("prepare")
    p.add_argument("dir")
    p.add_argument("--events", type=int, default=500_000)
    p.add_argument("--files", type=int, default=20)
    p.add_argument("--keys", type=int, default=2000)
    p.add_argument("--partitions", type=int, default=3)
    p.add_argument("--files-per-trigger", type=int, default=4)
    c = commands.add_parser("compare")
    c.add_argument("dir")
    c.add_argument("--rounds", type=int, default=5)
    c.add_argument("--proof", action="store_true", help="compare the tables every round, not only the first")
    args = parser.parse_args()
    {"prepare": prepare, "compare": compare}[args.command](args)


if __name__ == "__main__":
    main()
