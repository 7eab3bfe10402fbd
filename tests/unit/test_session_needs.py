"""What each command asks of Spark through the one route (spark.environment.needs_of): no JVM needed."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import write_config
from tidemark.config import load_config
from tidemark.needs import needs_of
from tidemark.spark.artifacts import JarFeature
from tidemark.spark.environment import SessionNeeds


def _kafka() -> dict[str, object]:
    return {"format": "kafka", "path": None, "max_files_per_trigger": None, "bootstrap_servers": "h:9092", "topic": "t"}


def test_a_kafka_config_asks_for_the_connector_and_its_settings(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, source=_kafka(), spark={"shuffle_partitions": 3}))
    needs = needs_of(config, extra={"spark.sql.session.timeZone": "UTC"}, purpose="check")
    assert needs.jar_groups == {JarFeature.KAFKA}
    assert needs.helper is True
    assert needs.settings["spark.sql.shuffle.partitions"] == "3"
    assert needs.settings["spark.sql.session.timeZone"] == "UTC"
    assert needs.app_name == f"tidemark-{config.pipeline.name}-check"
    assert str(tmp_path / "checkpoint") in needs.locations


def test_the_command_s_settings_win_and_inspect_needs_no_helper(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, source=_kafka(), spark={"shuffle_partitions": 3}))
    needs = needs_of(config, extra={"spark.sql.shuffle.partitions": "1"}, master="local[1]", helper=False)
    assert needs.settings["spark.sql.shuffle.partitions"] == "1"
    assert needs.master == "local[1]"
    assert needs.helper is False


def test_a_cloud_landing_folder_asks_for_its_connector(tmp_path: Path) -> None:
    """`check` of a pipeline whose source is on Azure got neither hadoop-azure nor the credentials before."""
    landing = "abfs://landing@devstoreaccount1.dfs.core.windows.net/events"
    config = load_config(write_config(tmp_path, source={"path": landing}))
    needs = needs_of(config)
    assert landing in needs.locations
    assert JarFeature.AZURE in needs.jar_groups
    assert needs.helper is False  # a file source: no Kafka observation helper


def test_a_file_pipeline_on_local_disk_needs_no_jar() -> None:
    assert SessionNeeds(locations=("/tmp/x",)).jar_groups == set()
