"""State inspection: read, summarize and diff what a checkpoint's state stores hold (Spark 4 state readers)."""

from __future__ import annotations
