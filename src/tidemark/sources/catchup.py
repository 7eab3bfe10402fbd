"""The catch-up contract: what a source that sizes its backlog batches hands the run, and the throughput
arithmetic its planners share (pure: no Spark, no I/O).

A run that starts behind asks its source for a plan (`CatchesUp.plan_catch_up`, sources/capabilities.py) with
what the pipeline measured: its recent batches, the task slots, the target batch duration and the memory one batch
may use. The plan says what the catch-up query runs with. Each connector's plan and its arithmetic live in the
connector (sources/files/catchup.py, sources/kafka/catchup.py); the run never asks which one it holds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import Field, dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    from tidemark.config import TidemarkConfig
    from tidemark.formats import BatchProgress

# History points needed, and the spread of their sizes, before a fixed per-batch cost is fitted.
_MIN_FIT_POINTS = 3
_MIN_FIT_SPREAD = 1.5


class CatchUpPlan(Protocol):
    """How one phase of a run reads the backlog, as the run asks it (each plan is a frozen dataclass the run's
    log records whole)."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    @property
    def active(self) -> bool:
        """True when the phase runs catch-up batches; False: the steady-state size."""

    @property
    def reason(self) -> str:
        """Why, in one phrase."""

    def describe(self) -> str:
        """One line for the run's log."""

    def phase_config(self, config: TidemarkConfig) -> TidemarkConfig:
        """The config the catch-up query runs with (the plan's batch size in the source's per-trigger limit)."""

    def spark_conf(self, config: TidemarkConfig) -> dict[str, str]:
        """Spark settings for the catch-up query only."""


@dataclass(frozen=True)
class CatchUpContext:
    """What the run measured for a plan."""

    target: timedelta  # the longest a catch-up batch should take
    task_slots: int
    history: Sequence[BatchProgress]  # the pipeline's recent batches with input, oldest first
    # The most input bytes one batch may read, given the memory each input byte takes (the planner's model).
    memory_ceiling: Callable[[float], int]


@dataclass(frozen=True)
class Throughput:
    """How long a batch takes: fixed_ms per batch plus bytes / bytes_per_second."""

    bytes_per_second: float
    fixed_ms: float
    batches: int  # history batches it was fitted on; 0 for the default estimate
    origin: str

    def batch_ms(self, size_bytes: float) -> float:
        """Expected duration of a batch of size_bytes."""
        return self.fixed_ms + 1000 * size_bytes / self.bytes_per_second


def fit_throughput(samples: Sequence[tuple[int, float]]) -> Throughput | None:
    """Fit duration_ms = fixed + bytes / rate on (bytes, duration_ms) of past batches; None without usable ones.

    With batches of one size only the fixed cost cannot be told from the rate: all of the time is then put on
    the bytes, which underestimates the rate and keeps catch-up batches on the short side of the target.
    """
    points = [(float(b), float(d)) for b, d in samples if b > 0 and d > 0]
    if not points:
        return None
    sizes = [b for b, _ in points]
    total_bytes, total_ms = sum(sizes), sum(d for _, d in points)
    proportional = Throughput(1000 * total_bytes / total_ms, 0.0, len(points), f"progress log ({len(points)} batches)")
    if len(points) < _MIN_FIT_POINTS or max(sizes) < _MIN_FIT_SPREAD * min(sizes):
        return proportional
    mean_b = total_bytes / len(points)
    mean_d = total_ms / len(points)
    var = sum((b - mean_b) ** 2 for b in sizes)
    slope = sum((b - mean_b) * (d - mean_d) for b, d in points) / var  # ms per byte
    fixed = mean_d - slope * mean_b
    if slope <= 0 or fixed < 0:
        return proportional
    fixed = min(fixed, min(d for _, d in points))
    return Throughput(1000 / slope, fixed, len(points), f"progress log ({len(points)} batches, fitted)")


def batches_phrase(count: int) -> str:
    """`1 batch`, `3 batches`."""
    return f"{count} batch" if count == 1 else f"{count} batches"
