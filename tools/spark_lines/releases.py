"""Read what every pyspark release bundles off its source distribution; write src/tidemark/spark/releases.json.

    python3 tools/spark_lines/releases.py                 # every final release of the lines lines.py knows
    python3 tools/spark_lines/releases.py 4.1.4 4.2.1     # only these, read again (merged into the file)

For each version, pip downloads the sdist from PyPI into a temporary folder (one at a time: each is 300-460 MB;
where uv already unpacked that sdist into its cache to build a wheel, that tree is read instead), and this reads,
without building anything:

- the jars under `deps/jars/`: the Hadoop client (`hadoop-client-api-<v>.jar`), Scala (`scala-library-<v>.jar`),
  whether the Scala compiler is there (`scala-compiler-<v>.jar`: tidemark compiles its state helper with it),
  py4j and rocksdbjni;
- PKG-INFO: Requires-Python and the Python classifiers;
- the protobuf runtime that transformWithStateInPandas' generated code checks for
  (`ValidateProtobufRuntimeVersion(..., major, minor, patch, ...)` in `pyspark/sql/streaming/proto/StateMessage_pb2.py`;
  absent before 4.0);
- which of the features tidemark.spark.lines names Spark's own shipped code has (FEATURE_PROBES: a class in the
  spark-sql or spark-catalyst jar, a config key in SQLConf, a method in pyspark's Python code).

The WASB driver is not in the sdist but in Hadoop's hadoop-azure of the bundled Hadoop version: its jar is
downloaded from Maven Central once per Hadoop version, and the driver counts as there when its store class
(`AzureNativeFileSystemStore`) is (Hadoop 3.5.0 keeps only a NativeAzureFileSystem that throws "WASB Driver using
wasb(s) schema is no longer supported").

The sdist is deleted once read. Only the standard library and pip: runs on any Python 3.8+.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
OUT = REPO / "src" / "tidemark" / "spark" / "releases.json"
LINES = ("3.5", "4.0", "4.1", "4.2", "4.3")
JAR = re.compile(r"/deps/jars/(?P<name>[A-Za-z0-9_.-]+?)-(?P<version>\d[\w.-]*)\.jar$")
# feature (tidemark.spark.lines.Feature name) -> (where, what): "class" in the spark-sql jar, "conf" key in catalyst's
# SQLConf, "python" text in a pyspark module.
FEATURE_PROBES: dict[str, list[tuple[str, str, str]]] = {
    "STATE_READER": [
        ("class", "spark-sql", "org/apache/spark/sql/execution/datasources/v2/state/StateDataSource.class"),
        (
            "class",
            "spark-sql",
            "org/apache/spark/sql/execution/datasources/v2/state/metadata/StateMetadataSource.class",
        ),
    ],
    "OPERATOR_METADATA": [
        ("class", "spark-sql", "org/apache/spark/sql/execution/streaming/state/OperatorStateMetadataV1Writer.class")
    ],
    "TRANSFORM_WITH_STATE_PANDAS": [("python", "pyspark/sql/pandas/group_ops.py", "def transformWithStateInPandas(")],
    "TRANSFORM_WITH_STATE_ROWS": [("python", "pyspark/sql/pandas/group_ops.py", "def transformWithState(")],
    "CHANGELOG_CHECKPOINTING": [
        ("class", "spark-sql", "org/apache/spark/sql/execution/streaming/state/StateStoreChangelogReader.class")
    ],
    "CHECKPOINT_FORMAT_V2": [
        ("conf", "spark-catalyst", "spark.sql.streaming.stateStore.checkpointFormatVersion"),
    ],
    "JOIN_STATE_V4": [
        (
            "class",
            "spark-sql",
            "org/apache/spark/sql/execution/streaming/operators/stateful/join/SymmetricHashJoinStateManagerV4.class",
        )
    ],
    "OFFSET_LOG_V2": [("conf", "spark-catalyst", "spark.sql.streaming.offsetLog.formatVersion")],
    "MERGE_OPERATOR_V2": [("conf", "spark-catalyst", "spark.sql.streaming.stateStore.rocksdb.mergeOperatorVersion")],
    "COMMIT_LOG_V3": [
        ("class", "spark-sql", "org/apache/spark/sql/execution/streaming/checkpointing/CommitMetadataV3.class")
    ],
    "OFFLINE_REPARTITION": [
        ("class", "spark-sql", "org/apache/spark/sql/classic/StreamingCheckpointManager.class"),
        ("python", "pyspark/sql/session.py", "def _streamingCheckpointManager("),
    ],
}
SQLCONF = "org/apache/spark/sql/internal/SQLConf$.class"
AZURE_STORE = "org/apache/hadoop/fs/azure/AzureNativeFileSystemStore.class"
MAVEN = "https://repo1.maven.org/maven2/"
PROTO = re.compile(r"ValidateProtobufRuntimeVersion\(\s*_runtime_version\.Domain\.PUBLIC,\s*(\d+),\s*(\d+),\s*(\d+),")


def released_versions() -> list[str]:
    """Every final pyspark release of the supported lines, oldest first (PyPI's JSON API)."""
    with urllib.request.urlopen("https://pypi.org/pypi/pyspark/json", timeout=60) as response:
        releases = json.load(response)["releases"]
    found = []
    for version, files in releases.items():
        parts = version.split(".")
        if len(parts) == 3 and all(p.isdigit() for p in parts) and files and f"{parts[0]}.{parts[1]}" in LINES:
            found.append(version)
    return sorted(found, key=lambda v: tuple(int(p) for p in v.split(".")))


def unpacked(version: str) -> Path | None:
    """The sdist of that version as uv unpacked it into its cache when it built the wheel, if it did."""
    root = Path(os.environ.get("UV_CACHE_DIR", Path.home() / ".cache" / "uv"))
    for pkg_info in sorted(root.glob(f"sdists-v*/pypi/pyspark/{version}/*/src/PKG-INFO")):
        if f"Version: {version}\n" in pkg_info.read_text(encoding="utf-8", errors="replace"):
            return pkg_info.parent
    return None


def download(version: str, folder: Path) -> Path:
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-cache-dir",
        "--no-deps",
        "--no-binary",
        ":all:",
    ]
    command += [f"pyspark=={version}", "-d", str(folder)]
    scratch = os.environ.get("TIDEMARK_SDIST_TMP")
    subprocess.run(command, check=True, env=dict(os.environ, TMPDIR=scratch) if scratch else None)
    return next(folder.glob(f"pyspark-{version}*.tar.gz"))


def _probe(kind: str, where: str, what: str, jars: dict[str, bytes], python: dict[str, str]) -> bool:
    if kind == "python":
        return what in python.get(where, "")
    archive = jars.get(where)
    if archive is None:
        return False
    with zipfile.ZipFile(io.BytesIO(archive)) as jar:
        if kind == "class":
            return what in jar.namelist()
        return what.encode() in jar.read(SQLCONF)


def _sdist_members(sdist: Path) -> Iterator[tuple[str, Callable[[], bytes]]]:
    """(name, read) for each file of an sdist: a .tar.gz, or the same tree already unpacked (uv's cache)."""
    if sdist.is_dir():
        for path in sorted(sdist.rglob("*")):
            if path.is_file():
                yield f"pyspark/{path.relative_to(sdist).as_posix()}", path.read_bytes
        return
    with tarfile.open(sdist, "r:gz") as archive:
        for member in archive:
            if member.isfile():
                yield member.name, lambda member=member: archive.extractfile(member).read()  # type: ignore[union-attr,misc]


def read_sdist(sdist: Path) -> dict[str, object]:
    """The bundled versions one sdist carries, and the features its code has."""
    jars: dict[str, str] = {}
    jar_bytes: dict[str, bytes] = {}
    python: dict[str, str] = {}
    python_files = {where for probes in FEATURE_PROBES.values() for kind, where, _ in probes if kind == "python"}
    info: dict[str, object] = {"python_classifiers": []}
    for name, read in _sdist_members(sdist):
        match = JAR.search(name)
        if match:
            jars[match.group("name")] = match.group("version")
            short = re.sub(r"_2\.1[23]$", "", match.group("name"))
            if short in ("spark-sql", "spark-catalyst"):
                jar_bytes[short] = read()
        elif name.count("/") == 1 and name.endswith("/PKG-INFO"):
            for line in read().decode("utf-8").splitlines():
                if line.startswith("Requires-Python:"):
                    info["requires_python"] = line.split(":", 1)[1].strip()
                found = re.match(r"Classifier: Programming Language :: Python :: (3\.\d+)$", line)
                if found:
                    info["python_classifiers"].append(found.group(1))  # type: ignore[attr-defined]
        elif name.endswith("pyspark/sql/streaming/proto/StateMessage_pb2.py"):
            proto = PROTO.search(read().decode("utf-8"))
            if proto:
                info["protobuf_gencode"] = ".".join(proto.groups())
        else:
            relative = name.split("/", 1)[-1]
            if relative in python_files:
                python[relative] = read().decode("utf-8")
    info.update(
        {
            "hadoop": jars["hadoop-client-api"],
            "scala": jars["scala-library"],
            "scala_compiler": "scala-compiler" in jars,
            "py4j": jars["py4j"],
            "rocksdbjni": jars["rocksdbjni"],
        }
    )
    info.setdefault("protobuf_gencode", None)
    info["features"] = sorted(
        feature
        for feature, probes in FEATURE_PROBES.items()
        if all(_probe(kind, where, what, jar_bytes, python) for kind, where, what in probes)
    )
    return info


def hadoop_azure_has_wasb(hadoop: str) -> bool:
    """Whether hadoop-azure of that Hadoop version has the WASB driver's store (Maven Central)."""
    url = f"{MAVEN}org/apache/hadoop/hadoop-azure/{hadoop}/hadoop-azure-{hadoop}.jar"
    with urllib.request.urlopen(url, timeout=120) as response:  # noqa: S310
        data = response.read()
    with zipfile.ZipFile(io.BytesIO(data)) as jar:
        return AZURE_STORE in jar.namelist()


def main() -> None:
    versions = sys.argv[1:] or released_versions()
    table: dict[str, dict[str, object]] = json.loads(OUT.read_text()) if OUT.exists() else {}
    releases = table.setdefault("releases", {})
    for version in versions:
        if version in releases and not sys.argv[1:]:
            continue  # read before (name versions on the command line to read them again)
        cached = unpacked(version)
        if cached is not None:
            releases[version] = read_sdist(cached)
        else:
            # TIDEMARK_SDIST_TMP (e.g. /dev/shm) keeps the download off a full disk: pip unpacks it and copies it once.
            scratch = os.environ.get("TIDEMARK_SDIST_TMP")
            with tempfile.TemporaryDirectory(prefix="tidemark-sdist-", dir=scratch) as work:
                releases[version] = read_sdist(download(version, Path(work)))
        hadoop = str(releases[version]["hadoop"])
        wasb = table.setdefault("hadoop_azure_wasb", {})
        if hadoop not in wasb:  # type: ignore[operator]
            wasb[hadoop] = hadoop_azure_has_wasb(hadoop)  # type: ignore[index]
        print(version, json.dumps(releases[version]), flush=True)
        table["releases"] = dict(sorted(releases.items(), key=lambda kv: tuple(int(p) for p in kv[0].split("."))))
        table["about"] = "read off each pyspark sdist by tools/spark_lines/releases.py; do not edit by hand"
        OUT.write_text(json.dumps(dict(sorted(table.items())), indent=1) + "\n")


if __name__ == "__main__":
    main()
