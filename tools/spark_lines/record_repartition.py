"""Record a checkpoint that went through Spark's offline state repartition (4.2+), by hand, not by pytest.

    $(python3 tools/spark_lines/env.py 4.2) tools/spark_lines/record_repartition.py

Writes tests/fixtures/spark42_repartition/{checkpoint,out}: the corpus's RocksDB window query (changelog on, 2 shuffle
partitions) writing Parquet for three files, `spark._streamingCheckpointManager.repartition(checkpoint, 4)`
(batch 3: Spark's repartition batch), then one more file on the 4 partitions (batch 4). Plain pyspark.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import record_corpus as rc

TARGET = Path("tests/fixtures/spark42_repartition")


def main() -> None:
    case = next(c for c in rc.CASES if c.name == "rocksdb_changelog_window")
    spark = rc.build_session(case)
    shutil.rmtree(TARGET, ignore_errors=True)
    build, mode = rc.QUERIES[case.query]
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch) / "input"

        def run() -> None:
            frame = spark.readStream.schema(rc.SCHEMA).option("maxFilesPerTrigger", 1).json(str(source))
            writer = build(frame).writeStream.format("parquet").option("path", str(TARGET / "out"))
            writer = writer.outputMode(mode).option("checkpointLocation", str(TARGET / "checkpoint"))
            writer.trigger(availableNow=True).start().awaitTermination()

        rc.write_input(source, 3)
        run()
        spark._streamingCheckpointManager.repartition(str(TARGET / "checkpoint"), 4)
        rc.write_input(source, 1, first=3)
        run()
    spark.stop()
    print(f"  -> {TARGET} (Spark {spark.version})")


if __name__ == "__main__":
    main()
