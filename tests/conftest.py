"""Shared fixtures: one local[2] Spark session for every integration test in the run."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Azurite, moto's S3 server and a Kafka broker, started on loopback by the tests that ask for them; the fault
# matrix's record of what each test marked @pytest.mark.reliability proved (docs/reliability.md).
pytest_plugins = ["tests.servers", "tests.kafka_broker", "tests.mariadb", "tests.reliability"]

# The JVMs the tests start in processes of their own (`tidemark run` as a user starts it, killed and restarted by
# the chaos, kill and recovery tests; the smoke runs' commands) live seconds on small data: with C1 alone (no C2
# JIT), a Delta restart takes ~13.7 s instead of ~17 s (CONTRIBUTING.md, Tests). The JIT tier changes no result. Spark's
# launcher gives SPARK_SUBMIT_OPTS to the driver JVM it starts and prints nothing; the benchmarks keep the JVM's
# default, and so does the shared session below in a run without pytest-xdist. (Under `make test`'s two workers it
# runs C1 too: the workers inherit the option this module sets in pytest's main process. That is how CI's times were
# measured; the shared session's tier has not been measured on its own.)
QUICK_JVM = "-XX:TieredStopAtLevel=1"
_SUBMIT_OPTS = os.environ.get("SPARK_SUBMIT_OPTS", "")
if QUICK_JVM not in _SUBMIT_OPTS:
    os.environ["SPARK_SUBMIT_OPTS"] = f"{_SUBMIT_OPTS} {QUICK_JVM}".strip()


def pytest_configure(config: pytest.Config) -> None:
    """Every driver JVM of the run maps a class archive of the Spark installation's classes (tests/jvm_archive.py:
    written on the first run, then cached outside the clone): each start then takes ~4.8 s less (BENCHMARKS.md).
    Decided once, before pytest-xdist starts its workers, which inherit the environment; a run of tests/unit/ alone
    (no JVM) writes none. TIDEMARK_JVM_ARCHIVE=off: the JVMs start without one."""
    global _SUBMIT_OPTS
    if os.environ.get("PYTEST_XDIST_WORKER") or os.environ.get("TIDEMARK_JVM_ARCHIVE") == "off":
        return
    if "-XX:SharedArchiveFile=" in os.environ["SPARK_SUBMIT_OPTS"]:
        return
    unit = (Path(__file__).parent / "unit").resolve()
    if config.args and all(Path(str(arg).split("::")[0]).resolve().is_relative_to(unit) for arg in config.args):
        return
    from tests.jvm_archive import ensure, submit_options

    archive = ensure()
    if archive is not None:
        option = submit_options(archive)
        os.environ["SPARK_SUBMIT_OPTS"] = f"{os.environ['SPARK_SUBMIT_OPTS']} {option}"
        _SUBMIT_OPTS = f"{_SUBMIT_OPTS} {option}".strip()


# Under pytest-xdist (`make test` runs two workers) the tests are handed out a module at a time: a module's tests
# stay on one worker (its module-scoped fixtures start once, its tests keep their order). The storage tests go as
# one unit: hadoop-azure's emulator mode looks for the Blob endpoint at 127.0.0.1:10000 only, so the tests that
# start it (tests/storage/, and only there) must never run on two workers at once. Done by the scheduler rather
# than xdist_group marks: pytest-xdist 3.8 marks a group by rewriting `item._nodeid`, which pytest 9 no longer
# reads, so `--dist loadgroup` silently splits every group. tests/smoke/ is one unit too: its results file (the
# README's compatibility table) is written by the one worker that ran smoke tests (tests/smoke/conftest.py), and
# with two smoke modules on two workers the second would overwrite the first's.
ONE_UNIT_FOLDERS = ("tests/storage/", "tests/smoke/")


@pytest.hookimpl(optionalhook=True)  # the smoke runs of the other Spark lines go without pytest-xdist
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Module-at-a-time scheduling, with each folder of ONE_UNIT_FOLDERS one unit."""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return next((folder for folder in ONE_UNIT_FOLDERS if module.startswith(folder)), module)

    config.option.loadscopereorder = False  # the units go in the order below, not by their number of tests
    return ModuleScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist, the longest units first and the short ones last, so that neither worker is left alone
    with a long unit at the end: tests/storage/ (one unit of every store test), then the other JVM tests, then
    tests/unit/ (many short tests, which fill the gaps). Every worker sorts the same way (xdist requires it)."""
    del config
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return

    def rank(item: pytest.Item) -> int:
        if item.nodeid.startswith(ONE_UNIT_FOLDERS):
            return 0
        return 2 if item.nodeid.startswith("tests/unit/") else 1

    items.sort(key=rank)  # stable: each module keeps its order


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The one Spark session of the test run (local[2], no UI, 2 shuffle partitions)."""
    from tidemark.session import build_session
    from tidemark.sinks.iceberg.sink import EXTENSIONS as ICEBERG_EXTENSIONS
    from tidemark.spark.artifacts import JarFeature
    from tidemark.spark.jars import closure, fetch
    from tidemark.spark.jvm import session_jar
    from tidemark.spark.lines import installed_version

    # The Kafka connector and Hadoop's Azure and S3 connectors, through tidemark's own jar cache (fetched and
    # verified as a user's first run does). The smoke runs on other Spark lines need no Kafka, and this machine's
    # Maven mirror does not serve every line's connector: there, without a locked closure, the session goes without.
    # Apache Iceberg's runtime too where the lock has a build for this line, with its SQL extensions (a static
    # setting): the Iceberg tests then run tidemark's commands in this process, on this session, instead of a fresh
    # Python and JVM per command. A line without one keeps the default suite as it was (iceberg_session says why).
    wanted = [JarFeature.KAFKA, JarFeature.AZURE, JarFeature.AWS, JarFeature.ICEBERG]
    locked = [f for f in wanted if closure(f, installed_version()) is not None]
    jars = [str(p) for p in fetch(locked).paths] if locked else []
    extensions = {"spark.sql.extensions": ICEBERG_EXTENSIONS} if JarFeature.ICEBERG in locked else {}
    # tidemark's JVM helper, as a Kafka pipeline's own session has it (its stream carries malformed records).
    helper = session_jar()
    jars += [str(helper)] if helper is not None else []
    quick = os.environ["SPARK_SUBMIT_OPTS"]
    os.environ["SPARK_SUBMIT_OPTS"] = _SUBMIT_OPTS  # the shared session runs for the whole suite: the default JIT
    try:
        session = build_session(
            "local[2]",
            {
                "spark.sql.shuffle.partitions": "2",
                "spark.sql.session.timeZone": "UTC",
                "spark.driver.memory": "2g",
                "spark.sql.streaming.stateStore.maintenanceInterval": "2s",
                "spark.jars": ",".join(jars),
                **extensions,
            },
            app_name="tidemark-tests",
        )
    finally:
        os.environ["SPARK_SUBMIT_OPTS"] = quick
    yield session
    session.stop()


@pytest.fixture
def iceberg_session(spark: SparkSession) -> SparkSession:
    """The shared session, for a test that runs the Iceberg sink in this process: skipped on a Spark line the jar
    lock has no Iceberg build for (the session then has no Iceberg runtime; the smoke runs cover that refusal)."""
    from tidemark.spark.artifacts import JarFeature
    from tidemark.spark.jars import closure
    from tidemark.spark.lines import installed_version

    if closure(JarFeature.ICEBERG, installed_version()) is None:
        pytest.skip(f"the jar lock has no Apache Iceberg build for Spark {installed_version()}")
    return spark


@pytest.fixture(autouse=True)
def _shared_session_stays_active() -> Iterator[None]:
    """After each test, the shared session is the active one again. A test that works in `spark.newSession()` (the
    Iceberg tests' other writers and old jobs) makes that session active: PySpark's createDataFrame sets the active
    session, Python's and the JVM's. Left so, the next test's pipeline (`getOrCreate`) would run on it, where the
    shared session's queries and settings are not. No Spark is started here: a test without one is left alone."""
    yield
    module = sys.modules.get("pyspark.sql.session")
    if module is None:
        return
    session_class: Any = module.SparkSession
    shared = session_class._instantiatedSession
    if shared is None or getattr(shared, "_jvm", None) is None or session_class._activeSession is shared:
        return
    session_class._activeSession = shared
    shared._jvm.SparkSession.setActiveSession(shared._jsparkSession)
    shared._jvm.SparkSession.setDefaultSession(shared._jsparkSession)


@pytest.fixture(autouse=True)
def _utc() -> None:
    os.environ["TZ"] = "UTC"
