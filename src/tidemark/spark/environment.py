"""The Spark session a pipeline config asks for: its settings, the jars its features need, its storage access.

Jars come from tidemark's pinned lock through the jar cache (spark/jars.py): fetched on first use, verified
always, put on `spark.jars` (the driver ships them to executors). A user who sets `spark.jars.packages` in
[spark.conf] manages the JVM dependencies themselves and tidemark adds none; jars listed in their own
`spark.jars` are kept. Spark's access to cloud locations comes from the credentials tidemark's own I/O takes
(spark/credentials.py). Settings given explicitly win over what tidemark derives.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from tidemark.connect import endpoint, is_connect
from tidemark.errors import EnvironmentProblem
from tidemark.session import build_session, runtime_conf
from tidemark.spark.artifacts import MARKER_CLASSES, JarFeature, check_scheme, features_for_uris, missing_class
from tidemark.spark.credentials import auth_keys, hadoop_access, redaction_conf
from tidemark.spark.jars import FetchedJars, Progress, fetch
from tidemark.spark.lines import Feature, connect_problem, require, require_python

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
JARS_KEY = "spark.jars"
PACKAGES_KEY = "spark.jars.packages"


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


@dataclass(frozen=True)
class SessionNeeds:
    """What a command asks of Spark: the one route's input (spark_session), whatever the command.

    settings are explicit (the config's own [spark] settings, then the command's): they win over what tidemark
    derives from the locations (credentials) and the jar groups.
    """

    master: str = "local[2]"
    # A Spark Connect endpoint (SPARK_REMOTE by default): the session is a client of it, no JVM in this process.
    remote: str | None = field(default_factory=endpoint)
    app_name: str = "tidemark"
    settings: Mapping[str, str] = field(default_factory=dict)
    locations: tuple[str, ...] = ()  # what Spark reads or writes: its credentials and cloud connector jars
    jars: frozenset[JarFeature] = frozenset()  # jar groups beside the locations' (the Kafka connector)
    helper: bool = False  # tidemark's JVM helper (a Kafka stream's observation carries its malformed records)
    features: frozenset[Feature] = frozenset()  # Spark features the installed line must have

    @property
    def jar_groups(self) -> set[JarFeature]:
        """Every jar group: the locations' cloud connectors and the ones asked for."""
        return features_for_uris(self.locations) | set(self.jars)


def start_settings(
    needs: SessionNeeds, *, offline: bool = False, progress: Progress | None = None, hint: str = "tidemark jars fetch"
) -> dict[str, str]:
    """Every setting a new session for these needs starts with: explicit ones, storage access, spark.jars.

    A user who sets spark.jars.packages manages the JVM dependencies: tidemark then adds none.
    """
    require_python()
    for feature in sorted(needs.features):
        require(feature)
    conf = storage_conf(needs.locations, dict(needs.settings))
    if needs.remote is not None:  # a Connect server's classpath is its own: no jar reaches it from a client
        return conf
    groups = needs.jar_groups
    if groups and PACKAGES_KEY not in conf:
        conf = with_jars(conf, fetch(groups, offline=offline, progress=progress, hint=hint))
    if needs.helper:  # after the fetch: a missing connector is the one line an offline start gives
        conf = _with_helper(conf)
    return conf


def _with_helper(conf: dict[str, str]) -> dict[str, str]:
    """conf with tidemark's JVM helper on spark.jars, where the installed Spark can use it: a Kafka stream's
    observation then carries its malformed records (pipeline/quarantine.py) instead of a second read."""
    from tidemark.spark.jvm import carries_records, session_jar

    jar = session_jar() if carries_records() else None
    return _append_jars(conf, [jar]) if jar is not None else conf


def _require_connect(side: str, version: str | None = None) -> None:
    problem = connect_problem(side, version)
    if problem is not None:
        raise EnvironmentProblem(problem)


def _active(remote: str | None) -> SparkSession | None:
    """The session this process already has for these needs: a Connect one for an endpoint, else a local one."""
    from pyspark.sql import SparkSession

    if remote is None:
        return SparkSession.getActiveSession()
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    active: Any = ConnectSession.getActiveSession()  # the same API as a local session's, by another class
    return cast("SparkSession | None", active)


def _set_by_someone(hadoop: Any, key: str) -> bool:
    """True when a Hadoop configuration has the key from somewhere but Hadoop's own defaults (core-default.xml
    sets fs.s3a.aws.credentials.provider, for one)."""
    if hadoop.get(key) is None:
        return False
    sources = hadoop.getPropertySources(key)
    return sources is None or any(str(source) != "core-default.xml" for source in sources)


def _warn_missing_jars(session: SparkSession, features: Iterable[JarFeature]) -> None:
    """One warning naming the features whose classes a borrowed local session's JVM lacks (it started without
    their jars, and cannot take them now); a cluster that brings its own build of them is not refused."""
    markers = [(feature, MARKER_CLASSES.get(feature)) for feature in sorted(features)]
    missing = [f"{f.value} ({m})" for f, m in markers if m is not None and missing_class(session, m) is not None]
    if missing:
        log.warning(
            "this running Spark session started without the jars of %s, and its classpath cannot change: reads "
            "and writes that need them fail; start it with the jars `tidemark jars list CONFIG` lists on "
            "spark.jars, or let tidemark start it",
            ", ".join(missing),
        )


@contextmanager
def spark_session(needs: SessionNeeds, spark: SparkSession | None = None) -> Iterator[SparkSession]:
    """THE route to a Spark session: every command that starts (or borrows) Spark comes through here.

    No session running: one is started with every setting of start_settings (jars fetched and verified,
    credentials, the command's settings); nothing to give back. A running one (the given one, a notebook's, a
    test process's): its classpath is what it is (jars reach a JVM only when it starts), the runtime settings and
    Spark's access to the locations are applied for the duration and its own values come back afterwards.
    Credentials the running session already has (a cluster's Spark config, a notebook's spark.conf.set) are the
    user's: tidemark adds none for those accounts. A Spark Connect endpoint (needs.remote) gets a Connect client
    session, built in the same place from the same settings (tidemark.session.build_session).
    """
    if spark is None and needs.remote is not None:
        _require_connect("this client's pyspark")
    session = spark or _active(needs.remote)
    if session is None:
        conf = start_settings(needs)
        if needs.remote is None:
            yield build_session(needs.master, conf, app_name=needs.app_name)
            return
        session = build_session(needs.master, conf, app_name=needs.app_name, remote=needs.remote)
        _require_connect("the server", session.version)
        yield session
        return
    if not is_connect(session):
        _warn_missing_jars(session, needs.jar_groups)
    hadoop = None if is_connect(session) else session.sparkContext._jsc.hadoopConfiguration()
    present = [
        k
        for k in auth_keys(needs.locations)
        if (hadoop is not None and _set_by_someone(hadoop, k)) or session.conf.get(k, None) is not None
    ]
    with runtime_conf(session, storage_conf(needs.locations, dict(needs.settings), present)):
        yield session
