"""CLI commands for metrics: `tidemark metrics rules` (Prometheus alert rules) and `tidemark metrics dashboard`."""

from __future__ import annotations

import sys
from datetime import timedelta
from typing import Annotated

import typer

metrics_app = typer.Typer(
    help="Prometheus alert rules and a Grafana dashboard for tidemark's metrics.", no_args_is_help=True
)


def _duration(value: str | None, flag: str) -> timedelta | None:
    from tidemark.durations import parse_duration
    from tidemark.errors import UsageError

    if value is None:
        return None
    try:
        return parse_duration(value)
    except UsageError as exc:
        msg = f"{flag}: {exc}"
        raise UsageError(msg) from exc


@metrics_app.command("rules")
def rules(
    stuck_after: Annotated[
        str | None,
        typer.Option(
            "--stuck-after", help="No batch for this long alerts (default: each run's own [monitor] stuck_after)."
        ),
    ] = None,
    commit_share: Annotated[
        float | None,
        typer.Option("--commit-share", help="Share of batch time spent committing state (default: the planner's)."),
    ] = None,
    quarantine_share: Annotated[
        float, typer.Option("--quarantine-share", help="Share of input records quarantined.")
    ] = 0.01,
    watermark_lag: Annotated[str, typer.Option("--watermark-lag", help="Watermark behind batch time.")] = "1h",
    window: Annotated[str, typer.Option("--window", help="Range of the commit and quarantine shares.")] = "15m",
    state_growth_window: Annotated[
        str, typer.Option("--state-growth-window", help="State growth is judged over, and must last, this long.")
    ] = "30m",
    pending: Annotated[
        str, typer.Option("--for", help="How long share and lag conditions hold before they fire.")
    ] = "5m",
) -> None:
    """Print Prometheus alert rules (YAML): tidemark metrics rules > tidemark-rules.yml."""
    from tidemark.monitor.alerts import AlertThresholds, rules_yaml
    from tidemark.sizing.advice import COMMIT_SHARE_HIGH

    limits = AlertThresholds(
        stuck_after=_duration(stuck_after, "--stuck-after"),
        commit_share=COMMIT_SHARE_HIGH if commit_share is None else commit_share,
        quarantine_share=quarantine_share,
        watermark_lag=_duration(watermark_lag, "--watermark-lag") or timedelta(hours=1),
        window=_duration(window, "--window") or timedelta(minutes=15),
        state_growth_window=_duration(state_growth_window, "--state-growth-window") or timedelta(minutes=30),
        pending=_duration(pending, "--for") or timedelta(0),
    )
    sys.stdout.write(rules_yaml(limits))


@metrics_app.command("dashboard")
def dashboard(
    title: Annotated[str, typer.Option("--title", help="The dashboard's title.")] = "tidemark",
    uid: Annotated[str, typer.Option("--uid", help="The dashboard's Grafana uid.")] = "tidemark",
    window: Annotated[str, typer.Option("--window", help="Range of the commit and quarantine shares.")] = "15m",
) -> None:
    """Print a Grafana dashboard (JSON) of tidemark's and Spark's metrics: ... dashboard > tidemark.json."""
    from tidemark.monitor.dashboard import dashboard_json

    sys.stdout.write(dashboard_json(title=title, uid=uid, window=_duration(window, "--window")))


def register(app: typer.Typer) -> None:
    """Add the metrics group to the root app."""
    app.add_typer(metrics_app, name="metrics")
