"""The JVM helper that plans state and writes state stores with Spark's own classes.

Two Scala sources, compiled once per pyspark release against the jars of its wheel (every supported wheel ships
the Scala compiler: 2.12 for Spark 3.5, 2.13 for 4.x) into tidemark's cache, at install time (`make install` runs
`python -m tidemark.spark.jvm`) or on first use, and loaded into a running session through py4j:

- `TidemarkPlanProbe.scala` (`check`: the state an aggregation will keep), on every line;
- `TidemarkStateRewrite.scala` (`state repartition`: the state store writer), where tidemark.spark.lines says the
  line has Feature.STATE_REWRITE (Spark 4.0+); elsewhere asking for it is one line naming the Spark that has it;
- `TidemarkBoundedCollect.scala` (a stream's malformed Kafka records in its own observation, up to a size), on
  every line. Unlike the other two it runs in the stream's tasks, so the jar goes on a pipeline session's
  `spark.jars` when the session starts (`session_jar`); a session without it (one the user made) quarantines by
  re-reading the batch, as before.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidemark.cache import cache_root
from tidemark.errors import EnvironmentProblem
from tidemark.spark.lines import Defect, Feature, has, has_defect, installed_version, require

if TYPE_CHECKING:
    from pyspark.sql import Column, SparkSession

log = logging.getLogger(__name__)
PROBE_SOURCE = Path(__file__).with_name("TidemarkPlanProbe.scala")
REWRITE_SOURCE = Path(__file__).with_name("TidemarkStateRewrite.scala")
COLLECT_SOURCE = Path(__file__).with_name("TidemarkBoundedCollect.scala")
_PACKAGE = "org.apache.spark.sql.execution.streaming.state"
PROBE_CLASS = f"{_PACKAGE}.TidemarkPlanProbe"
REWRITE_CLASS = f"{_PACKAGE}.TidemarkStateRewrite"
COLLECT_CLASS = f"{_PACKAGE}.TidemarkBoundedCollect"
# The helper's JSON actions, and the entry class that serves each.
ACTIONS = {"aggregate_state": PROBE_CLASS, "rewrite": REWRITE_CLASS}
_loaded: dict[tuple[int, str], Any] = {}
_lock = threading.Lock()


def _pyspark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def sources(spark_version: str | None = None) -> list[Path]:
    """The Scala sources the helper of a Spark release (default: the installed one) is compiled from."""
    version = spark_version or installed_version()
    require(Feature.STATE_HELPER, version)
    return [PROBE_SOURCE, COLLECT_SOURCE, *([REWRITE_SOURCE] if has(Feature.STATE_REWRITE, version) else [])]


def jar_path() -> Path:
    """Where the helper jar for this pyspark and these sources lives in the cache."""
    digest = hashlib.sha256()
    for source in sources():
        digest.update(source.read_bytes())
    return cache_root() / "jvm" / f"tidemark-state-{installed_version()}-{digest.hexdigest()[:12]}.jar"


def build_jar(force: bool = False) -> Path:
    """Compile the helper with the Scala compiler in the pyspark wheel; return the jar (cached)."""
    from tidemark.session import check_java

    target = jar_path()
    if target.exists() and not force:
        return target
    java = check_java()
    jars = _pyspark_jars()
    if not any(jars.glob("scala-compiler-*.jar")):
        msg = f"the pyspark wheel at {jars} has no Scala compiler: cannot build tidemark's state helper"
        raise EnvironmentProblem(msg)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tidemark-jvm-", dir=target.parent) as work:
        classes = Path(work) / "classes"
        classes.mkdir()
        command = [java, "-Xss4m", "-cp", f"{jars}/*", "scala.tools.nsc.Main", "-usejavacp", "-nowarn"]
        command += ["-d", str(classes), *(str(s) for s in sources())]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            first = next((line for line in done.stderr.splitlines() if "error" in line), done.stderr[:300])
            msg = f"cannot compile tidemark's state helper against {jars}: {first.strip()}"
            raise EnvironmentProblem(msg)
        staged = Path(work) / target.name
        with zipfile.ZipFile(staged, "w", zipfile.ZIP_DEFLATED) as archive:
            for file in sorted(classes.rglob("*.class")):
                archive.write(file, file.relative_to(classes).as_posix())
        os.replace(staged, target)  # atomic: a concurrent build leaves one complete jar
    log.info("built %s", target)
    return target


def carries_records() -> bool:
    """True when the installed Spark runs TidemarkBoundedCollect in a stream's observation."""
    return not has_defect(Defect.OBSERVED_AGGREGATOR_NOT_SERIALIZABLE)


def session_jar() -> Path | None:
    """The helper jar for a new session's spark.jars (built when missing), or None when it cannot be built here."""
    from tidemark.steps import step

    try:
        if jar_path().exists():
            return build_jar()
        with step("building tidemark's JVM helper (once per Spark release)"):
            return build_jar()
    except EnvironmentProblem as exc:  # no Java compiler run possible: the quarantine re-reads, nothing else changes
        log.info("tidemark's JVM helper is not on this session: %s", exc)
        return None


def on_driver(spark: SparkSession, entry_class: str) -> bool:
    """True when the session's driver loads entry_class itself (the jar was on spark.jars when the JVM started)."""
    from py4j.protocol import Py4JError  # type: ignore[import-untyped]

    jvm = spark.sparkContext._jvm
    assert jvm is not None
    try:
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName(entry_class, False, loader)
    except Py4JError:
        return False
    return True


def bounded_collect(spark: SparkSession, records: Column, max_chars: int) -> Column | None:
    """TidemarkBoundedCollect over a string column (an aggregate for observe), or None when the session's driver
    does not have it (its JVM started without the helper on spark.jars, or the session is a Spark Connect one)."""
    from tidemark.connect import is_connect

    if is_connect(spark) or not carries_records() or not on_driver(spark, COLLECT_CLASS):
        return None
    entry: Any = spark.sparkContext._jvm
    for part in COLLECT_CLASS.split("."):
        entry = getattr(entry, part)
    java_column = entry.column(records._jc, max_chars)
    try:  # Spark 4: the classic (py4j) Column; Spark 3.5 has only the one
        from pyspark.sql.classic.column import Column as Classic

        return Classic(java_column)
    except ImportError:
        from pyspark.sql.column import Column

        return Column(java_column)


def helper(spark: SparkSession, entry_class: str) -> Any:
    """An entry class's static `run(SparkSession, String)` method, loaded into this session's JVM once."""
    key = (id(spark.sparkContext._jsc), entry_class)
    with _lock:
        if key in _loaded:
            return _loaded[key]
        jar = build_jar()
        jvm = spark.sparkContext._jvm
        gateway = spark.sparkContext._gateway
        assert jvm is not None and gateway is not None
        loader_key = (id(spark.sparkContext._jsc), "")
        if loader_key not in _loaded:
            # Executors (in the local session: this JVM) load the tasks' classes from jars added to the context.
            spark.sparkContext._jsc.addJar(str(jar))
            urls = gateway.new_array(jvm.java.net.URL, 1)
            urls[0] = jvm.java.io.File(str(jar)).toURI().toURL()
            parent = jvm.java.lang.Thread.currentThread().getContextClassLoader()
            _loaded[loader_key] = (jvm.java.net.URLClassLoader(urls, parent), parent)
        loader, parent = _loaded[loader_key]
        entry = loader.loadClass(entry_class)
        types = gateway.new_array(jvm.java.lang.Class, 2)
        types[0] = jvm.java.lang.Class.forName("org.apache.spark.sql.SparkSession", True, parent)
        types[1] = jvm.java.lang.Class.forName("java.lang.String")
        method = entry.getMethod("run", types)
        _loaded[key] = (method, gateway)
        return _loaded[key]


def call(spark: SparkSession, spec_json: str) -> str:
    """Run the helper on one JSON spec in this session; return its JSON result."""
    from tidemark.connect import refuse_on_connect

    action = json.loads(spec_json).get("action", "rewrite")
    refuse_on_connect(spark, f"tidemark's JVM helper ({action})", "run this command without SPARK_REMOTE")
    entry_class = ACTIONS[action]
    if entry_class == REWRITE_CLASS:
        require(Feature.STATE_REWRITE)
    method, gateway = helper(spark, entry_class)
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    args = gateway.new_array(jvm.java.lang.Object, 2)
    args[0] = spark._jsparkSession
    args[1] = spec_json
    return str(method.invoke(None, args))


def main() -> None:
    """Build the jar (make install and the smoke runs run this); print where it is and what it holds; exit 1 when
    the sources do not compile against this Spark."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        print("no Java found: tidemark's state helper will be built on first use")
        return
    try:
        jar = build_jar()
    except EnvironmentProblem as exc:
        raise SystemExit(str(exc)) from exc
    print(f"{jar} ({', '.join(s.stem for s in sources())})")
