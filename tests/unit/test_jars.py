"""tidemark's jar cache: locked closures fetched from a Maven repository, verified by sha256, never trusted blind."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidemark.errors import EnvironmentProblem
from tidemark.spark import jars
from tidemark.spark.artifacts import JarFeature, coordinates, features_for_uris
from tidemark.spark.lines import LINES

FAKE_SPARK = "9.1.0"  # a line tidemark's own lock does not know: each test locks its closure itself


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TIDEMARK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    jars._VERIFIED.clear()
    return tmp_path / "cache"


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A real HTTP server on loopback serving a folder in Maven repository layout."""
    root = tmp_path / "repo"
    root.mkdir()

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=str(root), **kwargs)  # type: ignore[arg-type]

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv(jars.REPOSITORY_ENV, f"http://127.0.0.1:{server.server_port}/")
    yield root
    server.shutdown()


def _publish(root: Path, coordinate: str, data: bytes) -> jars.LockedJar:
    group, artifact, version = coordinate.split(":")
    jar = jars.LockedJar(group, artifact, version, hashlib.sha256(data).hexdigest(), len(data))
    (root / jar.path).parent.mkdir(parents=True, exist_ok=True)
    (root / jar.path).write_bytes(data)
    return jar


@pytest.fixture
def lock(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[jars.LockedJar]]:
    """tidemark's lock as the fetch sees it, for the tests to add closures to."""
    closures = dict(jars.packaged_lock())
    monkeypatch.setattr(jars, "packaged_lock", lambda: closures)
    return closures


def _pin(lock: dict[str, list[jars.LockedJar]], locked: list[jars.LockedJar], version: str = FAKE_SPARK) -> None:
    lock[jars.lock_key(JarFeature.KAFKA, version)] = locked


def test_a_locked_closure_is_downloaded_verified_and_reused(
    cache: Path, lock: dict[str, list[jars.LockedJar]], repo: Path
) -> None:
    locked = [_publish(repo, "org.example:alpha:1.0", b"alpha" * 1000), _publish(repo, "org.example:beta:2", b"b")]
    _pin(lock, locked)
    first = jars.fetch([JarFeature.KAFKA], FAKE_SPARK)
    assert [p.name for p in first.paths] == ["alpha-1.0.jar", "beta-2.jar"]
    assert first.downloaded == 5001 and first.served_by == ()
    assert all(p.read_bytes() == (repo / j.path).read_bytes() for p, j in zip(first.paths, locked, strict=True))
    for jar in locked:
        (repo / jar.path).unlink()  # the second fetch must not need the repository
    again = jars.fetch([JarFeature.KAFKA], FAKE_SPARK, offline=True)
    assert again.paths == first.paths and again.downloaded == 0


def test_a_jar_that_does_not_match_the_lock_never_reaches_the_classpath(
    cache: Path, lock: dict[str, list[jars.LockedJar]], repo: Path
) -> None:
    jar = _publish(repo, "org.example:alpha:1.0", b"the real bytes")
    _pin(lock, [jar])
    (repo / jar.path).write_bytes(b"the real byteZ")  # same size, other content
    with pytest.raises(EnvironmentProblem, match="does not match tidemark's lock"):
        jars.fetch([JarFeature.KAFKA], FAKE_SPARK)
    assert not (cache / "jars" / jar.path).exists()
    assert (cache / "jars" / (jar.path + ".rejected")).exists()


def test_a_jar_in_the_local_maven_repository_is_copied_not_downloaded(
    cache: Path, lock: dict[str, list[jars.LockedJar]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(jars.REPOSITORY_ENV, "http://127.0.0.1:9/")  # nothing listens: a download would fail
    jar = _publish(tmp_path / "home" / ".m2" / "repository", "org.example:alpha:1.0", b"from maven")
    _pin(lock, [jar])
    fetched = jars.fetch([JarFeature.KAFKA], FAKE_SPARK)
    assert fetched.downloaded == 0 and fetched.paths[0].read_bytes() == b"from maven"


def test_unreachable_repository_is_one_line_naming_the_fetch_command(
    cache: Path, lock: dict[str, list[jars.LockedJar]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(jars.REPOSITORY_ENV, "http://127.0.0.1:9/")
    _pin(lock, [jars.LockedJar("org.example", "alpha", "1.0", "0" * 64, 10)])
    with pytest.raises(EnvironmentProblem) as caught:
        jars.fetch([JarFeature.KAFKA], FAKE_SPARK)
    text = str(caught.value)
    assert "\n" not in text and "tidemark jars fetch" in text and "org.example:alpha:1.0" in text


def test_jars_the_pyspark_wheel_ships_are_not_fetched(
    cache: Path, lock: dict[str, list[jars.LockedJar]], repo: Path
) -> None:
    import pyspark

    shipped = sorted((Path(pyspark.__file__).parent / "jars").glob("slf4j-api-*.jar"))[0]
    version = shipped.stem.removeprefix("slf4j-api-")
    ours = _publish(repo, "org.example:alpha:1.0", b"alpha")
    bundled = jars.LockedJar("org.slf4j", "slf4j-api", version, "0" * 64, 1)
    _pin(lock, [ours, bundled])
    assert [p.name for p in jars.fetch([JarFeature.KAFKA], FAKE_SPARK).paths] == ["alpha-1.0.jar"]


def test_repository_comes_from_the_environment_then_maven_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv(jars.REPOSITORY_ENV, raising=False)
    assert jars.repository() == jars.MAVEN_CENTRAL
    (tmp_path / ".m2").mkdir()
    (tmp_path / ".m2" / "settings.xml").write_text(
        '<settings xmlns="http://maven.apache.org/SETTINGS/1.0.0"><mirrors><mirror><id>corp</id>'
        "<mirrorOf>*</mirrorOf><url>https://nexus.example/repository/maven</url></mirror></mirrors></settings>"
    )
    assert jars.repository() == "https://nexus.example/repository/maven/"
    monkeypatch.setenv(jars.REPOSITORY_ENV, "https://other.example/m2")
    assert jars.repository() == "https://other.example/m2/"


def test_the_packaged_lock_accounts_for_the_newest_release_of_every_line() -> None:
    body = json.loads((Path(jars.__file__).parent / jars.LOCK_NAME).read_text(encoding="utf-8"))
    lock = jars.packaged_lock()
    for line in LINES.values():
        for feature in JarFeature:
            key = jars.lock_key(feature, line.newest)
            # Locked, or listed with the reason: the repository the lock was made against did not serve it, or
            # (Delta) the line has no release.
            reason = body["unresolved"].get(key, "")
            assert key in lock or "not found" in reason or "has no release" in reason, key
            if key in lock:
                assert coordinates(feature, line.newest)[0] in {j.coordinate for j in lock[key]}
                assert all(len(j.sha256) == 64 and j.size > 0 for j in lock[key])
        # Each line's Hadoop connectors are locked: they are what Spark itself needs for cloud URIs.
        assert jars.lock_key(JarFeature.AZURE, line.newest) in lock
        assert jars.lock_key(JarFeature.AWS, line.newest) in lock


def test_a_patch_without_its_own_connector_takes_the_nearest_locked_patch_of_its_line(
    cache: Path, repo: Path, lock: dict[str, list[jars.LockedJar]]
) -> None:
    jar = _publish(repo, "org.example:connector:9.1.3", b"connector")
    _pin(lock, [jar], "9.1.3")
    _pin(lock, [_publish(repo, "org.example:connector:9.1.0", b"old")], "9.1.0")
    assert jars.served_version(JarFeature.KAFKA, "9.1.5") == "9.1.3"
    assert jars.served_version(JarFeature.KAFKA, "9.1.1") == "9.1.0"
    assert jars.served_version(JarFeature.KAFKA, "9.1.2") == "9.1.3"  # a tie: the newer patch
    fetched = jars.fetch([JarFeature.KAFKA], "9.1.5")
    assert [p.name for p in fetched.paths] == ["connector-9.1.3.jar"]
    assert fetched.served_by == ("kafka: the jars locked for Spark 9.1.3 (the nearest patch served)",)
    # Never across lines; Hadoop's connectors follow the bundled Hadoop, not a patch.
    assert jars.served_version(JarFeature.KAFKA, "9.2.0") is None
    assert jars.served_version(JarFeature.DELTA, "9.1.5") is None


def test_a_spark_with_nothing_locked_is_refused_in_one_line_and_nothing_is_fetched(cache: Path, repo: Path) -> None:
    _publish(repo, "org.apache.spark:spark-sql-kafka-0-10_2.13:9.9.0", b"would be trusted on first use")
    with pytest.raises(EnvironmentProblem) as caught:
        jars.fetch([JarFeature.KAFKA], "9.9.0")
    text = str(caught.value)
    assert "\n" not in text and "no kafka jars for Spark 9.9.0" in text and "not trusted on first use" in text
    assert "4.1" in text and "spark.jars.packages" in text  # where it works, and the way out
    assert not (cache / "jars").exists() or not any((cache / "jars").rglob("*.jar"))


def test_the_newest_patch_of_every_line_is_served_by_a_locked_connector_of_its_line_or_refused() -> None:
    """What users on each line's newest release get (the smoke test `kafka` runs it on each)."""
    for line in LINES.values():
        served = jars.served_version(JarFeature.KAFKA, line.newest)
        if served is None:
            assert "no kafka jars" in jars.unlocked(JarFeature.KAFKA, line.newest)
            continue
        assert served.rsplit(".", 1)[0] == line.newest.rsplit(".", 1)[0], (line.newest, served)
        assert jars.lock_key(JarFeature.KAFKA, served) in jars.packaged_lock()


def test_features_follow_the_schemes() -> None:
    assert features_for_uris(["/tmp/x", "abfss://c@a.dfs.core.windows.net/p", None]) == {JarFeature.AZURE}
    assert features_for_uris(["wasbs://c@a.blob.core.windows.net/p", "s3a://b/k"]) == {
        JarFeature.AZURE,
        JarFeature.AWS,
    }
    assert features_for_uris(["s3://b/k", "gs://b/k", "file:///x"]) == set()


def test_processes_fetching_the_same_jar_at_once_each_end_with_it(
    cache: Path, lock: dict[str, list[jars.LockedJar]], repo: Path
) -> None:
    """Two pipelines (or test workers) sharing the cache download the same jar together: each stages its own file
    (one shared `.part` name made the second rename fail), every fetch ends verified, no staged file is left."""
    locked = [_publish(repo, "org.example:big:1.0", bytes(range(256)) * 4000)]
    _pin(lock, locked)
    results: list[jars.FetchedJars] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(6)

    def fetch() -> None:
        barrier.wait()
        try:
            results.append(jars.fetch([JarFeature.KAFKA], FAKE_SPARK))
        except BaseException as exc:  # collected for the assertion
            errors.append(exc)

    workers = [threading.Thread(target=fetch) for _ in range(6)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert errors == []
    assert len(results) == 6
    path = results[0].paths[0]
    assert path.read_bytes() == (repo / locked[0].path).read_bytes()
    assert all(r.paths == (path,) for r in results)
    assert [p.name for p in path.parent.iterdir()] == [path.name]
