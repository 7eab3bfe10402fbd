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

from tidemark.config import TidemarkConfig
from tidemark.session import build_session
from tidemark.spark.artifacts import JarFeature, check_scheme, features_for_uris
from tidemark.spark.jars import FetchedJars, Progress, fetch

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
JARS_KEY = "spark.jars"
PACKAGES_KEY = "spark.jars.packages"


def locations(config: TidemarkConfig) -> list[str]:
    """Every location a pipeline's Spark reads or writes."""
    found = [config.checkpoint.location, config.quarantine.path, config.monitor_dir]
    found += [p for p in (config.sink.path, config.source.path) if p]
    return found


def jar_features(config: TidemarkConfig) -> set[JarFeature]:
    """The jar groups a pipeline needs: the Kafka connector for a Kafka source, Hadoop's cloud connectors."""
    features = features_for_uris(locations(config))
    if config.source.is_kafka:  # Kafka, and Event Hubs through its Kafka endpoint
        features.add(JarFeature.KAFKA)
    return features


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
    settings = dict(conf or {})
    for uri in uris:
        check_scheme(uri)
    features = features_for_uris(uris)
    if features and PACKAGES_KEY not in settings:
        settings = with_jars(settings, fetch(features, progress=progress))
    return build_session("local[2]", settings)


def session_for_kafka(config: TidemarkConfig) -> SparkSession:
    """A small local session with the Kafka client on its classpath, for tools that ask a broker (inspect)."""
    settings: dict[str, str] = {"spark.driver.memory": "512m", "spark.sql.shuffle.partitions": "1"}
    conf = config.spark_conf()
    if PACKAGES_KEY in conf:  # the user manages the JVM dependencies
        settings[PACKAGES_KEY] = conf[PACKAGES_KEY]
    else:
        settings = with_jars(settings, fetch({JarFeature.KAFKA}))
    return build_session("local[1]", settings, app_name=f"tidemark-{config.pipeline.name}-inspect")
