"""Check that a Spark line environment's pyspark works with its pandas, pyarrow and numpy (a quick look, no files).

    $(python3 tools/spark_lines/env.py 4.1 --python 3.13) tools/spark_lines/verify.py

Runs a scalar pandas UDF and a grouped applyInPandas on local[1] and prints one JSON line with the versions.
The stateful pandas APIs (applyInPandasWithState, transformWithStateInPandas, transformWithState) are exercised on
Python 3.11 by record_corpus.py itself, which records them.
"""

from __future__ import annotations

import json
import os
import platform
import sys

import pandas as pd  # module level: pyspark resolves the UDF's type hints ('pd.Series') in these globals


def main() -> None:
    import numpy
    import pyarrow
    import pyspark
    from pyspark.sql import SparkSession
    from pyspark.sql.functions import pandas_udf

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[1]")
        .appName("verify-spark-line")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    try:

        @pandas_udf("long")  # type: ignore[call-overload]
        def plus_one(values: pd.Series) -> pd.Series:
            return values + 1

        scalar = sorted(row[0] for row in spark.range(3).select(plus_one("id")).collect())
        grouped = spark.range(6).selectExpr("id % 2 AS g", "id").groupBy("g")
        sizes = grouped.applyInPandas(lambda frame: frame.assign(id=len(frame)), "g LONG, id LONG").collect()
        ok = scalar == [1, 2, 3] and sorted(row.id for row in sizes) == [3] * 6
    finally:
        spark.stop()
    report = {
        "python": platform.python_version(),
        "pyspark": pyspark.__version__,
        "pandas": pd.__version__,
        "pyarrow": pyarrow.__version__,
        "numpy": numpy.__version__,
        "pandas_udf_and_applyInPandas": "ok" if ok else "WRONG RESULT",
    }
    print(json.dumps(report))
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
