"""Tiny inline-SVG charts (lines and stacked bars); every label is escaped."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#17becf")
WIDTH, HEIGHT = 560, 220
LEFT, RIGHT, TOP, BOTTOM = 64, 12, 12, 28


def _fmt(value: float) -> str:
    magnitude = abs(value)
    if magnitude >= 1e9:
        return f"{value / 1e9:.3g}G"
    if magnitude >= 1e6:
        return f"{value / 1e6:.3g}M"
    if magnitude >= 1e4:
        return f"{value / 1e3:.3g}k"
    if magnitude >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}"


def _frame(title: str, y_max: float, unit: str, x_labels: Sequence[str]) -> list[str]:
    plot_h = HEIGHT - TOP - BOTTOM
    parts = [
        f'<svg class="chart" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
        f'<rect x="{LEFT}" y="{TOP}" width="{WIDTH - LEFT - RIGHT}" height="{plot_h}" fill="#fafafa" stroke="#ccc"/>',
    ]
    for fraction in (0.0, 0.5, 1.0):
        y = TOP + plot_h * (1 - fraction)
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e3e3e3"/>')
        label = escape(f"{_fmt(y_max * fraction)}{unit}")
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11">{label}</text>')
    if x_labels:
        first, last = escape(x_labels[0]), escape(x_labels[-1])
        parts.append(f'<text x="{LEFT}" y="{HEIGHT - 8}" font-size="11">batch {first}</text>')
        parts.append(f'<text x="{WIDTH - RIGHT}" y="{HEIGHT - 8}" text-anchor="end" font-size="11">batch {last}</text>')
    return parts


def _legend(names: Sequence[str]) -> str:
    items = "".join(
        f'<span class="key"><i style="background:{PALETTE[i % len(PALETTE)]}"></i>{escape(name)}</span>'
        for i, name in enumerate(names)
    )
    return f'<div class="legend">{items}</div>'


def _nice_max(values: Sequence[float]) -> float:
    top = max((v for v in values if v is not None), default=0.0)
    return top * 1.05 if top > 0 else 1.0


def line_chart(
    title: str, x_labels: Sequence[str], series: Sequence[tuple[str, Sequence[float | None]]], unit: str = ""
) -> str:
    """Lines over batches; None values leave a gap."""
    y_max = _nice_max([v for _, values in series for v in values if v is not None])
    parts = _frame(title, y_max, unit, x_labels)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    n = max(len(x_labels), 1)

    def x_at(i: int) -> float:
        return LEFT + (plot_w * (i + 0.5) / n)

    for index, (name, values) in enumerate(series):
        color = PALETTE[index % len(PALETTE)]
        segment: list[str] = []
        segments: list[list[str]] = [segment]
        for i, value in enumerate(values):
            if value is None:
                segment = []
                segments.append(segment)
                continue
            y = TOP + plot_h * (1 - value / y_max)
            segment.append(f"{x_at(i):.1f},{y:.1f}")
            tip = escape(f"{name} batch {x_labels[i] if i < len(x_labels) else i}: {_fmt(value)}{unit}")
            parts.append(
                f'<circle cx="{x_at(i):.1f}" cy="{y:.1f}" r="2.5" fill="{color}"><title>{tip}</title></circle>'
            )
        for points in segments:
            if len(points) > 1:
                parts.append(
                    f'<polyline class="series" fill="none" stroke="{color}" stroke-width="2" '
                    f'points="{" ".join(points)}"/>'
                )
    parts.append("</svg>")
    return "".join(parts) + _legend([name for name, _ in series])


def stacked_bars(
    title: str, x_labels: Sequence[str], stacks: Sequence[tuple[str, Sequence[float]]], unit: str = ""
) -> str:
    """One bar per batch, stacked by component."""
    totals = [sum(values[i] for _, values in stacks) for i in range(len(x_labels))]
    y_max = _nice_max(totals)
    parts = _frame(title, y_max, unit, x_labels)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    n = max(len(x_labels), 1)
    bar = max(1.0, plot_w / n * 0.8)
    for i, label in enumerate(x_labels):
        x = LEFT + plot_w * i / n + (plot_w / n - bar) / 2
        base = float(TOP + plot_h)
        for index, (name, values) in enumerate(stacks):
            height = plot_h * values[i] / y_max
            if height <= 0:
                continue
            base -= height
            tip = escape(f"batch {label} {name}: {_fmt(values[i])}{unit}")
            parts.append(
                f'<rect class="bar" x="{x:.1f}" y="{base:.1f}" width="{bar:.1f}" height="{height:.1f}" '
                f'fill="{PALETTE[index % len(PALETTE)]}"><title>{tip}</title></rect>'
            )
    parts.append("</svg>")
    return "".join(parts) + _legend([name for name, _ in stacks])
