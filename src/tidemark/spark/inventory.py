"""What `tidemark jars list` shows: the jars a config needs on the installed Spark and where each stands."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tidemark.spark.artifacts import JarFeature, coordinates
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
    locked: bool  # every feature has a closure in tidemark's lock
    served_by: tuple[str, ...]  # features served by the jars another patch of the line locked: which


def jar_inventory(features_: Iterable[JarFeature], spark_version: str | None = None) -> JarInventory:
    """The coordinates and per-jar status of some jar groups (a config's: needs.jar_features) on a Spark version
    (default: installed)."""
    version = spark_version or installed_version()
    features = sorted(set(features_))
    packages: list[str] = []
    entries: list[JarEntry] = []
    own = True
    served_by: list[str] = []
    for feature in features:
        found = closure(feature, version)
        packages += coordinates(feature, found[1] if found is not None else version)
        if found is None:
            own = False
            continue
        jars, locked_for = found
        if locked_for != version:
            served_by.append(f"{feature.value}: the jars locked for Spark {locked_for} (the nearest patch served)")
        for jar in jars:
            status = "in the pyspark wheel" if is_bundled(jar) else "cached" if cached(jar) else "missing"
            entries.append(JarEntry(feature.value, jar.coordinate, jar.sha256, jar.size, status))
    return JarInventory(
        version, tuple(f.value for f in features), tuple(packages), tuple(entries), own, tuple(served_by)
    )
