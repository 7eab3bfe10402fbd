"""`tidemark check` on real checkpoints: every incompatibility it knows is found, compatible changes pass, and
`--rehearse` reports Spark's own verdict without touching the checkpoint."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.helpers import write_config
from tidemark.cli.main import main
from tidemark.config import TidemarkConfig, load_config
from tidemark.context import PipelineContext
from tidemark.evolve.check import CheckReport, check_config
from tidemark.pipeline.generate import generate_events
from tidemark.pipeline.run import start_query
from tidemark.session import runtime_conf

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.slow]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "stateful"
WIDER_SOURCE = "event_id BIGINT, user STRING, region STRING, ts STRING, value DOUBLE"


@dataclass(frozen=True)
class Pipeline:
    """A pipeline that ran once, and how to write variants of its config."""

    root: Path
    base: dict[str, dict[str, Any]]

    def config(self, **changes: dict[str, Any]) -> tuple[TidemarkConfig, Path]:
        """The pipeline's config with some tables changed (a None value removes a key)."""
        tables = {name: dict(values) for name, values in self.base.items()}
        for name, values in changes.items():
            tables.setdefault(name, {}).update(values)
        path = write_config(self.root, **tables)
        return load_config(path), path


def _run(spark: SparkSession, config: TidemarkConfig) -> None:
    with runtime_conf(spark, config.spark_conf()):
        query = start_query(spark, PipelineContext.of(config), available_now=True)
        query.awaitTermination(600)
        assert query.exception() is None


def _pipeline(session: SparkSession, root: Path, base: dict[str, dict[str, Any]]) -> Pipeline:
    generate_events(root / "landing", events=400, keys=6, files=2, seed=7)
    pipeline = Pipeline(root, base)
    config, _ = pipeline.config()
    _run(session, config)
    return pipeline


@pytest.fixture(scope="module")
def window(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Pipeline:
    return _pipeline(spark, tmp_path_factory.mktemp("window"), {"spark": {"shuffle_partitions": 2}})


@pytest.fixture(scope="module")
def session(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Pipeline:
    kind = {"kind": "session", "gap": "20 minutes", "window": None, "extra": None}
    return _pipeline(
        spark, tmp_path_factory.mktemp("session"), {"spark": {"shuffle_partitions": 2}, "aggregation": kind}
    )


@pytest.fixture(scope="module")
def custom(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    sys.path.insert(0, str(FIXTURES))
    kind = {"kind": "custom", "processor": "evolve_processors:Count", "window": None, "extra": None}
    try:
        yield _pipeline(
            spark, tmp_path_factory.mktemp("custom"), {"spark": {"shuffle_partitions": 2}, "aggregation": kind}
        )
    finally:
        sys.path.remove(str(FIXTURES))


def _codes(report: CheckReport) -> set[str]:
    return {p.code for p in report.problems if p.blocking}


WINDOW_CHANGES: dict[str, tuple[dict[str, dict[str, Any]], set[str]]] = {
    "unchanged": ({}, set()),
    "compatible: trigger, batch size, monitor": (
        {"trigger": {"interval": "1 minute"}, "source": {"max_files_per_trigger": 5}, "monitor": {"leak_batches": 9}},
        set(),
    ),
    "shuffle partitions": ({"spark": {"shuffle_partitions": 4}}, {"SHUFFLE_PARTITIONS"}),
    "state store": ({"checkpoint": {"state_store": "hdfs"}}, {"STATE_STORE_PROVIDER"}),
    "checkpoint format": ({"checkpoint": {"format_version": 2}}, {"CHECKPOINT_FORMAT"}),
    "pinned setting": (
        {"spark": {"conf": {'"spark.sql.streaming.aggregation.stateFormatVersion"': "1"}}},  # quoted TOML key
        {"SETTING_IGNORED"},
    ),
    "one more aggregate": (
        {"aggregation": {"extra": [{"function": "sum", "column": "value"}, {"function": "max", "column": "value"}]}},
        {"VALUE_SCHEMA"},
    ),
    "one more key": ({"aggregation": {"key": ["user", "event_id"]}}, {"KEY_SCHEMA"}),
    "other key, same type": (
        {"source": {"schema": WIDER_SOURCE}, "aggregation": {"key": ["region"]}},
        {"KEY_COLUMNS"},
    ),
    "watermark": ({"event_time": {"watermark": "20 minutes"}}, {"WATERMARK"}),
    "window size": ({"aggregation": {"window": "30 minutes"}}, {"WINDOW"}),
    "window slide": ({"aggregation": {"slide": "10 minutes"}}, {"WINDOW"}),
    "kind": (
        {"aggregation": {"kind": "session", "gap": "20 minutes", "window": None, "extra": None}},
        {"OPERATORS_CHANGED"},
    ),
}


@pytest.mark.parametrize("change", list(WINDOW_CHANGES), ids=list(WINDOW_CHANGES))
def test_window_changes(spark: SparkSession, window: Pipeline, change: str) -> None:
    tables, expected = WINDOW_CHANGES[change]
    config, path = window.config(**tables)
    report = check_config(config, str(path), spark=spark)
    assert _codes(report) == expected, report.problems
    assert report.compatible is (not expected)
    for problem in report.problems:
        assert problem.message and problem.fix
    if change == "shuffle partitions":
        assert f"tidemark state repartition {config.checkpoint.location} --partitions 4" in report.problems[0].fix
        assert main(["check", str(path)]) == 1
    if change == "unchanged":
        assert main(["check", str(path)]) == 0
        assert "window 900s every 900s" in report.compared  # measured on the open windows in the state


def test_allowed_result_change_passes(spark: SparkSession, window: Pipeline) -> None:
    config, path = window.config(event_time={"watermark": "20 minutes"})
    report = check_config(config, str(path), spark=spark, allow=frozenset({"WATERMARK"}))
    assert report.compatible
    assert [(p.code, p.blocking) for p in report.problems] == [("WATERMARK", False)]


def test_session_gap_and_compatible_session(spark: SparkSession, session: Pipeline) -> None:
    config, path = session.config()
    assert check_config(config, str(path), spark=spark).compatible
    config, path = session.config(aggregation={"gap": "30 minutes"})
    assert _codes(check_config(config, str(path), spark=spark)) == {"SESSION_GAP"}


CUSTOM_CHANGES: dict[str, tuple[str, set[str]]] = {
    "same processor": ("Count", set()),
    "new code, same state": ("CountDifferently", set()),
    "wider state": ("CountWithFirstSeen", {"VALUE_SCHEMA"}),
    "processing time": ("CountByWallClock", {"TIME_MODE"}),
}


@pytest.mark.parametrize("change", list(CUSTOM_CHANGES), ids=list(CUSTOM_CHANGES))
def test_processor_changes(spark: SparkSession, custom: Pipeline, change: str) -> None:
    name, expected = CUSTOM_CHANGES[change]
    config, path = custom.config(aggregation={"processor": f"evolve_processors:{name}"})
    assert _codes(check_config(config, str(path), spark=spark)) == expected


def _snapshot(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size for p in folder.rglob("*") if p.is_file()}


def test_rehearsal_reports_sparks_verdict_and_leaves_the_checkpoint_alone(
    spark: SparkSession, window: Pipeline, tmp_path: Path
) -> None:
    config, path = window.config()
    checkpoint = Path(config.checkpoint.location)
    before = _snapshot(checkpoint)
    report = check_config(config, str(path), spark=spark, rehearse_query=True)
    assert report.rehearsal is not None and report.rehearsal.ok, report.rehearsal
    assert report.compatible

    changed, changed_path = window.config(
        aggregation={"extra": [{"function": "sum", "column": "value"}, {"function": "avg", "column": "value"}]}
    )
    report = check_config(changed, str(changed_path), spark=spark, rehearse_query=True)
    assert report.rehearsal is not None and not report.rehearsal.ok
    assert "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE" in report.rehearsal.verdict
    assert "\n" not in report.rehearsal.verdict
    assert _snapshot(checkpoint) == before
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_a_reused_session_keeps_its_own_settings(spark: SparkSession, window: Pipeline) -> None:
    """On an active session (a notebook's), `check`, run's pre-check and the state reader apply tidemark's settings
    (the UTC time zone state is read in, the config's shuffle partitions, Spark's log switched off while a reader
    fails) for the command only, not for good."""
    from tidemark.evolve.guard import require_restartable
    from tidemark.statestore.reader import state_session

    config, path = window.config()
    own = {"spark.sql.session.timeZone": "America/New_York", "spark.sql.shuffle.partitions": "7"}

    def settings() -> dict[str, str | None]:
        return {key: spark.conf.get(key, None) for key in own}

    with runtime_conf(spark, own):
        assert check_config(config, str(path)).compatible
        assert settings() == own
        report = require_restartable(config, str(path))
        assert report is not None and report.compatible
        assert settings() == own
        jvm: Any = spark.sparkContext._jvm
        level = str(jvm.org.apache.logging.log4j.LogManager.getRootLogger().getLevel().name())
        spark.sparkContext.setLogLevel("WARN")
        try:
            with state_session(config.checkpoint.location) as (reader, _):
                assert reader is spark
                assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
            assert settings() == own
            assert str(jvm.org.apache.logging.log4j.LogManager.getRootLogger().getLevel().name()) == "WARN"
        finally:
            spark.sparkContext.setLogLevel(level)


def _plan_and_record_the_cap(monkeypatch: pytest.MonkeyPatch, planned_mb: int) -> list[str | None]:
    """plan_start plans a cap of planned_mb (one no config or default here gives, so a read can only have it from
    the plan); returns the list each state read of `check` appends the cap of its session to."""
    import dataclasses

    import tidemark.evolve.check as check
    import tidemark.sizing.store_start as store_start
    from tidemark.config.rocksdb import MAX_MEMORY_USAGE

    plan_start = store_start.plan_start

    def planned(config: TidemarkConfig, *args: Any, **kwargs: Any) -> store_start.StartPlan:
        plan = plan_start(config, *args, **kwargs)
        sized = plan.config.checkpoint.model_copy(update={"bounded_memory_mb": planned_mb})
        return dataclasses.replace(plan, config=plan.config.model_copy(update={"checkpoint": sized}))

    seen: list[str | None] = []
    sample = check._state_sample

    def recording(session: SparkSession, config: TidemarkConfig, columns: list[str]) -> list[Any]:
        seen.append(session.conf.get(MAX_MEMORY_USAGE, None))
        return sample(session, config, columns)

    monkeypatch.setattr(store_start, "plan_start", planned)
    monkeypatch.setattr(check, "_state_sample", recording)
    return seen


def test_runs_pre_start_check_reads_the_state_with_the_planned_rocksdb_cap(
    spark: SparkSession, window: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RocksDB's cap is one per JVM and the first store opened sets it: the state `run`'s pre-start check reads
    must be opened with the cap the run planned, not the config's unsized default."""
    from tidemark.config.rocksdb import MAX_MEMORY_USAGE
    from tidemark.evolve.guard import require_restartable

    planned_mb = 777
    seen = _plan_and_record_the_cap(monkeypatch, planned_mb)
    config, path = window.config()
    assert config.spark_conf()[MAX_MEMORY_USAGE] != str(planned_mb)
    report = require_restartable(config, str(path))
    assert report is not None and report.compatible
    assert seen and set(seen) == {str(planned_mb)}
    assert spark.conf.get(MAX_MEMORY_USAGE, None) != str(planned_mb)  # given back after the check


@pytest.mark.parametrize("command", ["recover", "adopt"])
def test_recover_and_adopt_read_the_state_with_the_planned_rocksdb_cap(
    spark: SparkSession, window: Pipeline, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, command: str
) -> None:
    """Their pre-checks open the state in the session their replay runs in: with the cap `run` would plan."""
    from tidemark.config.rocksdb import MAX_MEMORY_USAGE
    from tidemark.evolve.guard import SameQuery, require_describes_old_job
    from tidemark.recovery.adopt import adopt_job
    from tidemark.recovery.apply import recover_pipeline

    planned_mb = 779
    seen = _plan_and_record_the_cap(monkeypatch, planned_mb)
    config, path = window.config()
    if command == "recover":
        recover_pipeline(config, precheck=SameQuery(config, str(path)))
    else:
        old = config.checkpoint.location
        moved = config.model_copy(
            update={
                "checkpoint": config.checkpoint.model_copy(update={"location": str(tmp_path / "new-checkpoint")}),
                "sink": config.sink.model_copy(update={"path": str(tmp_path / "new-sink")}),
            }
        )
        adopt_job(
            moved,
            old,
            precheck=lambda launch: require_describes_old_job(moved, str(path), old, launch.session(), launch.config),
        )
    assert seen and set(seen) == {str(planned_mb)}
    assert spark.conf.get(MAX_MEMORY_USAGE, None) != str(planned_mb)  # given back afterwards
