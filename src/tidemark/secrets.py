"""Secrets tidemark read at run time (a connection string, a JAAS line): remembered so no message shows them.

Secrets enter only through the environment variables and files a config names (tidemark.kafka.options); each one
is remembered here as it is read, and every error line, log line and progress-log line tidemark writes passes
through `redact`, which replaces any remembered secret with `***`.
"""

from __future__ import annotations

import logging
import threading

MASK = "***"
# Shorter values are not treated as secrets to mask: replacing "a" everywhere would garble every message.
_MIN_LENGTH = 6
_known: set[str] = set()
_lock = threading.Lock()


def remember(*values: str) -> None:
    """Mask these values in everything redact() sees from now on."""
    with _lock:
        _known.update(v for v in values if len(v) >= _MIN_LENGTH)


def redact(text: str) -> str:
    """text with every remembered secret replaced by ***."""
    with _lock:
        secrets = sorted(_known, key=len, reverse=True)
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def forget_all() -> None:
    """Forget every remembered secret (tests)."""
    with _lock:
        _known.clear()


class RedactingFilter(logging.Filter):
    """A logging filter that masks remembered secrets in each record's formatted message."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = redact(message)
        if masked != message:
            record.msg, record.args = masked, None
        return True
