"""Read two checkpoints' state with Spark's own `statestore` reader and show they hold the same rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tidemark.errors import CheckpointError
from tidemark.state.metadata import list_stores
from tidemark.state.reader import ReadTarget, StateSource, read_state, run_action, targets_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


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


def _rows(frame: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    # Rows as JSON text, so structs, arrays and maps compare by value; partition_id is what changed.
    columns = [c for c in frame.columns if c != "partition_id"]
    return frame.select(F.to_json(F.struct(*columns)).alias("row"))


def compare_target(
    spark: SparkSession, before: StateSource, after: StateSource, target: ReadTarget, batch: int
) -> TargetComparison:
    """Rows of one target at one batch in both checkpoints, and those on one side only (duplicates counted)."""
    old = _rows(read_state(spark, before, target, batch))
    new = _rows(read_state(spark, after, target, batch))
    old_count = int(run_action(old.count, before, target, batch))
    new_count = int(run_action(new.count, after, target, batch))
    only_old = int(run_action(old.exceptAll(new).count, before, target, batch))
    only_new = int(run_action(new.exceptAll(old).count, after, target, batch))
    return TargetComparison(target.operator_id, target.label, old_count, new_count, only_old, only_new)


def metadata_partitions(spark: SparkSession, source: StateSource) -> dict[int, int]:
    """The partition count Spark's `state-metadata` reader reports per operator."""
    rows = spark.read.format("state-metadata").load(str(source.root)).collect()
    return {int(r["operatorId"]): int(r["numPartitions"]) for r in rows}


def compare_state(spark: SparkSession, before: StateSource, after: StateSource, batch: int) -> StateComparison:
    """Compare every store, transformWithState variable and timer set of two checkpoints at one batch."""
    comparisons = []
    for store in list_stores(spark, before):
        for target in targets_of(store):
            comparisons.append(compare_target(spark, before, after, target, batch))
    if not comparisons and list_stores(spark, after):
        msg = f"{after.uri} holds state that {before.uri} does not: refusing to treat it as a rewrite"
        raise CheckpointError(msg)
    return StateComparison(batch, tuple(comparisons), metadata_partitions(spark, after))
