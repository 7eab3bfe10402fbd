"""What `tidemark jars list` shows: the jars a config needs on the installed Spark and where each stands."""

from __future__ import annotations

from dataclasses import dataclass

from tidemark.config import TidemarkConfig
from tidemark.spark.artifacts import coordinates
from tidemark.spark.environment import jar_features
from tidemark.spark.jars import cached, closure, is_bundled
from tidemark.spark.lines import installed_version


@dataclass(frozen=True)
class JarEntry:
    """One jar of a feature's closure."""

    feature: str
    coordinate: str
    sha256: str
    size: int
    status: str  # "cached", "missing", "in the pyspark wheel"


@dataclass(frozen=True)
class JarInventory:
    """The jars a pipeline needs for a Spark version."""

    spark_version: str
    features: tuple[str, ...]
    packages: tuple[str, ...]  # top-level coordinates, for --packages
    jars: tuple[JarEntry, ...]
    locked: bool  # every closure is in tidemark's own lock


def jar_inventory(config: TidemarkConfig, spark_version: str | None = None) -> JarInventory:
    """The features, coordinates and per-jar status of a config on a Spark version (default: installed)."""
    version = spark_version or installed_version()
    features = sorted(jar_features(config))
    packages: list[str] = []
    entries: list[JarEntry] = []
    own = True
    for feature in features:
        packages += coordinates(feature, version)
        found = closure(feature, version)
        if found is None:
            own = False
            continue
        jars, packaged = found
        own = own and packaged
        for jar in jars:
            status = "in the pyspark wheel" if is_bundled(jar) else "cached" if cached(jar) else "missing"
            entries.append(JarEntry(feature.value, jar.coordinate, jar.sha256, jar.size, status))
    return JarInventory(version, tuple(f.value for f in features), tuple(packages), tuple(entries), own)
