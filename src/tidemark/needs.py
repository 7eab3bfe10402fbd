"""What a pipeline config asks of Spark, for the one route to a session (spark.environment.spark_session).

Its locations (credentials and cloud connectors), its source's and sink's jars and settings, the Spark features
its state uses. Above sinks/ and sources/ in the layering: each declares its own needs (sinks/base.py,
sources/base.py), this asks them.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from tidemark.config import AggregationKind, StateStoreKind, TidemarkConfig
from tidemark.connect import endpoint, mode
from tidemark.sinks import Sink, sink_of
from tidemark.sources import source_of
from tidemark.spark.artifacts import JarFeature
from tidemark.spark.environment import SessionNeeds, spark_session, start_settings, storage_conf
from tidemark.spark.jars import Progress
from tidemark.spark.lines import Feature, require, require_python

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

EXTENSIONS_KEY = "spark.sql.extensions"


def locations(config: TidemarkConfig, sink: Sink | None = None) -> list[str]:
    """Every location a pipeline's Spark reads or writes (the sink's as its connector names them: a catalog's
    warehouse, which `[sink] path` does not name); sink: the config's, when the caller has it already."""
    found = [config.checkpoint.location, config.quarantine.path, config.monitor_dir]
    sink_places = (sink or sink_of(config)).spark_locations()
    found += [*sink_places, *([config.source.path] if config.source.path else [])]
    return found


def jar_features(config: TidemarkConfig) -> set[JarFeature]:
    """The jar groups a pipeline needs: the Kafka connector for a Kafka source, its sink's (Delta), Hadoop's cloud
    connectors."""
    return needs_of(config).jar_groups


def spark_features(config: TidemarkConfig) -> set[Feature]:
    """The Spark features a pipeline config uses (each must be in the installed Spark)."""
    wanted: set[Feature] = set()
    if config.aggregation.kind is AggregationKind.CUSTOM:
        wanted.add(Feature.TRANSFORM_WITH_STATE_PANDAS)
    if config.checkpoint.state_store is StateStoreKind.ROCKSDB:
        if config.checkpoint.changelog:
            wanted.add(Feature.CHANGELOG_CHECKPOINTING)
        if config.checkpoint.format_version == 2:
            wanted.add(Feature.CHECKPOINT_FORMAT_V2)
    return wanted


def require_features(config: TidemarkConfig) -> None:
    """One line naming the Spark that has it, for the first feature of the config the installed Spark lacks."""
    require_python()
    for feature in sorted(spark_features(config)):
        require(feature)


def spark_mode(config: TidemarkConfig) -> str:
    """How the pipeline runs Spark, for a first line: its local master, or 'Spark Connect sc://host:port'."""
    return mode(endpoint(config.spark.remote), config.spark.master)


def pipeline_conf(config: TidemarkConfig) -> dict[str, str]:
    """Every setting the pipeline's session needs but its jars: the config's, and access to its locations."""
    return storage_conf(locations(config), config.spark_conf())


def needs_of(
    config: TidemarkConfig,
    *,
    extra: Mapping[str, str] | None = None,
    master: str | None = None,
    purpose: str = "",
    helper: bool = True,
) -> SessionNeeds:
    """What a pipeline config asks of Spark (extra: the command's own settings, which win over the config's)."""
    sink, source = sink_of(config), source_of(config)
    # The source's and the sink's jars (Kafka's connector, Delta); the locations' cloud connectors come later.
    return SessionNeeds(
        master=master or config.spark.master,
        remote=endpoint(config.spark.remote),
        app_name=f"tidemark-{config.pipeline.name}{'-' + purpose if purpose else ''}",
        settings=_under(sink.spark_settings(), {**config.spark_conf(), **(extra or {})}),
        locations=tuple(locations(config, sink)),
        jars=source.jar_groups | sink.jar_groups,
        helper=helper and source.helper,
        features=frozenset(spark_features(config)),
    )


def session_conf(
    config: TidemarkConfig,
    *,
    offline: bool = False,
    progress: Progress | None = None,
    hint: str = "tidemark jars fetch CONFIG",
) -> dict[str, str]:
    """Every setting the pipeline's session starts with: the config's, its storage access, spark.jars."""
    return start_settings(needs_of(config), offline=offline, progress=progress, hint=hint)


def pipeline_session(config: TidemarkConfig, spark: SparkSession | None = None) -> AbstractContextManager[SparkSession]:
    """The pipeline's session (the given one, the active one, or a new one) with its settings for the duration."""
    return spark_session(needs_of(config), spark)


def kafka_session(config: TidemarkConfig) -> AbstractContextManager[SparkSession]:
    """A small local session with the Kafka client on its classpath, for tools that ask a broker (inspect); an
    active session is used as it is (its classpath too), with these settings for the duration only."""
    small = {"spark.driver.memory": "512m", "spark.sql.shuffle.partitions": "1"}
    return spark_session(needs_of(config, extra=small, master="local[1]", purpose="inspect", helper=False))


def _under(derived: Mapping[str, str], explicit: Mapping[str, str]) -> dict[str, str]:
    """explicit settings over derived ones; SQL extensions both asked for are both kept."""
    merged = {**derived, **explicit}
    wanted, given = derived.get(EXTENSIONS_KEY), explicit.get(EXTENSIONS_KEY)
    if wanted and given and wanted not in [e.strip() for e in given.split(",")]:
        merged[EXTENSIONS_KEY] = f"{given},{wanted}"
    return merged
