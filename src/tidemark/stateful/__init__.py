"""Custom stateful logic with guaranteed state removal: KeyedProcessor, its KeyContext, and the leak guard.

The Spark side (tidemark.stateful.lifecycle) is imported on demand, so this package imports without a JVM.
"""

from __future__ import annotations

from tidemark.stateful.api import KeyContext, KeyedProcessor, TimeMode
from tidemark.stateful.expiry import ClampedExpiry, clamp_expiry
from tidemark.stateful.leak import LeakGuard, LeakWarning
from tidemark.stateful.loader import load_processor

__all__ = [
    "ClampedExpiry",
    "KeyContext",
    "KeyedProcessor",
    "LeakGuard",
    "LeakWarning",
    "TimeMode",
    "clamp_expiry",
    "load_processor",
]
