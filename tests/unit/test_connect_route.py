"""Spark Connect's endpoint: where it comes from, how it is shown, and what a config may not hold."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import write_config
from tidemark.config import load_config
from tidemark.connect import endpoint, label
from tidemark.errors import ConfigError
from tidemark.needs import needs_of, spark_mode


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("sc://127.0.0.1:15002", "sc://127.0.0.1:15002"),
        ("sc://host.example:443/;use_ssl=true;token=abc.def-ghi", "sc://host.example:443"),
        ("sc://cluster", "sc://cluster:15002"),
    ],
)
def test_label_names_host_and_port_only(url: str, shown: str) -> None:
    assert label(url) == shown
    assert "abc" not in label(url)


def test_the_environment_wins_over_the_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = load_config(write_config(tmp_path, spark={"remote": "sc://from-config:1"}))
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    assert endpoint(config.spark.remote) == "sc://from-config:1"
    assert needs_of(config).remote == "sc://from-config:1"
    assert spark_mode(config) == "Spark Connect sc://from-config:1"
    monkeypatch.setenv("SPARK_REMOTE", "sc://from-env:2/;token=t0ken")
    assert needs_of(config).remote == "sc://from-env:2/;token=t0ken"
    assert spark_mode(config) == "Spark Connect sc://from-env:2"
    monkeypatch.delenv("SPARK_REMOTE")
    local = load_config(write_config(tmp_path))
    assert needs_of(local).remote is None and spark_mode(local) == "local[2]"


@pytest.mark.parametrize(
    ("remote", "said"),
    [
        ("sc://h:1/;token=s3cret", "carries a credential"),
        ("sc://h:1/;user_id=me;password=s3cret", "carries a credential"),
        ("http://h:1", "must be a Spark Connect endpoint"),
    ],
)
def test_a_config_endpoint_with_a_credential_or_another_scheme_is_refused(
    tmp_path: Path, remote: str, said: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(write_config(tmp_path, spark={"remote": remote}))
    assert said in str(refused.value)
    assert "s3cret" not in str(refused.value)


def test_connect_needs_spark_4_on_both_sides() -> None:
    from tidemark.spark.lines import connect_problem

    assert connect_problem("the server", "4.0.5") is None and connect_problem("the server", "4.3.0") is None
    problem = connect_problem("this client's pyspark", "3.5.9")
    assert problem is not None and "needs Spark 4.0 or newer" in problem and "runs Spark 3.5.9" in problem
