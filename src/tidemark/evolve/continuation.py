"""Can the installed Spark continue a checkpoint? What the checkpoint uses that only some Spark lines read.

Spark continues a checkpoint an older Spark wrote: a 3.5 checkpoint runs on 4.x (it has no operator metadata,
which 4.x writes from its first batch on). A checkpoint that uses something the installed Spark lacks cannot be
continued: checkpoint format v2 (commits that name each state file's unique id) and transformWithState's state
need Spark 4.0; the offset log v2 (sources named) and join state format 4 need Spark 4.2 (4.1 fails the restart
with INVALID_LOG_VERSION.MAX_SUPPORTED_VERSION on the first). A checkpoint a newer Spark wrote, without any of them,
is not something Spark promises to read; tidemark's tests continued window aggregations (HDFS-backed and RocksDB
with changelog) from Spark 4.1 on 3.5 with the right output, so it is reported, not refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidemark.formats import MERGE_OPERATOR_KEY, Checkpoint, log_features
from tidemark.spark.lines import Feature, first_line_with, installed_version, lacking
from tidemark.statestore.metadata import parse_operator_properties

FORMAT_VERSION = "spark.sql.streaming.stateStore.checkpointFormatVersion"
# What a checkpoint uses that only the Spark lines offering the feature can read.
_BLOCKING = (
    Feature.CHECKPOINT_FORMAT_V2,
    Feature.TRANSFORM_WITH_STATE_PANDAS,
    Feature.OFFSET_LOG_V2,
    Feature.COMMIT_LOG_V3,
    Feature.MERGE_OPERATOR_V2,
    Feature.JOIN_STATE_V4,
)
JOIN_FORMAT = "spark.sql.streaming.join.stateFormatVersion"


@dataclass(frozen=True)
class Continuation:
    """Whether the installed Spark can continue a checkpoint, and why not."""

    spark_version: str
    written_by: str  # e.g. "Spark 4.0 or newer (state/0/_metadata)", "a Spark before 4.0 (no operator metadata)"
    uses: tuple[tuple[Feature, str], ...]  # what the checkpoint uses, and where that shows
    missing: tuple[str, ...]  # one line per feature the installed Spark lacks

    @property
    def ok(self) -> bool:
        """True when the installed Spark can continue the checkpoint."""
        return not self.missing


def checkpoint_uses(checkpoint: Checkpoint) -> list[tuple[Feature, str]]:
    """The Spark features the checkpoint uses, each with the file that shows it."""
    found: list[tuple[Feature, str]] = []
    batch = checkpoint.latest_committed_batch()
    commit = checkpoint.commit(batch)
    if commit.checkpoint_format == 2:
        shows = "is a v2 commit" if commit.log_version == 2 else "names its state files by unique id"
        found.append((Feature.CHECKPOINT_FORMAT_V2, f"commits/{batch} {shows}"))
    elif checkpoint.offset(batch).conf.get(FORMAT_VERSION) == "2":
        found.append((Feature.CHECKPOINT_FORMAT_V2, f"offsets/{batch} records {FORMAT_VERSION} = 2"))
    found += log_features(checkpoint)
    # A restart reads the newest offsets entry (it may be a batch planned but not committed).
    planned = max(checkpoint.offset_batches(), default=batch)
    try:
        offsets = checkpoint.offset(planned)
    except ValueError:  # an unreadable entry: inspect's findings say what is wrong with it
        offsets = None
    if offsets is not None and offsets.conf.get(JOIN_FORMAT) == "4" and checkpoint.operator_ids():
        found.append((Feature.JOIN_STATE_V4, f"offsets/{planned} records {JOIN_FORMAT} = 4"))
    for op in checkpoint.operator_ids():
        metadata = checkpoint.operator_metadata(op)
        if metadata is None:
            continue
        found.append((Feature.OPERATOR_METADATA, f"state/{op}/_metadata"))
        if metadata.name and "transformWithState" in metadata.name:
            found.append((Feature.TRANSFORM_WITH_STATE_PANDAS, f"operator {op} is {metadata.name}"))
            merge = offsets.conf.get(MERGE_OPERATOR_KEY, "1") if offsets is not None else "1"
            _, variables, _ = parse_operator_properties(metadata.properties)
            if merge != "1" and any(v.kind == "ListState" for v in variables):
                where = f"operator {op}'s list state, with offsets/{planned} recording {MERGE_OPERATOR_KEY} = {merge}"
                found.append((Feature.MERGE_OPERATOR_V2, where))
    return found


def continuation(checkpoint: Checkpoint, spark_version: str | None = None) -> Continuation:
    """Can that Spark (default: the installed one) continue the checkpoint? Each reason it cannot, in one line."""
    version = spark_version or installed_version()
    uses = checkpoint_uses(checkpoint)
    metadata = [where for feature, where in uses if feature is Feature.OPERATOR_METADATA]
    first = first_line_with(Feature.OPERATOR_METADATA)
    if metadata:
        written_by = f"Spark {first} or newer ({metadata[0]})"
    elif checkpoint.operator_ids():
        written_by = f"a Spark before {first} (no operator metadata)"
    else:
        written_by = "any Spark (no stateful operator)"
    missing = []
    for feature, where in uses:
        problem = lacking(feature, version) if feature in _BLOCKING else None
        if problem is not None:
            missing.append(f"the checkpoint uses {feature} ({where}): {problem}")
    return Continuation(version, written_by, tuple(uses), tuple(dict.fromkeys(missing)))
