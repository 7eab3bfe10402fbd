"""Tiny inline-SVG charts (lines and stacked bars) over a run's columns; every label is escaped.

A short run has one column per batch and is drawn point by point. A long run's columns each merge many
batches: each series is then drawn as its min-max envelope (one vertical stroke per column, so a single
batch's spike reaches its full height) under the line of its means. Either way the SVG's size is bounded by
the chart's width, not by the number of batches.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from tidemark.monitor.series import Column, Envelope

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#17becf")
WIDTH, HEIGHT = 560, 220
LEFT, RIGHT, TOP, BOTTOM = 64, 12, 12, 28
PLOT_WIDTH, PLOT_HEIGHT = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
# The envelope of the batch duration behind the stacked phases.
RANGE_COLOR = "#000"
ENVELOPE_OPACITY = 0.35


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


class _Scale:
    """Batch positions and values to SVG coordinates."""

    def __init__(self, columns: Sequence[Column], y_max: float) -> None:
        self.offset = columns[0].start if columns else 0
        self.total = max(1, columns[-1].end - self.offset) if columns else 1
        self.y_max = y_max

    def x(self, column: Column) -> float:
        return LEFT + PLOT_WIDTH * ((column.start + column.end) / 2 - self.offset) / self.total

    def width(self, column: Column) -> float:
        return PLOT_WIDTH * (column.end - column.start) / self.total

    def y(self, value: float) -> float:
        return TOP + PLOT_HEIGHT * (1 - value / self.y_max)


def _label(column: Column) -> str:
    if column.first_batch == column.last_batch:
        return f"batch {column.first_batch}"
    return f"batches {column.first_batch}-{column.last_batch} ({column.end - column.start})"


def _frame(title: str, y_max: float, unit: str, columns: Sequence[Column]) -> list[str]:
    parts = [
        f'<svg class="chart" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title>",
        f'<rect class="plot" x="{LEFT}" y="{TOP}" width="{PLOT_WIDTH}" height="{PLOT_HEIGHT}" fill="#fafafa" '
        'stroke="#ccc"/>',
    ]
    for fraction in (0.0, 0.5, 1.0):
        y = TOP + PLOT_HEIGHT * (1 - fraction)
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e3e3e3"/>')
        label = escape(f"{_fmt(y_max * fraction)}{unit}")
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11">{label}</text>')
    if columns:
        first, last = columns[0].first_batch, columns[-1].last_batch
        parts.append(f'<text x="{LEFT}" y="{HEIGHT - 8}" font-size="11">batch {first}</text>')
        parts.append(f'<text x="{WIDTH - RIGHT}" y="{HEIGHT - 8}" text-anchor="end" font-size="11">batch {last}</text>')
    return parts


def _legend(names: Sequence[str], envelope: bool = False) -> str:
    items = "".join(
        f'<span class="key"><i style="background:{PALETTE[i % len(PALETTE)]}"></i>{escape(name)}</span>'
        for i, name in enumerate(names)
    )
    if envelope:
        items += (
            '<span class="key"><i style="background:#bbb"></i>shade: min-max of the batches in a pixel column, '
            "line: their mean</span>"
        )
    return f'<div class="legend">{items}</div>'


def _nice_max(values: Sequence[float]) -> float:
    top = max(values, default=0.0)
    return top * 1.05 if top > 0 else 1.0


def _envelope_path(scale: _Scale, columns: Sequence[Column], envelopes: Sequence[Envelope | None], color: str) -> str:
    """One vertical stroke per column from its low to its high, as wide as the column, without anti-aliasing."""
    moves = []
    stroke = 1.0
    for column, env in zip(columns, envelopes, strict=True):
        if env is None:
            continue
        stroke = max(stroke, scale.width(column))
        top, bottom = scale.y(env.high), scale.y(env.low)
        moves.append(f"M{scale.x(column):.1f} {top:.1f}V{max(bottom, top + 1):.1f}")
    if not moves:
        return ""
    return (
        f'<path class="envelope" fill="none" stroke="{color}" stroke-opacity="{ENVELOPE_OPACITY}" '
        f'stroke-width="{stroke:.2f}" shape-rendering="crispEdges" d="{"".join(moves)}"/>'
    )


def _mean_lines(
    scale: _Scale, columns: Sequence[Column], envelopes: Sequence[Envelope | None], color: str, width: float
) -> list[str]:
    segments: list[list[str]] = [[]]
    for column, env in zip(columns, envelopes, strict=True):
        if env is None:
            if segments[-1]:
                segments.append([])
            continue
        segments[-1].append(f"{scale.x(column):.1f},{scale.y(env.mean):.1f}")
    return [
        f'<polyline class="series" fill="none" stroke="{color}" stroke-width="{width}" points="{" ".join(points)}"/>'
        for points in segments
        if len(points) > 1
    ]


def _hover(scale: _Scale, columns: Sequence[Column], tips: Sequence[str]) -> list[str]:
    """An invisible full-height rect per column whose tooltip gives that column's figures."""
    parts = []
    for column, tip in zip(columns, tips, strict=True):
        left = scale.x(column) - scale.width(column) / 2
        parts.append(
            f'<rect x="{left:.1f}" y="{TOP}" width="{scale.width(column):.2f}" height="{PLOT_HEIGHT}" '
            f'fill="transparent"><title>{escape(tip)}</title></rect>'
        )
    return parts


def _range_text(env: Envelope | None, unit: str) -> str:
    if env is None:
        return "-"
    return f"{_fmt(env.low)}-{_fmt(env.high)}{unit}, mean {_fmt(env.mean)}{unit}"


def line_chart(title: str, columns: Sequence[Column], series: Sequence[tuple[str, int]], unit: str = "") -> str:
    """Lines over a run's columns (series: name and index among the columns' values); a missing value leaves a gap."""
    envelopes = [(name, [c.get(index) for c in columns]) for name, index in series]
    scale = _Scale(columns, _nice_max([e.high for _, values in envelopes for e in values if e is not None]))
    parts = _frame(title, scale.y_max, unit, columns)
    per_batch = all(c.end - c.start == 1 for c in columns)
    for number, (name, values) in enumerate(envelopes):
        color = PALETTE[number % len(PALETTE)]
        if per_batch:
            for column, env in zip(columns, values, strict=True):
                if env is not None:
                    tip = escape(f"{name} {_label(column)}: {_fmt(env.mean)}{unit}")
                    parts.append(
                        f'<circle cx="{scale.x(column):.1f}" cy="{scale.y(env.mean):.1f}" r="2.5" fill="{color}">'
                        f"<title>{tip}</title></circle>"
                    )
        else:
            parts.append(_envelope_path(scale, columns, values, color))
        parts += _mean_lines(scale, columns, values, color, 2 if per_batch else 1.5)
    if not per_batch:
        tips = [
            f"{_label(column)}: " + "; ".join(f"{name} {_range_text(values[i], unit)}" for name, values in envelopes)
            for i, column in enumerate(columns)
        ]
        parts += _hover(scale, columns, tips)
    parts.append("</svg>")
    return "".join(parts) + _legend([name for name, _ in series], envelope=not per_batch)


def stacked_bars(
    title: str, columns: Sequence[Column], stacks: Sequence[tuple[str, int]], total: int, unit: str = ""
) -> str:
    """Stacked components per column (means of its batches); on merged columns, the min-max of `total` behind."""
    means = [[(env.mean if (env := c.get(index)) else 0.0) for c in columns] for _, index in stacks]
    sums = [sum(values[i] for values in means) for i in range(len(columns))]
    highs = [env.high for c in columns if (env := c.get(total))]
    scale = _Scale(columns, _nice_max([*sums, *highs]))
    parts = _frame(title, scale.y_max, unit, columns)
    per_batch = all(c.end - c.start == 1 for c in columns)
    base = float(TOP + PLOT_HEIGHT)
    if per_batch:
        bar = max(1.0, PLOT_WIDTH / max(len(columns), 1) * 0.8)
        for i, column in enumerate(columns):
            x = scale.x(column) - bar / 2
            top = base
            for number, (name, _) in enumerate(stacks):
                height = PLOT_HEIGHT * means[number][i] / scale.y_max
                if height <= 0:
                    continue
                top -= height
                tip = escape(f"{_label(column)} {name}: {_fmt(means[number][i])}{unit}")
                parts.append(
                    f'<rect class="bar" x="{x:.1f}" y="{top:.1f}" width="{bar:.1f}" height="{height:.1f}" '
                    f'fill="{PALETTE[number % len(PALETTE)]}"><title>{tip}</title></rect>'
                )
    else:
        parts.append(_envelope_path(scale, columns, [c.get(total) for c in columns], RANGE_COLOR))
        lower = [0.0] * len(columns)
        for number, _ in enumerate(stacks):
            upper = [low + value for low, value in zip(lower, means[number], strict=True)]
            edge = [f"{scale.x(c):.1f},{scale.y(v):.1f}" for c, v in zip(columns, upper, strict=True)]
            back = [f"{scale.x(c):.1f},{scale.y(v):.1f}" for c, v in zip(columns, lower, strict=True)][::-1]
            parts.append(
                f'<polygon class="area" fill="{PALETTE[number % len(PALETTE)]}" points="{" ".join(edge + back)}"/>'
            )
            lower = upper
        tips = [
            f"{_label(column)}: {_range_text(column.get(total), unit)}; mean "
            + ", ".join(f"{name} {_fmt(means[n][i])}{unit}" for n, (name, _) in enumerate(stacks))
            for i, column in enumerate(columns)
        ]
        parts += _hover(scale, columns, tips)
    parts.append("</svg>")
    return "".join(parts) + _legend([name for name, _ in stacks], envelope=not per_batch)
