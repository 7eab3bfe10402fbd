"""`tidemark check CONFIG`: can this config (and its processor code) restart from its existing checkpoint?

Two kinds of problems, both exit 1 unless allowed with `--allow CODE`:
- Spark refuses the restart, or silently keeps the checkpoint's setting instead of the config's: the state
  key or value schema, the stateful operators, the shuffle partitions, the state store provider, the
  checkpoint format, settings the offset log pins, the output and time mode;
- Spark accepts it but results change: the key columns, the watermark delay, the window size or slide,
  the session gap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tidemark.config import AggregationKind, TidemarkConfig
from tidemark.config.model import HDFS_PROVIDER, PROVIDER_KEY
from tidemark.evolve.continuation import continuation
from tidemark.evolve.expect import ExpectedState, expected_state
from tidemark.evolve.rehearse import Rehearsal, rehearse
from tidemark.formats import (
    SHUFFLE_PARTITIONS,
    Checkpoint,
    ColumnFamilySchema,
    Field,
    OperatorEntry,
    field_names,
    operator_entries,
    store_schemas,
    type_signature,
)
from tidemark.spark.lines import Feature, first_line_with, lacking

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


FORMAT_VERSION_KEY = "spark.sql.streaming.stateStore.checkpointFormatVersion"
OFFSET_LOG_KEY = "spark.sql.streaming.offsetLog.formatVersion"
SOURCE_EVOLUTION_KEY = "spark.sql.streaming.queryEvolution.enableSourceEvolution"
WATERMARK_KEY = "spark.watermarkDelayMs"
TIME_WINDOW_KEY = "spark.timeWindow"
SESSION_WINDOW_KEY = "spark.sessionWindow"
_SAMPLE_ROWS = 1000


@dataclass(frozen=True)
class Problem:
    """One difference between the config and the checkpoint, and what to do about it."""

    code: str
    message: str
    fix: str
    blocking: bool = True


@dataclass(frozen=True)
class CheckReport:
    """The verdict of `tidemark check`."""

    config: str
    checkpoint: str
    batch: int | None
    compatible: bool
    problems: tuple[Problem, ...]
    compared: tuple[str, ...]  # what was compared and found equal
    rehearsal: Rehearsal | None = None


class _Findings:
    def __init__(self, allow: frozenset[str]) -> None:
        self.allow = allow
        self.problems: list[Problem] = []
        self.compared: list[str] = []

    def problem(self, code: str, message: str, fix: str) -> None:
        self.problems.append(Problem(code, message, fix, blocking=code not in self.allow))

    def same(self, what: str) -> None:
        self.compared.append(what)


def _provider_name(provider: str) -> str:
    return "rocksdb" if "RocksDB" in provider else "hdfs"


def _check_settings(checkpoint: Checkpoint, batch: int, config: TidemarkConfig, found: _Findings) -> None:
    pinned = checkpoint.offset(batch).conf
    wanted = config.spark_conf()
    path = checkpoint.uri
    old_n, new_n = pinned.get(SHUFFLE_PARTITIONS), wanted[SHUFFLE_PARTITIONS]
    if old_n is not None and old_n != new_n:
        found.problem(
            "SHUFFLE_PARTITIONS",
            f"the config asks for {new_n} shuffle partitions, the checkpoint has {old_n}: Spark keeps {old_n} "
            "(it restores the count from the checkpoint and ignores the config)",
            f"run 'tidemark state repartition {path} --partitions {new_n} --apply' with the query stopped, "
            f"or set [spark] shuffle_partitions = {old_n}",
        )
    else:
        found.same(f"shuffle partitions {new_n}")
    old_provider = pinned.get(PROVIDER_KEY, HDFS_PROVIDER)
    # Unset, [checkpoint] state_store follows the checkpoint (tidemark.sizing.store_start): only a set one can differ.
    explicit = "state_store" in config.checkpoint.model_fields_set
    new_provider = wanted.get(PROVIDER_KEY, HDFS_PROVIDER) if explicit else old_provider
    if old_provider != new_provider:
        old_name, new_name = _provider_name(old_provider), _provider_name(new_provider)
        found.problem(
            "STATE_STORE_PROVIDER",
            f"the config uses the {new_name} state store, the checkpoint was written by the {old_name} store: "
            f"Spark keeps {old_name}",
            f"run 'tidemark state repartition {path} --partitions {old_n or new_n} --state-store {new_name} --apply' "
            f'with the query stopped, or set [checkpoint] state_store = "{old_name}"',
        )
    else:
        found.same(f"state store {_provider_name(new_provider)}")
    commit = checkpoint.commit(batch)
    old_format = "2" if commit.checkpoint_format == 2 else pinned.get(FORMAT_VERSION_KEY, "1")
    new_format = wanted.get(FORMAT_VERSION_KEY, "1")
    if old_format != new_format:
        found.problem(
            "CHECKPOINT_FORMAT",
            f"the config uses checkpoint format v{new_format}, the checkpoint is format v{old_format}",
            f"set [checkpoint] format_version = {old_format}, or start a new checkpoint",
        )
    else:
        found.same(f"checkpoint format v{new_format}")
    user_conf = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in config.spark.conf.items()}
    for key, value in sorted(user_conf.items()):
        if key in pinned and key not in (SHUFFLE_PARTITIONS, PROVIDER_KEY) and pinned[key] != value:
            found.problem(
                "SETTING_IGNORED",
                f"[spark.conf] sets {key} = {value}, the checkpoint pins {pinned[key]}: Spark keeps {pinned[key]}",
                f"remove {key} from [spark.conf], or start a new checkpoint",
            )
    _check_offset_log(checkpoint.offset(batch).version, user_conf, path, found)


def _check_offset_log(version: int, user_conf: dict[str, str], path: str, found: _Findings) -> None:
    """The offset log's version is the checkpoint's: Spark 4.2.1 and 4.3.0 write no batch that upgrades a v1 log
    (tried: with formatVersion=2 set they keep writing v1; with source evolution on they refuse to start)."""
    if version < 2 and user_conf.get(SOURCE_EVOLUTION_KEY) == "true":
        found.problem(
            "OFFSET_LOG",
            f"[spark.conf] turns on {SOURCE_EVOLUTION_KEY}, but {path} has a v1 offset log: Spark refuses to start "
            "(STREAMING_QUERY_EVOLUTION_ERROR.CANNOT_ENABLE_ON_EXISTING_CHECKPOINT)",
            f"remove {SOURCE_EVOLUTION_KEY} from [spark.conf], or start a new checkpoint with {OFFSET_LOG_KEY} = 2",
        )
        return
    asked = user_conf.get(OFFSET_LOG_KEY)
    if version < 2 and asked is not None and asked != str(version):
        found.problem(
            "OFFSET_LOG",
            f"[spark.conf] sets {OFFSET_LOG_KEY} = {asked}, but {path} has a v{version} offset log: Spark keeps "
            f"writing v{version} (no Spark upgrades an existing log)",
            f"remove {OFFSET_LOG_KEY} from [spark.conf], or start a new checkpoint",
        )
    else:
        found.same(f"offset log v{version}")


def _check_operators(entries: list[OperatorEntry], expected: ExpectedState, found: _Findings) -> bool:
    names_found = [e.metadata.name for e in entries]
    if names_found != [expected.operator]:
        found.problem(
            "OPERATORS_CHANGED",
            f"the checkpoint's stateful operators are {names_found or 'none'}, the config's query has "
            f"[{expected.operator}] ([aggregation] kind = {expected.kind.value!r})",
            "a different stateful step cannot use the old state: revert [aggregation] kind, or point "
            "[checkpoint] location at a new folder",
        )
        return False
    found.same(f"stateful operators [{expected.operator}]")
    properties = entries[0].metadata.properties
    if properties.get("outputMode") not in (None, "Append", "append"):
        found.problem(
            "OUTPUT_MODE",
            f"the checkpoint's output mode is {properties['outputMode']}, tidemark writes in Append mode",
            "start a new checkpoint",
        )
    elif properties.get("outputMode"):
        found.same("output mode Append")
    return True


def _check_spark(checkpoint: Checkpoint, found: _Findings) -> None:
    """Can the installed Spark continue the checkpoint at all (whatever the config)?"""
    verdict = continuation(checkpoint)
    for reason in verdict.missing:
        found.problem(
            "SPARK_CANNOT_CONTINUE",
            reason,
            "run the query on a Spark that has it, or start a new checkpoint",
        )
    if verdict.ok:
        found.same(f"Spark {verdict.spark_version} can continue this checkpoint (written by {verdict.written_by})")


def _has_operator_metadata(checkpoint: Checkpoint) -> bool:
    return any(checkpoint.operator_metadata(op) is not None for op in checkpoint.operator_ids())


def _check_operators_by_schema(checkpoint: Checkpoint, expected: ExpectedState, found: _Findings) -> bool:
    """A checkpoint from before operator metadata (Spark 3.x): one operator whose state schema file matches."""
    operators = checkpoint.operator_ids()
    if len(operators) != 1 or expected.kind is AggregationKind.CUSTOM:
        found.problem(
            "OPERATORS_CHANGED",
            f"the checkpoint has {len(operators)} stateful operators and no operator metadata (written before Spark "
            f"{first_line_with(Feature.OPERATOR_METADATA)}), the config's query has [{expected.operator}]",
            "a different stateful step cannot use the old state: revert [aggregation] kind, or point "
            "[checkpoint] location at a new folder",
        )
        return False
    found.same(
        f"one stateful operator, compared by its state schema (no operator metadata: written before Spark "
        f"{first_line_with(Feature.OPERATOR_METADATA)}, which writes it from the next batch on)"
    )
    return True


def _special(field: Field) -> bool:
    return TIME_WINDOW_KEY in field.metadata or SESSION_WINDOW_KEY in field.metadata


def _check_schemas(
    stored: ColumnFamilySchema, expected: ExpectedState, found: _Findings, key_order_matters: bool = True
) -> None:
    old_key, new_key = type_signature(stored.key), type_signature(expected.key)
    if not key_order_matters and sorted(type_signature((f,)) for f in stored.key) == sorted(
        type_signature((f,)) for f in expected.key
    ):
        # Another job's state grouped by the same columns in another order: a new checkpoint does not mind.
        old_names = sorted(n for f, n in zip(stored.key, field_names(stored.key), strict=True) if not _special(f))
        old_names = [n for n in old_names if n != "sessionStartTime"]
        if old_names != sorted(expected.key_columns):
            found.problem(
                "KEY_COLUMNS",
                f"the old job grouped by {old_names}, the config by {sorted(expected.key_columns)}",
                "set [aggregation] key to the old job's grouping columns",
            )
        else:
            found.same(f"key columns {old_names}")
        old_key = new_key
    elif old_key != new_key:
        found.problem(
            "KEY_SCHEMA",
            f"Spark will refuse the restart (STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE): the state key is "
            f"({old_key}) in the checkpoint and ({new_key}) in the config's query",
            "revert the key columns or their types, or point [checkpoint] location at a new folder",
        )
    else:
        found.same(f"state key ({new_key})")
        old_columns = [n for f, n in zip(stored.key, field_names(stored.key), strict=True) if not _special(f)]
        old_columns = [n for n in old_columns if n != "sessionStartTime"]
        if key_order_matters and old_columns != list(expected.key_columns):
            found.problem(
                "KEY_COLUMNS",
                f"the key columns change from {old_columns} to {list(expected.key_columns)}; Spark accepts it "
                "(same types) but old state is then merged into the new keys by value",
                "revert [aggregation] key, or point [checkpoint] location at a new folder",
            )
        else:
            found.same(f"key columns {old_columns}")
    old_value, new_value = type_signature(stored.value), type_signature(expected.value)
    if old_value != new_value:
        found.problem(
            "VALUE_SCHEMA",
            f"Spark will refuse the restart (STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE): the state value is "
            f"({old_value}) in the checkpoint and ({new_value}) in the config's query",
            "revert the aggregates (or the processor's state_schema), or point [checkpoint] location at a new folder",
        )
    else:
        found.same(f"state value ({new_value})")


def _watermark_ms(stored: ColumnFamilySchema) -> int | None:
    for field in (*stored.key, *stored.value):
        if WATERMARK_KEY in field.metadata:
            return int(field.metadata[WATERMARK_KEY])
    return None


def _check_watermark(stored: ColumnFamilySchema, expected: ExpectedState, found: _Findings) -> None:
    recorded = _watermark_ms(stored)
    if recorded is None:
        return
    if recorded != expected.watermark_ms:
        found.problem(
            "WATERMARK",
            f"the watermark delay changes from {recorded / 1000:g}s to {expected.watermark_ms / 1000:g}s: Spark "
            "accepts it, but which late events count changes from the next batch on",
            "revert [event_time] watermark, or allow it with --allow WATERMARK",
        )
    else:
        found.same(f"watermark delay {recorded / 1000:g}s")


def _state_sample(spark: SparkSession, config: TidemarkConfig, columns: list[str]) -> list[Any]:
    from tidemark.session import runtime_conf
    from tidemark.statestore.reader import ReadTarget, private_state_source, read_state, run_action, session_conf

    target = ReadTarget(0, "default")
    # A private copy: Spark's reader writes into the folder it reads, and `check` only reads.
    with private_state_source(config.checkpoint.location) as source:
        # Read with the checkpoint's format, whatever the new config asks for.
        with runtime_conf(spark, {FORMAT_VERSION_KEY: "1", **session_conf(source.checkpoint)}):
            frame = read_state(spark, source, target).selectExpr(*columns).limit(_SAMPLE_ROWS)
            return list(run_action(frame.collect, source, target, None))


def _check_window(
    spark: SparkSession, config: TidemarkConfig, stored: ColumnFamilySchema, expected: ExpectedState, found: _Findings
) -> None:
    window = next((f for f in stored.key if TIME_WINDOW_KEY in f.metadata), None)
    if window is None or expected.window_ms is None or expected.slide_ms is None:
        return
    rows = _state_sample(
        spark, config, [f"unix_millis(key.`{window.name}`.start) AS s", f"unix_millis(key.`{window.name}`.end) AS e"]
    )
    if not rows:
        found.same("window size: no open window in the state to measure")
        return
    sizes = {int(r["e"]) - int(r["s"]) for r in rows}
    misaligned = [int(r["s"]) for r in rows if int(r["s"]) % expected.slide_ms]
    if sizes != {expected.window_ms} or misaligned:
        found.problem(
            "WINDOW",
            f"the open windows in the state are {sorted(s / 1000 for s in sizes)}s long (starts every "
            f"{'other interval' if misaligned else 'slide'}); the config makes {expected.window_ms / 1000:g}s "
            f"windows every {expected.slide_ms / 1000:g}s: the open windows would be emitted with the old size",
            "revert [aggregation] window/slide, or let the open windows close (stop the source until the "
            "watermark passes them) and start a new checkpoint",
        )
    else:
        found.same(f"window {expected.window_ms / 1000:g}s every {expected.slide_ms / 1000:g}s")


def _check_gap(
    spark: SparkSession, config: TidemarkConfig, stored: ColumnFamilySchema, expected: ExpectedState, found: _Findings
) -> None:
    session = next((f for f in stored.value if SESSION_WINDOW_KEY in f.metadata), None)
    last = [f for f in stored.value if f.type == "timestamp"]
    if session is None or not last or expected.gap_ms is None:
        return
    rows = _state_sample(
        spark, config, [f"unix_millis(value.`{session.name}`.end) - unix_millis(value.`{last[-1].name}`) AS g"]
    )
    gaps = {int(r["g"]) for r in rows}
    if not gaps:
        found.same("session gap: no open session in the state to measure")
    elif gaps != {expected.gap_ms}:
        found.problem(
            "SESSION_GAP",
            f"open sessions in the state end {sorted(g / 1000 for g in gaps)}s after their last event; the config's "
            f"gap is {expected.gap_ms / 1000:g}s: sessions open now would close with the old gap",
            "revert [aggregation] gap, or allow it with --allow SESSION_GAP",
        )
    else:
        found.same(f"session gap {expected.gap_ms / 1000:g}s")


def _check_processor(entry: OperatorEntry, expected: ExpectedState, found: _Findings) -> None:
    props = entry.metadata.properties
    mode = props.get("timeMode")
    if mode is not None and mode != expected.time_mode:
        found.problem(
            "TIME_MODE",
            f"the processor's time mode changes from {mode} to {expected.time_mode}: Spark refuses the restart",
            "revert the processor's time_mode, or point [checkpoint] location at a new folder",
        )
    elif mode is not None:
        found.same(f"time mode {mode}")
    variables = {str(v.get("stateName")): v for v in props.get("stateVariables") or [] if isinstance(v, dict)}
    variable = variables.get(expected.family or "")
    if variable is None:
        found.problem(
            "STATE_VARIABLES",
            f"the checkpoint has no state variable {expected.family!r} (it has {sorted(variables)})",
            "the state was written by other code: point [checkpoint] location at a new folder",
        )
        return
    if bool(variable.get("ttlEnabled")) != bool(expected.ttl):
        found.problem(
            "TTL",
            f"the processor's ttl is {'set' if expected.ttl else 'unset'} but the state was written "
            f"{'with' if variable.get('ttlEnabled') else 'without'} one: Spark refuses the restart",
            "revert the processor's ttl, or point [checkpoint] location at a new folder",
        )
    else:
        found.same(f"state variable {expected.family} ({'with' if expected.ttl else 'no'} ttl)")


def _stored_family(checkpoint: Checkpoint, expected: ExpectedState) -> ColumnFamilySchema | None:
    schemas = store_schemas(checkpoint, 0)
    wanted = expected.family or "default"
    return next((s for s in schemas if s.name == wanted), None)


def _probe_unavailable(session: SparkSession, config: TidemarkConfig, found: _Findings) -> bool:
    """True (and said among the comparisons) when the state schema of a window or session aggregation cannot be
    probed: its probe reads Spark's physical plan through a JVM in this process, which a Connect session lacks."""
    from tidemark.connect import is_connect

    if not is_connect(session) or config.aggregation.kind is AggregationKind.CUSTOM:
        return False
    found.same(
        "state operator and schema not compared over Spark Connect (the probe needs a local JVM): Spark compares "
        "the schema when the query starts; `tidemark check CONFIG` without SPARK_REMOTE compares it beforehand"
    )
    return True


def check_config(
    config: TidemarkConfig,
    config_path: str,
    *,
    rehearse_query: bool = False,
    allow: frozenset[str] = frozenset(),
    spark: SparkSession | None = None,
    key_order_matters: bool = True,
    read_with: TidemarkConfig | None = None,
) -> CheckReport:
    """Compare the config's query with its checkpoint; optionally rehearse it on a copy.

    read_with: the config whose Spark settings the state is read and rehearsed with (default: config). Run's
    pre-start check passes the planned one: RocksDB's cap is one per JVM and the first store opened sets it.
    """
    from tidemark.needs import needs_of
    from tidemark.spark.environment import spark_session

    checkpoint = Checkpoint.open(config.checkpoint.location)
    found = _Findings(allow)
    if not checkpoint.exists() or not checkpoint.commit_batches():
        found.same("no committed batch in the checkpoint yet: the query starts fresh")
        return CheckReport(config_path, checkpoint.uri, None, True, (), tuple(found.compared))
    checkpoint.require()
    batch = checkpoint.latest_committed_batch()
    _check_spark(checkpoint, found)
    _check_settings(checkpoint, batch, config, found)
    rehearsal = None
    # The one route to Spark: a new session gets the config's jars (the Kafka connector), credentials and settings,
    # as `run` would; a given or running one gets the settings for the duration.
    read_settings = {**(read_with or config).spark_conf(), "spark.sql.session.timeZone": "UTC"}
    needs = needs_of(config, extra=read_settings, purpose="check")
    with spark_session(needs, spark) as session:
        # RocksDB stores report to the StateStoreCoordinator, which Spark starts with the streams manager.
        session.streams.active  # noqa: B018
        expected = None if _probe_unavailable(session, config, found) else expected_state(session, config)
        entries = operator_entries(checkpoint) if _has_operator_metadata(checkpoint) else None
        if expected is not None and (
            _check_operators(entries, expected, found)
            if entries is not None
            else _check_operators_by_schema(checkpoint, expected, found)
        ):
            stored = _stored_family(checkpoint, expected)
            if stored is None:
                found.problem(
                    "STATE_SCHEMA_MISSING",
                    "the checkpoint has no state schema file for its operator",
                    f"run the query once on Spark {first_line_with(Feature.OPERATOR_METADATA)} or newer, "
                    "which writes it",
                )
            else:
                _check_schemas(stored, expected, found, key_order_matters)
                _check_watermark(stored, expected, found)
                no_reader = lacking(Feature.STATE_READER)
                if expected.kind in {AggregationKind.WINDOW, AggregationKind.SESSION} and no_reader is not None:
                    # The open windows' size and the sessions' gap are read from the state itself.
                    found.same(f"window size and session gap not measured in the state: {no_reader}")
                elif expected.kind is AggregationKind.WINDOW:
                    _check_window(session, config, stored, expected, found)
                elif expected.kind is AggregationKind.SESSION:
                    _check_gap(session, config, stored, expected, found)
                elif entries is not None:
                    _check_processor(entries[0], expected, found)
        if rehearse_query:
            from tidemark.connect import refuse_on_connect

            refuse_on_connect(
                session,
                "check --rehearse (its copy of the checkpoint is made on this machine, out of the server's reach)",
                "run `tidemark check --rehearse` without SPARK_REMOTE",
            )
            rehearsal = rehearse(session, config)
    problems = tuple(found.problems)
    compatible = not any(p.blocking for p in problems) and (rehearsal is None or rehearsal.ok)
    return CheckReport(config_path, checkpoint.uri, batch, compatible, problems, tuple(found.compared), rehearsal)
