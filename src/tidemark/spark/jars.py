"""JVM jars handled like Python packages: a pinned lock with sha256, fetched once into a cache, verified on use.

For a Spark version in the lock (`jars.lock.json`, made by `tools/jars/lock.py` with Spark's own Ivy), each jar
of a feature's closure is taken from the cache, else from the local Maven repository (~/.m2), else downloaded
from the Maven repository (TIDEMARK_MAVEN_REPOSITORY, else the mirror in ~/.m2/settings.xml, else Maven
Central), and its sha256 checked against the lock before it may go on Spark's classpath. Jars the pyspark wheel
already ships are not fetched again. A Spark patch whose Kafka connector the repository did not serve when the
lock was made takes the connector of the nearest locked patch of its line (the smoke test of each line's newest
release proves it); a Spark version with nothing locked for a feature is refused in one line: a jar not in the
lock is never trusted on first use (a user who sets `spark.jars.packages` manages the JVM dependencies instead).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from xml.etree import ElementTree

from tidemark.cache import cache_root
from tidemark.errors import EnvironmentProblem
from tidemark.spark.artifacts import LINE_JARS, JarFeature, coordinates
from tidemark.spark.lines import hadoop_of, installed_version, line_key

REPOSITORY_ENV = "TIDEMARK_MAVEN_REPOSITORY"
MAVEN_CENTRAL = "https://repo1.maven.org/maven2/"
LOCK_NAME = "jars.lock.json"
_CHUNK = 1 << 20
Progress = Callable[[str, int, int], None]  # (file, bytes so far, total bytes)


@dataclass(frozen=True)
class LockedJar:
    """One jar of a resolved closure: its Maven coordinate and where it lives in a Maven repository."""

    group: str
    artifact: str
    version: str
    sha256: str
    size: int

    @property
    def coordinate(self) -> str:
        """group:artifact:version."""
        return f"{self.group}:{self.artifact}:{self.version}"

    @property
    def path(self) -> str:
        """The jar's path in a Maven repository."""
        return f"{self.group.replace('.', '/')}/{self.artifact}/{self.version}/{self.artifact}-{self.version}.jar"

    @property
    def file_name(self) -> str:
        """The jar's file name."""
        return f"{self.artifact}-{self.version}.jar"

    def to_json(self) -> dict[str, object]:
        """As the lock file stores it."""
        return {"coordinate": self.coordinate, "sha256": self.sha256, "size": self.size}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> LockedJar:
        """Read one lock entry."""
        group, artifact, version = str(data["coordinate"]).split(":")
        return cls(group, artifact, version, str(data["sha256"]), int(str(data["size"])))


def lock_key(feature: JarFeature, spark_version: str) -> str:
    """How the lock names a closure: the Kafka connector per Spark version, Delta and Iceberg per Spark line,
    Hadoop's per bundled Hadoop version."""
    if feature is JarFeature.KAFKA:
        return f"{feature.value}@spark-{spark_version}"
    if feature in LINE_JARS:
        return f"{feature.value}@spark-{line_key(spark_version)}"
    return f"{feature.value}@hadoop-{hadoop_of(spark_version)}"


def packaged_lock() -> dict[str, list[LockedJar]]:
    """The lock shipped with tidemark: feature@spark-version -> closure."""
    text = resources.files("tidemark.spark").joinpath(LOCK_NAME).read_text(encoding="utf-8")
    return {key: [LockedJar.from_json(j) for j in jars] for key, jars in json.loads(text)["closures"].items()}


def jars_dir() -> Path:
    """Where fetched jars live (Maven repository layout)."""
    return cache_root() / "jars"


def _patch(version: str) -> int:
    match = re.match(r"\d+\.\d+\.(\d+)", version)
    return int(match.group(1)) if match else 0


def served_version(feature: JarFeature, spark_version: str) -> str | None:
    """The Spark version whose locked closure serves this one: itself, or for the Kafka connector the nearest
    locked patch of its line (a connector keeps Spark's internal interfaces within a line; the smoke test on each
    line's newest release proves it); None when the lock holds nothing for it."""
    lock = packaged_lock()
    if lock_key(feature, spark_version) in lock:
        return spark_version
    if feature is not JarFeature.KAFKA:
        return None
    prefix = f"{feature.value}@spark-"
    line = line_key(spark_version)
    same_line = [key.removeprefix(prefix) for key in lock if key.startswith(prefix)]
    same_line = [v for v in same_line if line_key(v) == line]
    if not same_line:
        return None
    wanted = _patch(spark_version)
    return min(same_line, key=lambda v: (abs(_patch(v) - wanted), -_patch(v)))


def closure(feature: JarFeature, spark_version: str) -> tuple[list[LockedJar], str] | None:
    """The locked closure of a feature for a Spark version and the Spark version it was locked for (another
    patch of the line when this one's connector is not served); None when the lock has none."""
    served = served_version(feature, spark_version)
    return None if served is None else (packaged_lock()[lock_key(feature, served)], served)


def unlocked(feature: JarFeature, spark_version: str) -> str:
    """The one line a Spark version with no locked closure for a feature gets."""
    coordinates(feature, spark_version)  # a line Delta has no release for: that one line
    prefix = f"{feature.value}@spark-"
    lines = sorted({line_key(k.removeprefix(prefix)) for k in packaged_lock() if k.startswith(prefix)})
    where = f"tidemark's {feature.value} jars are locked for Spark {', '.join(lines)}" if lines else ""
    return (
        f"tidemark's jar lock has no {feature.value} jars for Spark {spark_version} (the Maven repository served "
        f"none of its line when the lock was made), and jars outside the lock are not trusted on first use: "
        f"{where + '; ' if where else ''}or manage the JVM dependencies yourself with spark.jars.packages in "
        "[spark.conf]"
    )


def repository() -> str:
    """The Maven repository to download from: TIDEMARK_MAVEN_REPOSITORY, Maven's mirror, or Maven Central."""
    configured = os.environ.get(REPOSITORY_ENV)
    if configured:
        return configured.rstrip("/") + "/"
    settings = Path.home() / ".m2" / "settings.xml"
    if settings.exists():
        try:
            root = ElementTree.parse(settings).getroot()  # noqa: S314 - the user's own Maven settings
        except ElementTree.ParseError:
            root = None
        for mirror in root.iter() if root is not None else ():
            if not mirror.tag.endswith("mirror"):
                continue
            fields = {child.tag.rsplit("}", 1)[-1]: (child.text or "").strip() for child in mirror}
            if fields.get("mirrorOf") in ("*", "central", "external:*") and fields.get("url"):
                return fields["url"].rstrip("/") + "/"
    return MAVEN_CENTRAL


def is_bundled(jar: LockedJar) -> bool:
    """True when the installed pyspark wheel ships this very jar (same artifact and version)."""
    import pyspark

    return (Path(pyspark.__file__).parent / "jars" / jar.file_name).exists()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


_VERIFIED: dict[tuple[str, int, int], str] = {}


def _verified(path: Path, jar: LockedJar) -> bool:
    """The file is the locked jar: size and sha256 (hashed once per process and file version)."""
    if not path.exists():
        return False
    stat = path.stat()
    if stat.st_size != jar.size:
        return False
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _VERIFIED:
        _VERIFIED[key] = _sha256(path)
    return _VERIFIED[key] == jar.sha256


def cached(jar: LockedJar) -> bool:
    """True when the cache holds the verified jar."""
    return _verified(jars_dir() / jar.path, jar)


def _download(url: str, target: Path, size: int, progress: Progress | None) -> None:
    """Download to a file of this call's own, then rename it into place: processes sharing the cache (pipelines
    started together, test workers) may download the same jar at once, and each rename puts whole bytes there."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    staged = Path(name)
    request = urllib.request.Request(url, headers={"User-Agent": "tidemark"})  # noqa: S310 - http(s) repository URL
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310
            done = 0
            while chunk := response.read(_CHUNK):
                out.write(chunk)
                done += len(chunk)
                if progress is not None:
                    progress(target.name, done, size)
        staged.chmod(0o644)  # mkstemp's file is the owner's alone; a cached jar is readable as any download is
        os.replace(staged, target)
    finally:
        staged.unlink(missing_ok=True)


@dataclass(frozen=True)
class FetchedJars:
    """The jars of some features, verified, ready for `spark.jars`."""

    spark_version: str
    features: tuple[JarFeature, ...]
    paths: tuple[Path, ...]  # verified jars in the cache (jars the wheel ships are not listed)
    downloaded: int  # bytes downloaded now
    served_by: tuple[str, ...]  # per feature whose jars were locked for another patch of the line: which


class _Unavailable(Exception):
    """A jar could not be had: not cached and not downloadable."""


def _place(jar: LockedJar, offline: bool, progress: Progress | None) -> tuple[Path, int]:
    """The verified cache copy of a jar, copying or downloading it when needed; (path, bytes downloaded)."""
    target = jars_dir() / jar.path
    if _verified(target, jar):
        return target, 0
    m2 = Path.home() / ".m2" / "repository" / jar.path
    if _verified(m2, jar):
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(m2, target)
        return target, 0
    if offline:
        msg = f"{jar.coordinate} is not in tidemark's jar cache ({jars_dir()})"
        raise _Unavailable(msg)
    url = repository() + jar.path
    try:
        _download(url, target, jar.size, progress)
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        reason = getattr(exc, "reason", None) or exc
        msg = f"cannot download {jar.coordinate} from {repository()} ({reason})"
        raise _Unavailable(msg) from exc
    if not _verified(target, jar):
        bad = target.with_name(target.name + ".rejected")
        os.replace(target, bad)
        msg = f"{url} does not match tidemark's lock (sha256 or size differ): not used; it is kept as {bad}"
        raise EnvironmentProblem(msg)
    return target, jar.size


def fetch(
    features: Iterable[JarFeature],
    spark_version: str | None = None,
    *,
    offline: bool = False,
    progress: Progress | None = None,
    hint: str = "tidemark jars fetch CONFIG",
) -> FetchedJars:
    """Every jar the features need for a Spark version (default: the installed one), verified, in the cache.

    A jar that is neither cached nor downloadable is one EnvironmentProblem naming the feature's connector, the
    jar, and `hint` (the command that fetches them where the repository is reachable).
    """
    version = spark_version or installed_version()
    wanted = tuple(sorted(set(features)))
    paths: list[Path] = []
    downloaded = 0
    served_by: list[str] = []
    for feature in wanted:
        found = closure(feature, version)
        if found is None:
            raise EnvironmentProblem(unlocked(feature, version))
        jars, locked_for = found
        if locked_for != version:
            served_by.append(f"{feature.value}: the jars locked for Spark {locked_for} (the nearest patch served)")
        for jar in jars:
            if is_bundled(jar):
                continue
            try:
                path, size = _place(jar, offline, progress)
            except _Unavailable as exc:
                connector = ", ".join(coordinates(feature, locked_for))
                msg = (
                    f"{connector} needs {exc}: run `{hint}` where that works, "
                    f"or set {REPOSITORY_ENV} to a Maven repository that serves it"
                )
                raise EnvironmentProblem(msg) from exc
            downloaded += size
            if path not in paths:
                paths.append(path)
    return FetchedJars(version, wanted, tuple(paths), downloaded, tuple(served_by))


# Features pinned jar by jar (no Ivy closure): their POMs drag jars that clash with the pyspark wheel's.
EXACT_PINS = frozenset(LINE_JARS)


def pin_exact(coordinates_: list[str]) -> list[LockedJar]:
    """Lock entries for exactly these jars (no dependencies), downloaded from the repository (the lock tool)."""
    work = Path(tempfile.mkdtemp(prefix="pin-"))
    try:
        found = []
        for coordinate in coordinates_:
            group, artifact, version = coordinate.split(":")
            jar = LockedJar(group, artifact, version, "", 0)
            target = work / jar.file_name
            _download(repository() + jar.path, target, 0, None)
            found.append((coordinate, target))
        return locked(found)
    finally:
        shutil.rmtree(work, ignore_errors=True)


# --- resolution with Spark's own Ivy (the lock tool) -------------------------------------------------------------

_RESOLVE_SCRIPT = """
import os, sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]").appName("tidemark-resolve")
         .config("spark.ui.enabled", "false")
         .config("spark.jars.packages", sys.argv[1])
         .config("spark.jars.ivy", sys.argv[2])
         .config("spark.jars.ivySettings", sys.argv[3])
         .getOrCreate())
spark.stop()
"""


def ivy_settings(path: Path) -> Path:
    """An ivysettings.xml for Spark's Ivy naming only the Maven repository tidemark uses.

    Not ~/.m2 (Spark's default chain tries it first): Maven keeps POMs there without their jars, and Ivy then
    fails the download instead of asking the next repository (`download failed: org.slf4j#slf4j-api;2.0.16`).
    """
    text = f"""<ivysettings>
  <settings defaultResolver="repository"/>
  <resolvers>
    <ibiblio name="repository" root="{repository()}" m2compatible="true"/>
  </resolvers>
</ivysettings>
"""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


_IVY_JAR = re.compile(r"^(?P<artifact>.+)-(?P<version>[^-][^/]*)\.jar$")


def resolve(coordinates_: list[str]) -> list[tuple[str, Path]]:
    """Resolve coordinates and their dependencies with Spark's Ivy in a fresh cache; (coordinate, jar) pairs."""
    work = Path(tempfile.mkdtemp(prefix="resolve-", dir=cache_root() if cache_root().exists() else None))
    try:
        settings = ivy_settings(work / "ivysettings.xml")
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
        done = subprocess.run(
            [sys.executable, "-c", _RESOLVE_SCRIPT, ",".join(coordinates_), str(work / "ivy"), str(settings)],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        if done.returncode != 0:
            lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
            unresolved = [line for line in lines if "not found" in line or "UNRESOLVED" in line]
            reason = unresolved[0] if unresolved else (lines[-1] if lines else "unknown error")
            msg = f"Spark's Ivy could not resolve {', '.join(coordinates_)} from {repository()}: {reason}"
            raise EnvironmentProblem(msg)
        found: list[tuple[str, Path]] = []
        cache = work / "ivy" / "cache"
        for jar in sorted([*cache.glob("*/*/jars/*.jar"), *cache.glob("*/*/bundles/*.jar")]):
            group, artifact = jar.parts[-4], jar.parts[-3]
            match = _IVY_JAR.match(jar.name)
            if match is None or match.group("artifact") != artifact:
                continue
            kept = jars_dir() / "resolved" / f"{group}_{jar.name}"
            kept.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(jar, kept)
            found.append((f"{group}:{artifact}:{match.group('version')}", kept))
        return found
    finally:
        shutil.rmtree(work, ignore_errors=True)


def locked(resolved: list[tuple[str, Path]]) -> list[LockedJar]:
    """Lock entries (sha256, size) of resolved jars."""
    out = []
    for coordinate, path in resolved:
        group, artifact, version = coordinate.split(":")
        out.append(LockedJar(group, artifact, version, _sha256(path), path.stat().st_size))
    return sorted(out, key=lambda j: j.coordinate)
