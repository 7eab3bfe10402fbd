"""Build the report page: per run a summary, the findings and six charts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path

from tidemark.errors import UsageError
from tidemark.monitor.analyze import DEFAULT_LEAK_BATCHES, Finding, RunAnalysis, analyze_run, group_runs
from tidemark.monitor.log import read_log
from tidemark.monitor.progress import BatchProgress
from tidemark.monitor.report.svg import line_chart, stacked_bars
from tidemark.monitor.series import PHASES, BatchPoint, batch_points
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
"""
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


def _charts(points: Sequence[BatchPoint], operators: Sequence[str]) -> str:
    if not points:
        return '<p class="empty">no batch completed in this run: nothing to plot</p>'
    x = [str(p.batch_id) for p in points]
    phases = [*PHASES, "other"]
    boxes = [
        _box(
            "Batch duration by phase",
            stacked_bars("Batch duration by phase", x, [(n, [p.phases_ms[n] for p in points]) for n in phases], " ms"),
        ),
        _box(
            "Input vs processed rate",
            line_chart(
                "Input vs processed rate (rows/s)",
                x,
                [
                    ("input rows/s", [p.input_rows_per_second for p in points]),
                    ("processed rows/s", [p.processed_rows_per_second for p in points]),
                ],
            ),
        ),
    ]

    def per_operator(attr: str) -> list[tuple[str, list[float | None]]]:
        series: list[tuple[str, list[float | None]]] = []
        for index, name in enumerate(operators):
            values: list[float | None] = []
            for p in points:
                figures: tuple[int, ...] = getattr(p, attr)
                values.append(float(figures[index]) if index < len(figures) else None)
            series.append((name, values))
        return series

    if operators:
        boxes.append(_box("State rows per operator", line_chart("State rows", x, per_operator("state_rows"))))
        boxes.append(
            _box(
                "State memory per operator", line_chart("State memory (B)", x, per_operator("state_memory_bytes"), "B")
            )
        )
        shares: list[float | None] = [round(p.commit_share * 100, 2) for p in points]
        boxes.append(_box("Commit share of batch time", line_chart("Commit share (%)", x, [("commit", shares)], "%")))
    else:
        boxes.append('<p class="empty">the query has no stateful operator: no state or commit charts</p>')
    lags = [p.watermark_lag_seconds for p in points]
    if any(lag is not None for lag in lags):
        boxes.append(_box("Watermark lag", line_chart("Watermark lag (s)", x, [("lag", lags)], "s")))
    else:
        boxes.append('<p class="empty">no event-time watermark: no watermark lag chart</p>')
    return f'<div class="charts">{"".join(boxes)}</div>'


def _summary(run: RunAnalysis) -> str:
    lag = "-" if run.watermark_lag_seconds is None else f"{run.watermark_lag_seconds:,.0f} s"
    rows = [
        ("query", run.query_name or "-"),
        ("query id", run.query_id or "-"),
        ("period", f"{run.started:%Y-%m-%d %H:%M:%S} to {run.ended:%Y-%m-%d %H:%M:%S} UTC" if run.started else "-"),
        ("batches", f"{run.batches} ({run.first_batch} to {run.last_batch})" if run.batches else "0"),
        ("input rows", f"{run.input_rows:,}"),
        ("input rate", f"{run.input_rows_per_second:,.1f} rows/s"),
        ("processed rate", f"{run.processed_rows_per_second:,.1f} rows/s"),
        ("commit share", f"{run.commit_share:.1%} (worst batch {run.max_batch_commit_share:.1%})"),
        ("rows dropped by watermark", f"{run.dropped_by_watermark:,}"),
        ("quarantined records", f"{run.quarantined:,}"),
        ("watermark lag (last batch)", lag),
        ("terminated", "with an error" if run.exception else ("yes" if run.terminated else "no (still running?)")),
    ]
    for trend in run.state_rows_trend:
        rows.append(
            (
                f"state {trend.operator_id}:{trend.operator}",
                f"{trend.first_rows:,} -> {trend.last_rows:,} rows ({trend.rows_per_batch:+.1f}/batch), "
                f"{format_size(trend.last_memory_bytes)}" + (" - unbounded growth" if trend.unbounded else ""),
            )
        )
    body = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


def _findings(findings: Sequence[Finding]) -> str:
    if not findings:
        return '<p class="empty">no findings</p>'
    body = "".join(
        f'<tr><td class="{escape(f.severity)}">{escape(f.severity)}</td><td>{escape(f.code)}</td>'
        f"<td>{escape(f.message)}</td><td>{escape(f.fix)}</td></tr>"
        for f in findings
    )
    return f"<table><tr><th>severity</th><th>code</th><th>what</th><th>what to do</th></tr>{body}</table>"


def _analyzed(
    path: str | Path, leak_batches: int, parallelism: int | None
) -> list[tuple[RunAnalysis, list[BatchProgress]]]:
    runs = []
    for run_id, events in group_runs(read_log(path)):
        progress = [p for p in (e.progress for e in events) if p is not None]
        runs.append((analyze_run(run_id, events, leak_batches, parallelism), progress))
    return runs


def _section(run: RunAnalysis, progress: Sequence[BatchProgress], parallelism: int | None) -> str:
    operators = [f"{t.operator_id}:{t.operator}" for t in run.state_rows_trend]
    stuck = "".join(f"<pre>{escape(str(s.get('message', '')))}</pre>" for s in run.stuck)
    return (
        f"<section><h2>Run {escape(run.run_id)}</h2>{_summary(run)}<h3>Findings</h3>{_findings(run.findings)}"
        + (f"<h3>Stuck batches</h3>{stuck}" if stuck else "")
        + _charts(batch_points(progress, parallelism), operators)
        + "</section>"
    )


def _page(path: str | Path, runs: Sequence[tuple[RunAnalysis, list[BatchProgress]]], parallelism: int | None) -> str:
    sections = [_section(run, progress, parallelism) for run, progress in runs]
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
    return _page(path, _analyzed(path, leak_batches, parallelism), parallelism)


def write_report(
    path: str | Path, output: str | Path, leak_batches: int = DEFAULT_LEAK_BATCHES, parallelism: int | None = None
) -> ReportResult:
    """Write the report of a progress log to output (one self-contained HTML file)."""
    runs = _analyzed(path, leak_batches, parallelism)
    html = _page(path, runs, parallelism)
    target = Path(output)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(html, encoding="utf-8")
    except OSError as exc:
        msg = f"cannot write the report to {target}: {exc.strerror} (choose another -o path)"
        raise UsageError(msg) from exc
    return ReportResult(
        path=str(target),
        runs=len(runs),
        batches=sum(run.batches for run, _ in runs),
        findings=sum(len(run.findings) for run, _ in runs),
        size_bytes=len(html.encode("utf-8")),
    )
