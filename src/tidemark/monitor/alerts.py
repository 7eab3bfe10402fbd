"""Prometheus alert rules on tidemark's series, rendered as a rules file (`tidemark metrics rules`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta

from tidemark.errors import UsageError
from tidemark.sizing.advice import COMMIT_SHARE_HIGH

RULE_GROUP = "tidemark"
RUN = "pipeline, run_id"
QUERY = "pipeline, run_id, query"
# The run is still going: alerts about a run's figures stay quiet once it ended (its last push stays in the
# Pushgateway until the next run of the pipeline replaces it).
RUNNING = f'(max by ({RUN}) (tidemark_run_state{{state="running"}}) == 1)'
# Seconds since the run last showed life: a completed batch, an idle report (no new data), or its start.
SINCE_LAST_SIGN = (
    f"(time() - max by ({RUN}) ("
    '{__name__=~"tidemark_last_progress_timestamp_seconds|tidemark_last_idle_timestamp_seconds'
    '|tidemark_run_start_timestamp_seconds"}))'
)


@dataclass(frozen=True)
class AlertThresholds:
    """The limits of the alert rules (flags of `tidemark metrics rules`)."""

    stuck_after: timedelta | None = None  # None: each run's own [monitor] stuck_after (tidemark_stuck_after_seconds)
    commit_share: float = COMMIT_SHARE_HIGH
    quarantine_share: float = 0.01
    watermark_lag: timedelta = timedelta(hours=1)
    window: timedelta = timedelta(minutes=15)  # the range of the share rules
    state_growth_window: timedelta = timedelta(minutes=30)  # range and hold time of the state growth rule
    pending: timedelta = timedelta(minutes=5)  # how long share and lag conditions must hold before firing

    def __post_init__(self) -> None:
        for name in ("commit_share", "quarantine_share"):
            value = getattr(self, name)
            if not 0 < value < 1:
                msg = f"--{name.replace('_', '-')} must be a share between 0 and 1 (e.g. 0.25), not {value}"
                raise UsageError(msg)
        durations = {
            "stuck-after": self.stuck_after,
            "watermark-lag": self.watermark_lag,
            "window": self.window,
            "state-growth-window": self.state_growth_window,
        }
        for name, duration in durations.items():
            if duration is not None and duration.total_seconds() < 1:
                msg = f"--{name} must be at least one second"
                raise UsageError(msg)
        if self.pending.total_seconds() < 0:
            msg = "--for must not be negative"
            raise UsageError(msg)


@dataclass(frozen=True)
class AlertRule:
    """One alerting rule of the rules file."""

    name: str
    expr: str
    hold: timedelta  # the rule's `for`
    severity: str
    summary: str
    description: str


def promql_duration(value: timedelta) -> str:
    """A PromQL duration for a timedelta: 1h30m, 15m, 90s -> 1m30s, 250ms."""
    millis = round(value.total_seconds() * 1000)
    if millis == 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        count, millis = divmod(millis, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def _number(value: float) -> str:
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


def alert_rules(limits: AlertThresholds) -> tuple[AlertRule, ...]:
    """The alert rules for these limits."""
    window = promql_duration(limits.window)
    growth = promql_duration(limits.state_growth_window)
    stuck_limit = (
        f"on ({RUN}) max by ({RUN}) (tidemark_stuck_after_seconds)"
        if limits.stuck_after is None
        else _number(limits.stuck_after.total_seconds())
    )
    stuck_text = "its stuck_after" if limits.stuck_after is None else promql_duration(limits.stuck_after)
    where = "pipeline {{ $labels.pipeline }} (run {{ $labels.run_id }})"
    return (
        AlertRule(
            name="TidemarkNoBatchCommitted",
            expr=(
                f"{SINCE_LAST_SIGN}\n"
                f"and on ({RUN}) (\n"
                f"  max by ({RUN}) (tidemark_stuck) == 1\n"
                "  or (\n"
                f"    {SINCE_LAST_SIGN}\n"
                f"      > {stuck_limit}\n"
                f"    and on ({RUN}) {RUNNING}\n"
                "  )\n"
                ")"
            ),
            hold=timedelta(0),
            severity="critical",
            summary=f"{where}: no batch committed for {{{{ $value | humanizeDuration }}}}",
            description=(
                f"No micro-batch completed for longer than {stuck_text} while the query was not idle, or tidemark's "
                "watchdog found the batch stuck (the final state of a run stopped as stuck keeps this firing until "
                "the pipeline's next run). Look at the run's 'stuck' line (tidemark analyze LOG) for the running "
                "stages; a driver that stopped pushing is dead."
            ),
        ),
        AlertRule(
            name="TidemarkStateGrowing",
            expr=(
                f"max by ({QUERY}, operator) (deriv(tidemark_state_rows[{growth}])) * 3600 > 0\n"
                f"and on ({QUERY}) (max by ({QUERY}) (delta(tidemark_watermark_timestamp_seconds[{growth}])) > 0)\n"
                f"and on ({RUN}) {RUNNING}"
            ),
            hold=limits.state_growth_window,
            severity="warning",
            summary=(
                f"{where}: state of {{{{ $labels.operator }}}} grows by {{{{ $value | humanize }}}} rows/hour "
                "while the watermark advances"
            ),
            description=(
                f"The operator's state rows kept growing over every {growth} window for {growth} although the "
                "watermark moved on: state that is never evicted (a missing watermark on the key, a TTL, or "
                "custom logic that never removes state). Check with tidemark state stats / expired."
            ),
        ),
        AlertRule(
            name="TidemarkCommitShareHigh",
            expr=(
                f"(\n  max by ({QUERY}) (increase(tidemark_state_commit_wall_seconds_total[{window}]))\n"
                f"  /\n  max by ({QUERY}) (increase(tidemark_batch_duration_seconds_total[{window}]))\n"
                f") > {_number(limits.commit_share)}\n"
                f"and on ({RUN}) {RUNNING}"
            ),
            hold=limits.pending,
            severity="warning",
            summary=f"{where}: committing state takes {{{{ $value | humanizePercentage }}}} of batch time",
            description=(
                f"Over the last {window}, state commits took more than {limits.commit_share:.0%} of the batch time "
                "(the planner's threshold). Run tidemark plan checkpoint on the progress log for the state store "
                "and changelog advice."
            ),
        ),
        AlertRule(
            name="TidemarkQuarantineShareHigh",
            expr=(
                f"(\n  max by ({QUERY}) (increase(tidemark_quarantined_records_total[{window}]))\n"
                f"  /\n  max by ({QUERY}) (increase(tidemark_input_rows_total[{window}]))\n"
                f") > {_number(limits.quarantine_share)}\n"
                f"and on ({RUN}) {RUNNING}"
            ),
            hold=limits.pending,
            severity="warning",
            summary=f"{where}: {{{{ $value | humanizePercentage }}}} of the input went to quarantine",
            description=(
                f"Over the last {window}, more than {limits.quarantine_share:.1%} of the input records were "
                "malformed. Read the quarantine folder (each record keeps its raw line, file and reason) and fix "
                "the producer or the [source] schema."
            ),
        ),
        AlertRule(
            name="TidemarkWatermarkLagHigh",
            expr=(
                f"max by ({QUERY}) (tidemark_watermark_lag_seconds) > {_number(limits.watermark_lag.total_seconds())}\n"
                f"and on ({RUN}) {RUNNING}"
            ),
            hold=limits.pending,
            severity="warning",
            summary=f"{where}: the watermark trails the batch time by {{{{ $value | humanizeDuration }}}}",
            description=(
                f"The event-time watermark is more than {promql_duration(limits.watermark_lag)} behind the batch "
                "start: the input is late or the query is behind its source, so results are written late."
            ),
        ),
        AlertRule(
            name="TidemarkRocksDBCrawlAhead",
            expr=f"max by ({QUERY}) (tidemark_rocksdb_crawl_warning) == 1\nand on ({RUN}) {RUNNING}",
            hold=timedelta(0),
            severity="warning",
            summary=f"{where}: RocksDB reads go to disk more and more batch after batch",
            description=(
                "The share of RocksDB gets that miss the block cache climbed batch after batch as the state grew: "
                "its memory cap is too small for the state, and batches slow down until one takes hours. The run's "
                "ROCKSDB_CRAWL_AHEAD warning (tidemark analyze LOG) names the bounded_memory_mb to set; the cap "
                "changes at the next start."
            ),
        ),
        AlertRule(
            name="TidemarkRunFailed",
            expr=f'max by ({RUN}) (tidemark_run_state{{state="failed"}}) == 1',
            hold=timedelta(0),
            severity="critical",
            summary=f"{where} failed",
            description=(
                "The streaming query stopped with an error (or never started). The error is in the run's output "
                "and in the progress log's 'terminated' line; the next run restarts from the checkpoint."
            ),
        ),
    )


def _quoted(text: str) -> str:
    # A JSON string is a valid YAML double-quoted scalar.
    return json.dumps(text)


def rules_yaml(limits: AlertThresholds) -> str:
    """The Prometheus rules file (YAML) for these limits."""
    stuck = "each run's stuck_after" if limits.stuck_after is None else promql_duration(limits.stuck_after)
    lines = [
        "# tidemark alert rules, written by `tidemark metrics rules` (see docs/metrics.md).",
        f"# stuck after: {stuck}; commit share > {_number(limits.commit_share)}; quarantine share > "
        f"{_number(limits.quarantine_share)}; watermark lag > {promql_duration(limits.watermark_lag)}; "
        f"window {promql_duration(limits.window)}; state growth over {promql_duration(limits.state_growth_window)}",
        "groups:",
        f"  - name: {RULE_GROUP}",
        "    rules:",
    ]
    for rule in alert_rules(limits):
        lines.append(f"      - alert: {rule.name}")
        lines.append("        expr: |-")
        lines.extend(f"          {line}" for line in rule.expr.splitlines())
        if rule.hold:
            lines.append(f"        for: {promql_duration(rule.hold)}")
        lines.append("        labels:")
        lines.append(f"          severity: {rule.severity}")
        lines.append("        annotations:")
        lines.append(f"          summary: {_quoted(rule.summary)}")
        lines.append(f"          description: {_quoted(rule.description)}")
    return "\n".join(lines) + "\n"
