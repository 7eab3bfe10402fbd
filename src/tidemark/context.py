"""A pipeline's context, resolved once per command: its config, its sink, its source, and the locations a tool
may touch (the checkpoint, the sink, the quarantine and the archive beside the sink).

A command builds one `PipelineContext` at its start and hands it down; nothing below asks the registries
(`sink_of`, `source_of`) or resolves the locations again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from tidemark.compat import UTC
from tidemark.config import TidemarkConfig
from tidemark.errors import InputError, UsageError
from tidemark.sinks import Sink, Tool, sink_of
from tidemark.sources import Source, source_of
from tidemark.storage import Location, parse_location


@dataclass(frozen=True)
class PipelineLocations:
    """The locations of a pipeline recovery may touch, and the archive beside the sink."""

    checkpoint: Location
    sink: Location
    quarantine: Location
    archive_base: Location

    def archive_for(self, now: datetime | None = None) -> Location:
        """A new dated archive folder (not created yet)."""
        when = now or datetime.now(tz=UTC)
        return self.archive_base.join(f"{when:%Y%m%dT%H%M%S%fZ}")

    @property
    def roots(self) -> dict[str, Location]:
        """The named roots moves start from or land in."""
        return {
            "checkpoint": self.checkpoint,
            "sink": self.sink,
            "quarantine": self.quarantine,
            "archive": self.archive_base,
        }


def _inside(path: Location, folder: Location) -> bool:
    return path.relative_to(folder) is not None


@dataclass(frozen=True)
class PipelineContext:
    """A config with its sink and source, built once; its locations resolved once per tool that asks."""

    config: TidemarkConfig
    sink: Sink
    source: Source
    _located: dict[Tool, PipelineLocations] = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def of(cls, config: TidemarkConfig) -> PipelineContext:
        """The config's context: its sink and source from the registries."""
        return cls(config, sink_of(config), source_of(config))

    def locations(self, tool: Tool = Tool.RECOVER) -> PipelineLocations:
        """The checkpoint, sink, quarantine and archive; refuses a sink or a layout the tool cannot handle."""
        found = self._located.get(tool)
        if found is None:
            found = self._located[tool] = self._resolve(tool)
        return found

    def _resolve(self, tool: Tool) -> PipelineLocations:
        self.sink.refuse(tool)
        unknown = self.sink.unresolved()
        if unknown is not None:
            raise InputError(unknown)
        sink = parse_location(self.sink.path or "")
        checkpoint = parse_location(self.config.checkpoint.location)
        quarantine = parse_location(self.config.quarantine.path)
        archive = self.sink.archive_location(checkpoint)
        if _inside(sink, checkpoint) or _inside(checkpoint, sink):
            msg = f"the sink {sink} and the checkpoint {checkpoint} must not contain one another for recovery"
            raise UsageError(msg)
        if _inside(archive, checkpoint):
            msg = f"the archive {archive} would land inside the checkpoint {checkpoint}: move the sink elsewhere"
            raise UsageError(msg)
        return PipelineLocations(checkpoint, sink, quarantine, archive)
