"""The Spark session a pipeline config asks for: its settings, the jars its features need, its storage access.

Jars come from tidemark's pinned lock through the jar cache (spark/jars.py): fetched on first use, verified
always, put on `spark.jars` (the driver ships them to executors). A user who sets `spark.jars.packages` in
[spark.conf] manages the JVM dependencies themselves and tidemark adds none; jars listed in their own
`spark.jars` are kept. Spark's access to cloud locations comes from the credentials tidemark's own I/O takes
(spark/credentials.py). Settings given explicitly win over what tidemark derives.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidemark.config import AggregationKind, StateStoreKind, TidemarkConfig
from tidemark.session import build_session, runtime_conf, session_scope
from tidemark.spark.artifacts import JarFeature, check_scheme, features_for_uris
from tidemark.spark.credentials import auth_keys, hadoop_access, redaction_conf
from tidemark.spark.jars import FetchedJars, Progress, fetch
from tidemark.spark.lines import Feature, require, require_python

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
    return _append_jars(conf, jars.paths)


def _append_jars(conf: dict[str, str], paths: Iterable[Path]) -> dict[str, str]:
    own = [j for j in conf.get(JARS_KEY, "").split(",") if j.strip()]
    added = [str(p) for p in paths if str(p) not in own]
    return {**conf, JARS_KEY: ",".join([*own, *added])} if added else conf


def storage_conf(
    uris: Iterable[str | None], explicit: dict[str, str], configured: Iterable[str] = ()
) -> dict[str, str]:
    """explicit, plus the spark.hadoop.* settings Spark needs for these locations (explicit keys win).

    configured: Hadoop keys a running session already has (its accounts are left as they are).
    """
    uris = list(uris)
    for uri in uris:
        if uri:
            check_scheme(uri)
    access = hadoop_access(uris, explicit, configured=configured)
    for line in access.sources:
        log.info("Spark's access to %s", line)  # the method and its variables, never a value
    if not access.sources:  # no cloud location: nothing to add, nothing to redact
        return explicit
    return {**access.spark_conf(), **explicit, **redaction_conf(explicit)}


def pipeline_conf(config: TidemarkConfig) -> dict[str, str]:
    """Every setting the pipeline's session needs but its jars: the config's, and access to its locations."""
    return storage_conf(locations(config), config.spark_conf())


def session_conf(
    config: TidemarkConfig,
    *,
    offline: bool = False,
    progress: Progress | None = None,
    hint: str = "tidemark jars fetch CONFIG",
) -> dict[str, str]:
    """Every setting the pipeline's session starts with: the config's, its storage access, spark.jars."""
    require_features(config)
    conf = pipeline_conf(config)
    features = jar_features(config)
    if features and PACKAGES_KEY not in conf:
        conf = with_jars(conf, fetch(features, offline=offline, progress=progress, hint=hint))
    return with_helper(config, conf)  # after the fetch: a missing connector is the one line an offline start gives


def with_helper(config: TidemarkConfig, conf: dict[str, str]) -> dict[str, str]:
    """conf with tidemark's JVM helper on spark.jars for a Kafka pipeline: its stream carries the malformed
    records in its own observation (pipeline/quarantine.py) instead of the quarantine reading the batch again."""
    from tidemark.spark.jvm import carries_records, session_jar

    jar = session_jar() if config.source.is_kafka and carries_records() else None
    return _append_jars(conf, [jar]) if jar is not None else conf


def session_for(config: TidemarkConfig, progress: Progress | None = None) -> SparkSession:
    """The session a pipeline config asks for (jars fetched and verified first when it needs any)."""
    conf = session_conf(config, progress=progress)
    return build_session(config.spark.master, conf, app_name=f"tidemark-{config.pipeline.name}")


def _set_by_someone(hadoop: Any, key: str) -> bool:
    """True when a Hadoop configuration has the key from somewhere but Hadoop's own defaults (core-default.xml
    sets fs.s3a.aws.credentials.provider, for one)."""
    if hadoop.get(key) is None:
        return False
    sources = hadoop.getPropertySources(key)
    return sources is None or any(str(source) != "core-default.xml" for source in sources)


@contextmanager
def pipeline_session(config: TidemarkConfig, spark: SparkSession | None = None) -> Iterator[SparkSession]:
    """The pipeline's session (the given one, the active one, or a new one) with its settings for the duration.

    A reused session (tests, notebooks, a recovery's replay) gets the config's settings and Spark's access to its
    locations as session settings, and its own values back afterwards.
    """
    from pyspark.sql import SparkSession

    session = spark or SparkSession.getActiveSession()
    if session is None:
        yield session_for(config)  # a new session starts with every setting: nothing to give back
        return
    # Credentials the running session already has (a cluster's Spark config, a notebook's spark.conf.set) are the
    # user's: tidemark adds none for those accounts.
    hadoop = session.sparkContext._jsc.hadoopConfiguration()
    where = locations(config)
    present = [k for k in auth_keys(where) if _set_by_someone(hadoop, k) or session.conf.get(k, None) is not None]
    with runtime_conf(session, storage_conf(where, config.spark_conf(), present)):
        yield session


@contextmanager
def kafka_session(config: TidemarkConfig) -> Iterator[SparkSession]:
    """A small local session with the Kafka client on its classpath, for tools that ask a broker (inspect); an
    active session is used as it is (its classpath too), with these settings for the duration only."""
    from pyspark.sql import SparkSession

    settings: dict[str, str] = {"spark.driver.memory": "512m", "spark.sql.shuffle.partitions": "1"}
    conf = config.spark_conf()
    if PACKAGES_KEY in conf:  # the user manages the JVM dependencies
        settings[PACKAGES_KEY] = conf[PACKAGES_KEY]
    elif SparkSession.getActiveSession() is None:  # jars reach a JVM only when it starts: none fetched for nothing
        settings = with_jars(settings, fetch({JarFeature.KAFKA}))
    with session_scope("local[1]", settings, app_name=f"tidemark-{config.pipeline.name}-inspect") as spark:
        yield spark
