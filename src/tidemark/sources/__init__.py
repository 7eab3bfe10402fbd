"""Sources: where a pipeline reads its events, behind one contract (sources/base.py) and optional capabilities
(sources/capabilities.py), one connector per family (files/, kafka/, rate.py). The registry: `source_of`."""

from __future__ import annotations

from tidemark.config import SourceFormat, TidemarkConfig
from tidemark.sources.base import (
    CORRUPT_COLUMN,
    EPOCH,
    SOURCE_FILE_COLUMN,
    BatchInput,
    RawStream,
    ReplayStart,
    Source,
    SourcePosition,
    SourceStart,
    event_time_expression,
    parse_schema,
)
from tidemark.sources.capabilities import CatchesUp, Replayable, ReportsLag
from tidemark.sources.catchup import CatchUpContext, CatchUpPlan
from tidemark.sources.files import FilePosition, FileSource
from tidemark.sources.kafka import KafkaSource
from tidemark.sources.rate import RateSource

SOURCES: dict[SourceFormat, type[Source]] = {f: s for s in (FileSource, KafkaSource, RateSource) for f in s.formats}


def source_of(config: TidemarkConfig) -> Source:
    """The config's source."""
    return SOURCES[config.source.format](config)


__all__ = [
    "CORRUPT_COLUMN",
    "EPOCH",
    "SOURCES",
    "SOURCE_FILE_COLUMN",
    "BatchInput",
    "CatchUpContext",
    "CatchUpPlan",
    "CatchesUp",
    "FilePosition",
    "FileSource",
    "KafkaSource",
    "RateSource",
    "RawStream",
    "ReplayStart",
    "Replayable",
    "ReportsLag",
    "Source",
    "SourcePosition",
    "SourceStart",
    "event_time_expression",
    "parse_schema",
    "source_of",
]
