"""The Spark session a pipeline config asks for: its settings, the jars its features need, its storage access.

Jars come from tidemark's pinned lock through the jar cache (spark/jars.py): fetched on first use, verified
always, put on `spark.jars` (the driver ships them to executors). A user who sets `spark.jars.packages` in
[spark.conf] manages the JVM dependencies themselves and tidemark adds none; jars listed in their own
`spark.jars` are kept. Settings given explicitly win over what tidemark derives.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from tidemark.config import AggregationKind, SourceFormat, StateStoreKind, TidemarkConfig
from tidemark.session import build_session
from tidemark.spark.artifacts import JarFeature, check_scheme, features_for_uris
from tidemark.spark.jars import FetchedJars, Progress, fetch
from tidemark.spark.lines import Feature, require, require_python

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
JARS_KEY = "spark.jars"
PACKAGES_KEY = "spark.jars.packages"
# The kinds of source that read through Spark's Kafka connector.
KAFKA_FORMATS = frozenset({SourceFormat.KAFKA})


def locations(config: TidemarkConfig) -> list[str]:
    """Every location a pipeline's Spark reads or writes."""
    found = [config.checkpoint.location, config.quarantine.path, config.monitor_dir]
    found += [p for p in (config.sink.path, config.source.path) if p]
    return found


def jar_features(config: TidemarkConfig) -> set[JarFeature]:
    """The jar groups a pipeline needs: the Kafka connector for a Kafka source, Hadoop's cloud connectors."""
    features = features_for_uris(locations(config))
    if config.source.format in KAFKA_FORMATS:
        features.add(JarFeature.KAFKA)
    return features


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


def with_jars(conf: dict[str, str], jars: FetchedJars) -> dict[str, str]:
    """conf with the fetched jars appended to spark.jars (the user's own entries first)."""
    if not jars.paths:
        return conf
    own = [j for j in conf.get(JARS_KEY, "").split(",") if j.strip()]
    return {**conf, JARS_KEY: ",".join([*own, *(str(p) for p in jars.paths if str(p) not in own)])}


def session_conf(
    config: TidemarkConfig,
    *,
    offline: bool = False,
    progress: Progress | None = None,
    hint: str = "tidemark jars fetch CONFIG",
) -> dict[str, str]:
    """Every setting the pipeline's session starts with: the config's, and spark.jars for its features."""
    require_features(config)
    conf = config.spark_conf()
    for uri in locations(config):
        check_scheme(uri)
    features = jar_features(config)
    if not features or PACKAGES_KEY in conf:
        return conf
    return with_jars(conf, fetch(features, offline=offline, progress=progress, hint=hint))


def session_for(config: TidemarkConfig, progress: Progress | None = None) -> SparkSession:
    """The session a pipeline config asks for (jars fetched and verified first when it needs any)."""
    conf = session_conf(config, progress=progress)
    return build_session(config.spark.master, conf, app_name=f"tidemark-{config.pipeline.name}")


def session_for_locations(
    uris: Iterable[str], conf: dict[str, str] | None = None, progress: Progress | None = None
) -> SparkSession:
    """A local session that can read these locations with Spark (for the checkpoint tools)."""
    require_python()
    settings = dict(conf or {})
    for uri in uris:
        check_scheme(uri)
    features = features_for_uris(uris)
    if features and PACKAGES_KEY not in settings:
        settings = with_jars(settings, fetch(features, progress=progress))
    return build_session("local[2]", settings)
