"""Read two checkpoints' state with Spark's own `statestore` reader and show they hold the same rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tidemark.errors import CheckpointError
from tidemark.statestore.metadata import list_stores
from tidemark.statestore.reader import ReadTarget, StateSource, read_state, run_action, targets_of

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession


@dataclass(frozen=True)
class TargetComparison:
    """One store, state variable or timer set: rows on each side and rows found on one side only."""

    operator_id: int
    target: str
    rows_before: int
    rows_after: int
    only_before: int
    only_after: int

    @property
    def same(self) -> bool:
        """True when both sides hold exactly the same (key, value) rows, duplicates counted."""
        return self.only_before == 0 and self.only_after == 0 and self.rows_before == self.rows_after


@dataclass(frozen=True)
class StateComparison:
    """Every readable target of a checkpoint compared with its rewrite, and the partitions Spark reports."""

    batch: int
    targets: tuple[TargetComparison, ...]
    partitions_after: dict[int, int]  # operator id -> numPartitions from Spark's state-metadata reader

    @property
    def same(self) -> bool:
        """True when every target holds the same rows on both sides."""
        return all(t.same for t in self.targets)


def _has_map(kind: Any) -> bool:
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(kind, MapType):
        return True
    if isinstance(kind, StructType):
        return any(_has_map(f.dataType) for f in kind.fields)
    return isinstance(kind, ArrayType) and _has_map(kind.elementType)


def _comparable(frame: DataFrame) -> list[Column]:
    from pyspark.sql import functions as F

    # partition_id is what changed. Maps cannot be grouped by: rows holding one compare as JSON text.
    columns = [c for c in frame.columns if c != "partition_id"]
    if _has_map(frame.schema):
        return [F.to_json(F.struct(*columns)).alias("row")]
    return [F.col(c) for c in columns]


def _checksums(spark: SparkSession, old: DataFrame, new: DataFrame) -> dict[str, tuple[int, int, int]]:
    """Rows and two order-independent checksums (sums of two independent row hashes) of each side, in one job."""
    from pyspark.sql import functions as F

    def side(frame: DataFrame, name: str) -> DataFrame:
        columns = _comparable(frame)
        return frame.select(
            F.lit(name).alias("side"),
            F.xxhash64(*columns).cast("decimal(38,0)").alias("h1"),
            F.hash(*columns).cast("decimal(38,0)").alias("h2"),
        )

    rows = (
        side(old, "before")
        .unionByName(side(new, "after"))
        .groupBy("side")
        .agg(F.count(F.lit(1)).alias("n"), F.sum("h1").alias("h1"), F.sum("h2").alias("h2"))
        .collect()
    )
    return {str(r["side"]): (int(r["n"]), int(r["h1"]), int(r["h2"])) for r in rows}


def _exact(old: DataFrame, new: DataFrame) -> Any:
    """Both sides tagged, grouped by the whole row, and the per-row counts of each side summed (one job)."""
    from pyspark.sql import functions as F

    tagged = old.select(*_comparable(old), F.lit(1).alias("_old"), F.lit(0).alias("_new")).unionByName(
        new.select(*_comparable(new), F.lit(0).alias("_old"), F.lit(1).alias("_new"))
    )
    keys = [c for c in tagged.columns if c not in ("_old", "_new")]
    per_row = tagged.groupBy(*keys).agg(F.sum("_old").alias("o"), F.sum("_new").alias("n"))
    return per_row.agg(
        F.coalesce(F.sum("o"), F.lit(0)).alias("before"),
        F.coalesce(F.sum("n"), F.lit(0)).alias("after"),
        F.coalesce(F.sum(F.greatest(F.col("o") - F.col("n"), F.lit(0))), F.lit(0)).alias("only_before"),
        F.coalesce(F.sum(F.greatest(F.col("n") - F.col("o"), F.lit(0))), F.lit(0)).alias("only_after"),
    ).first()


def compare_target(
    spark: SparkSession,
    before: StateSource,
    after: StateSource,
    target: ReadTarget,
    batch: int,
    after_batch: int | None = None,
) -> TargetComparison:
    """Rows of one target at one batch in both checkpoints, and those on one side only (duplicates counted).

    Equal row counts and equal sums of two independent 64- and 32-bit row hashes make the two multisets equal
    but for a chance far below one in 2^64; only when they differ are the rows matched one by one (a shuffle of
    every row), to say how many are on one side only.
    """
    old = read_state(spark, before, target, batch)
    new = read_state(spark, after, target, batch if after_batch is None else after_batch)
    sums = run_action(lambda: _checksums(spark, old, new), after, target, batch)
    empty = (0, 0, 0)
    if sums.get("before", empty) == sums.get("after", empty):
        rows = sums.get("before", empty)[0]
        return TargetComparison(target.operator_id, target.label, rows, rows, 0, 0)
    row = run_action(lambda: _exact(old, new), after, target, batch)
    return TargetComparison(
        target.operator_id,
        target.label,
        int(row["before"]),
        int(row["after"]),
        int(row["only_before"]),
        int(row["only_after"]),
    )


def metadata_partitions(spark: SparkSession, source: StateSource) -> dict[int, int]:
    """The partition count Spark's `state-metadata` reader reports per operator."""
    rows = spark.read.format("state-metadata").load(str(source.root)).collect()
    return {int(r["operatorId"]): int(r["numPartitions"]) for r in rows}


def compare_state(
    spark: SparkSession, before: StateSource, after: StateSource, batch: int, after_batch: int | None = None
) -> StateComparison:
    """Compare every store, transformWithState variable and timer set of two checkpoints at one batch (in `after`:
    at after_batch, when the rewrite added a batch of its own, as Spark's offline repartition does)."""
    comparisons = []
    for store in list_stores(spark, before):
        for target in targets_of(store):
            comparisons.append(compare_target(spark, before, after, target, batch, after_batch))
    if not comparisons and list_stores(spark, after):
        msg = f"{after.uri} holds state that {before.uri} does not: refusing to treat it as a rewrite"
        raise CheckpointError(msg)
    return StateComparison(batch, tuple(comparisons), metadata_partitions(spark, after))
