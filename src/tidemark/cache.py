"""Where tidemark keeps what it can make again: fetched state, the JVM helper, Maven jars."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "TIDEMARK_CACHE_DIR"


def cache_root() -> Path:
    """$TIDEMARK_CACHE_DIR, else $XDG_CACHE_HOME/tidemark, else ~/.cache/tidemark."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tidemark"
