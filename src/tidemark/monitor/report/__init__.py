"""The self-contained HTML report of a progress log: inline SVG charts, no scripts, no external URLs."""

from __future__ import annotations

from tidemark.monitor.report.page import ReportResult, render_report, write_report

__all__ = ["ReportResult", "render_report", "write_report"]
