"""Build the report page: per run a summary, the findings and six charts."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path

from tidemark.durations import in_words
from tidemark.errors import UsageError
from tidemark.monitor.analyze import (
    DEFAULT_LEAK_BATCHES,
    Finding,
    RunAnalysis,
    RunFold,
    describe_source_lag,
    log_records,
    run_events,
    state_rows_text,
)
from tidemark.monitor.report.svg import PLOT_WIDTH, line_chart, stacked_bars
from tidemark.monitor.series import (
    COMMIT_SHARE,
    DURATION,
    INPUT_RATE,
    PHASE_SERIES,
    PHASES,
    PROCESSED_RATE,
    ROCKSDB_CAP,
    ROCKSDB_MEMORY,
    ROCKSDB_MISS,
    SOURCE_LAG,
    WATERMARK_LAG,
    RunSeries,
    SeriesFold,
    state_memory_series,
    state_rows_series,
)
from tidemark.sizes import format_size

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;background:#fff}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:32px}
h3{font-size:14px;margin:12px 0 4px}
table{border-collapse:collapse;font-size:13px;margin:8px 0}td,th{border:1px solid #ddd;padding:4px 8px;text-align:left}
th{background:#f3f3f3}.charts{display:flex;flex-wrap:wrap;gap:16px}.chart-box{width:560px}
.legend{font-size:12px;margin:2px 0 0 60px}.key{margin-right:12px;white-space:nowrap}
.key i{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
.error{color:#b00020;font-weight:600}.warning{color:#a15c00;font-weight:600}.info{color:#0b5394}
.empty{color:#777;font-style:italic}pre{white-space:pre-wrap;font-size:12px;background:#f6f6f6;padding:8px}
.note{font-size:12px;color:#555}
"""
SLOWEST_TABLE_AFTER = 20  # batches
# No script may run and nothing may be fetched: the page must work offline and data can never execute.
_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


@dataclass(frozen=True)
class ReportResult:
    """Where the report went and what it covers."""

    path: str
    runs: int
    batches: int
    findings: int
    size_bytes: int


def _box(title: str, chart: str) -> str:
    return f'<div class="chart-box"><h3>{escape(title)}</h3>{chart}</div>'


def _charts(series: RunSeries) -> str:
    columns = series.columns
    if not columns:
        return '<p class="empty">no batch completed in this run: nothing to plot</p>'
    phases = list(zip((*PHASES, "other"), PHASE_SERIES, strict=True))
    boxes = [
        _box("Batch duration by phase", stacked_bars("Batch duration by phase", columns, phases, DURATION, " ms")),
        _box(
            "Input vs processed rate",
            line_chart(
                "Input vs processed rate (rows/s)",
                columns,
                [("input rows/s", INPUT_RATE), ("processed rows/s", PROCESSED_RATE)],
            ),
        ),
    ]
    operators = [f"{index}:{name}" for index, name in enumerate(series.operators)]
    if operators:
        rows = [(name, state_rows_series(index)) for index, name in enumerate(operators)]
        memory = [(name, state_memory_series(index)) for index, name in enumerate(operators)]
        boxes.append(_box("State rows per operator", line_chart("State rows", columns, rows)))
        boxes.append(_box("State memory per operator", line_chart("State memory (B)", columns, memory, "B")))
        shares = [("commit", COMMIT_SHARE)]
        boxes.append(_box("Commit share of batch time", line_chart("Commit share (%)", columns, shares, "%")))
    else:
        boxes.append('<p class="empty">the query has no stateful operator: no state or commit charts</p>')
    if any(c.get(SOURCE_LAG) is not None for c in columns):
        lag = [("records behind", SOURCE_LAG)]
        boxes.append(_box("Kafka lag (records not yet read)", line_chart("Kafka lag (records)", columns, lag)))
    if any(c.get(ROCKSDB_MEMORY) is not None for c in columns):
        lines = [("used", ROCKSDB_MEMORY)]
        if any(c.get(ROCKSDB_CAP) is not None for c in columns):
            lines.append(("cap", ROCKSDB_CAP))
        boxes.append(_box("RocksDB memory against its cap", line_chart("RocksDB memory (B)", columns, lines, "B")))
        misses = [("misses per get", ROCKSDB_MISS)]
        boxes.append(_box("RocksDB block cache misses", line_chart("Cache misses per get (%)", columns, misses, "%")))
    if any(c.get(WATERMARK_LAG) is not None for c in columns):
        boxes.append(_box("Watermark lag", line_chart("Watermark lag (s)", columns, [("lag", WATERMARK_LAG)], "s")))
    else:
        boxes.append('<p class="empty">no event-time watermark: no watermark lag chart</p>')
    note = (
        ""
        if series.per_batch
        else f'<p class="note">{series.batches:,} batches drawn in {len(columns)} columns of about '
        f"{series.batches / len(columns):,.0f} batches each: the shade spans the fastest to the slowest batch of "
        "a column, so a single slow batch still shows; hover a column for its figures.</p>"
    )
    return f'{note}<div class="charts">{"".join(boxes)}</div>'


def _summary(run: RunAnalysis) -> str:
    lag = "-" if run.watermark_lag_seconds is None else in_words(run.watermark_lag_seconds)
    rows = [
        ("query", run.query_name or "-"),
        ("query id", run.query_id or "-"),
        ("period", f"{run.started:%Y-%m-%d %H:%M:%S} to {run.ended:%Y-%m-%d %H:%M:%S} UTC" if run.started else "-"),
        ("batches", f"{run.batches} ({run.first_batch} to {run.last_batch})" if run.batches else "0"),
        ("input rows", f"{run.input_rows:,}"),
        ("input rate", f"{run.input_rows_per_second:,.1f} rows/s"),
        ("processed rate", f"{run.processed_rows_per_second:,.1f} rows/s"),
        ("batch duration", _durations(run)),
        ("commit share", f"{run.commit_share:.1%} (worst batch {run.max_batch_commit_share:.1%})"),
        ("rows dropped by watermark", f"{run.dropped_by_watermark:,}"),
        ("quarantined records", f"{run.quarantined:,}"),
        ("watermark lag (last batch)", lag),
        *(
            [
                ("Kafka lag (last batch)", describe_source_lag(run.source_lag)),
                ("Kafka lag (largest total)", f"{run.max_source_lag or 0:,} records"),
            ]
            if run.source_lag is not None
            else []
        ),
        ("terminated", "with an error" if run.exception else ("yes" if run.terminated else "no (still running?)")),
    ]
    if run.rocksdb is not None:
        r = run.rocksdb
        cap = f" of a {format_size(r.cap_bytes)} cap" if r.cap_bytes else " (no cap recorded)"
        rows.append(
            (
                "RocksDB memory",
                f"{format_size(r.last_memory_bytes)}{cap} (max {format_size(r.max_memory_bytes)}); cache misses "
                f"per get {r.last_cache_miss_share:.1%} (max {r.max_cache_miss_share:.1%}), "
                f"{r.last_micros_per_get:,.1f} us a get",
            )
        )
    for trend in run.state_rows_trend:
        rows.append(
            (
                f"state {trend.operator_id}:{trend.operator}",
                f"{state_rows_text(trend)}, {format_size(trend.last_memory_bytes)}"
                + (" - unbounded growth" if trend.unbounded else ""),
            )
        )
    body = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


def _durations(run: RunAnalysis) -> str:
    stats = run.batch_duration_ms
    if stats is None:
        return "-"
    return (
        f"median {_ms(stats.p50)}, p90 {_ms(stats.p90)}, p99 {_ms(stats.p99)}, max {_ms(stats.max)} "
        f"(mean {_ms(stats.mean)})"
    )


def _ms(value: float) -> str:
    return f"{value / 1000:,.2f} s" if value >= 1000 else f"{value:,.0f} ms"


def _slowest(run: RunAnalysis) -> str:
    # A short run's charts show every batch already.
    if run.batches <= SLOWEST_TABLE_AFTER:
        return ""
    body = "".join(
        f"<tr><td>{b.batch_id}</td><td>{_ms(b.duration_ms)}</td>"
        f"<td>{f'{b.timestamp:%Y-%m-%d %H:%M:%S}' if b.timestamp else '-'}</td><td>{_ms(b.commit_ms)}</td></tr>"
        for b in run.slowest_batches
    )
    return (
        "<h3>Slowest batches</h3><table><tr><th>batch</th><th>duration</th><th>started (UTC)</th>"
        f"<th>commit (est.)</th></tr>{body}</table>"
    )


def _findings(findings: Sequence[Finding]) -> str:
    if not findings:
        return '<p class="empty">no findings</p>'
    body = "".join(
        f'<tr><td class="{escape(f.severity)}">{escape(f.severity)}</td><td>{escape(f.code)}</td>'
        f"<td>{escape(f.message)}</td><td>{escape(f.fix)}</td></tr>"
        for f in findings
    )
    return f"<table><tr><th>severity</th><th>code</th><th>what</th><th>what to do</th></tr>{body}</table>"


def _analyzed(path: str | Path, leak_batches: int, parallelism: int | None) -> list[tuple[RunAnalysis, RunSeries]]:
    """Every run's analysis and plotted series, from one streaming pass over the log."""
    runs: dict[str, tuple[RunFold, SeriesFold]] = {}
    for run_id, event, progress in run_events(log_records(path)):
        folds = runs.get(run_id)
        if folds is None:
            folds = runs[run_id] = (RunFold(run_id, leak_batches, parallelism), SeriesFold(PLOT_WIDTH, parallelism))
        folds[0].add(event, progress)
        if progress is not None:
            folds[1].add(progress, event.rocksdb_cap_bytes)
    return [(analysis.result(), series.result()) for analysis, series in runs.values()]


def _section(run: RunAnalysis, series: RunSeries) -> str:
    stuck = "".join(f"<pre>{escape(str(s.get('message', '')))}</pre>" for s in run.stuck)
    return (
        f"<section><h2>Run {escape(run.run_id)}</h2>{_summary(run)}<h3>Findings</h3>{_findings(run.findings)}"
        + (f"<h3>Stuck batches</h3>{stuck}" if stuck else "")
        + _slowest(run)
        + _charts(series)
        + "</section>"
    )


def _page(path: str | Path, runs: Sequence[tuple[RunAnalysis, RunSeries]]) -> str:
    sections = [_section(run, series) for run, series in runs]
    if not sections:
        sections.append('<p class="empty">the log holds no run</p>')
    title = f"tidemark run report: {Path(path).name}"
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>"
        f"<h1>{escape(title)}</h1><p>{len(runs)} run(s) from {escape(str(path))}</p>{''.join(sections)}"
        "</body></html>\n"
    )


def render_report(path: str | Path, leak_batches: int = DEFAULT_LEAK_BATCHES, parallelism: int | None = None) -> str:
    """The report page of a progress log file or folder, as one HTML string."""
    return _page(path, _analyzed(path, leak_batches, parallelism))


def write_report(
    path: str | Path, output: str | Path, leak_batches: int = DEFAULT_LEAK_BATCHES, parallelism: int | None = None
) -> ReportResult:
    """Write the report of a progress log to output (one self-contained HTML file)."""
    runs = _analyzed(path, leak_batches, parallelism)
    html = _page(path, runs)
    target = Path(output)
    # Written beside it, then renamed: an interrupted or failed write leaves no half-written report.
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(html, encoding="utf-8")
        os.replace(partial, target)
    except OSError as exc:
        msg = f"cannot write the report to {target}: {exc.strerror} (choose another -o path)"
        raise UsageError(msg) from exc
    finally:
        partial.unlink(missing_ok=True)
    return ReportResult(
        path=str(target),
        runs=len(runs),
        batches=sum(run.batches for run, _ in runs),
        findings=sum(len(run.findings) for run, _ in runs),
        size_bytes=len(html.encode("utf-8")),
    )
