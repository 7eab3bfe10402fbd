"""`tidemark jars fetch` end to end from an empty cache, as a user's first Kafka run needs it (issue 37).

The CLI in its own process, an empty jar cache and no ~/.m2: every jar of the installed Spark's Kafka closure is
downloaded from the Maven repository this machine uses, each checked against the lock's sha256 and size by the
test itself; a second fetch with the repository unreachable downloads nothing and still succeeds; `jars list`
then shows every jar cached.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import kafka_source, write_config
from tidemark.spark import jars
from tidemark.spark.artifacts import JarFeature
from tidemark.spark.lines import installed_version

pytestmark = pytest.mark.integration


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tidemark.cli.main", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, check=False)


def test_jars_fetch_from_an_empty_cache_downloads_and_verifies_the_locked_closure(tmp_path: Path) -> None:
    found = jars.closure(JarFeature.KAFKA, installed_version())
    assert found is not None
    wanted = {j.file_name: j for j in found[0] if not jars.is_bundled(j)}
    assert wanted, "the Kafka closure is more than the pyspark wheel's jars"
    config = write_config(
        tmp_path,
        source=kafka_source("127.0.0.1:9", "t"),
    )
    cache = tmp_path / "cache"
    home = tmp_path / "home"  # no ~/.m2 to copy from: everything comes over the network
    home.mkdir()
    env = {
        **os.environ,
        "TIDEMARK_CACHE_DIR": str(cache),
        "HOME": str(home),
        jars.REPOSITORY_ENV: jars.repository(),  # the repository this machine's Maven uses
    }

    done = _cli(env, "jars", "fetch", str(config), "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    fetched = json.loads(done.stdout)
    paths = [Path(p) for p in fetched["paths"]]
    assert sorted(p.name for p in paths) == sorted(wanted)
    assert fetched["downloaded"] == sum(j.size for j in wanted.values())
    for path in paths:
        assert path.is_relative_to(cache)
        jar = wanted[path.name]
        data = path.read_bytes()
        assert len(data) == jar.size and hashlib.sha256(data).hexdigest() == jar.sha256, path.name

    offline = {**env, jars.REPOSITORY_ENV: "http://127.0.0.1:9/"}  # nothing listens there
    again = _cli(offline, "jars", "fetch", str(config), "--json")
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads(again.stdout)["downloaded"] == 0

    listed = _cli(offline, "jars", "list", str(config), "--json")
    assert listed.returncode == 0, listed.stderr[-2000:]
    statuses = {entry["coordinate"]: entry["status"] for entry in json.loads(listed.stdout)["jars"]}
    assert {c for c, s in statuses.items() if s == "cached"} == {j.coordinate for j in wanted.values()}
    assert set(statuses.values()) <= {"cached", "in the pyspark wheel"}
