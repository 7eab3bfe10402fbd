"""Does the sink folder on disk hold what this config writes? Checked before anything changes a sink.

A sink another job wrote (unpartitioned, partitioned by another column, other columns) would end up with files
of two schemas and windows twice; recover, run over an existing sink and audit refuse it in one line instead.
"""

from __future__ import annotations

from tidemark.config import AggregationKind, TidemarkConfig
from tidemark.errors import InputError
from tidemark.formats import Checkpoint, SinkLayout, read_sink_layout
from tidemark.pipeline.transforms import session as session_transform
from tidemark.pipeline.transforms import window as window_transform
from tidemark.sinks import sink_of
from tidemark.storage import open_storage


def expected_columns(config: TidemarkConfig) -> tuple[str, ...] | None:
    """The columns this config's query writes (partition columns included), None when code decides (custom)."""
    agg = config.aggregation
    extras = tuple(e.output_name for e in agg.extra)
    if agg.kind is AggregationKind.WINDOW:
        return (*agg.key, *window_transform.OUTPUT_COLUMNS, *extras)
    if agg.kind is AggregationKind.SESSION:
        return (*agg.key, *session_transform.OUTPUT_COLUMNS)
    return None


def _problem(config: TidemarkConfig, layout: SinkLayout) -> str | None:
    wanted = tuple(config.partition_by)
    if wanted and layout.unpartitioned:
        return (
            f"{layout.unpartitioned} of its {layout.files} data files are not in {'/'.join(wanted)}=... folders "
            f"(e.g. {layout.example}): the config says it is partitioned by {', '.join(wanted)}"
        )
    found = [layout_ for layout_ in layout.layouts if layout_ != wanted]
    if found:
        shown = ", ".join("/".join(f"{c}=..." for c in f) or "no partition folders" for f in found[:3])
        return f"its files are partitioned as {shown}; the config writes {'/'.join(wanted) or 'no partitions'}"
    if layout.schemas > 1:
        return f"its files have {layout.schemas} different column sets (read from {layout.footers_read} files)"
    expected = expected_columns(config)
    if expected is None or not layout.footers_read:  # no committed file: no columns to compare
        return None
    in_files = set(layout.columns) | set(layout.partition_columns)
    missing = [c for c in expected if c not in in_files]
    extra = sorted(in_files - set(expected))
    if missing or extra:
        parts = ([f"missing {', '.join(missing)}"] if missing else []) + (
            [f"not written by this config: {', '.join(extra)}"] if extra else []
        )
        return f"its columns differ from the config's query ({'; '.join(parts)})"
    return None


def check_sink(config: TidemarkConfig) -> tuple[SinkLayout | None, str | None]:
    """(what the sink holds, the mismatch in words or None); (None, None) without a Parquet sink or data files."""
    folder = sink_of(config).files_checked()
    if folder is None:
        return None, None
    sink = open_storage(folder)
    if not sink.exists(""):
        return None, None
    # Spark's offline repartition batch, proven by the checkpoint, is the one batch the sink log may skip.
    layout = read_sink_layout(sink, empty=Checkpoint.open(config.checkpoint.location).repartition_batches)
    return layout, _problem(config, layout)


def require_matching_sink(config: TidemarkConfig, action: str, fix: str) -> SinkLayout | None:
    """Raise a one-line InputError naming how the sink on disk differs from the config; before `action`."""
    layout, problem = check_sink(config)
    if problem is not None and layout is not None:
        msg = (
            f"{action} refused: the sink {layout.uri} was not written by this config: {problem}. "
            f"Nothing was changed; {fix}"
        )
        raise InputError(msg)
    return layout
