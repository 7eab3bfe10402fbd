"""Secrets tidemark read at run time (a connection string, a JAAS line, a storage key): remembered so no message
shows them.

Secrets enter only through the environment variables and files a config names (tidemark.sources.kafka.options) and the
cloud credentials of the environment (tidemark.storage.credentials, tidemark.spark.credentials); each one is
remembered here as it is read, with the forms a message may show it in (as JSON escapes it, the password inside a
JAAS line, the key inside a connection string), and every error line, log line, progress-log line and `--json`
document tidemark writes passes through `redact`, which replaces any remembered secret with `***`.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Iterator

MASK = "***"
# Shorter values are not treated as secrets to mask: replacing "a" everywhere would garble every message.
_MIN_LENGTH = 6
_known: set[str] = set()
_lock = threading.Lock()


# The secret inside a JAAS line (password="..."), and the key inside a connection string or SAS token (key=...).
_PASSWORD = re.compile(r'password\s*=\s*"([^"]*)"')
_KEY = re.compile(r"(?:SharedAccessKey|AccountKey|SharedAccessSignature|sig)=([^;&\"\s]+)")


def _forms(value: str) -> Iterator[str]:
    inner = [m.group(1) for m in _PASSWORD.finditer(value)] + [m.group(1) for m in _KEY.finditer(value)]
    for form in (value, *inner):
        yield form
        yield json.dumps(form)[1:-1]  # as a JSON document (a progress-log line, --json output) writes it


def remember(*values: str) -> None:
    """Mask these values (and the forms a message may show them in) in everything redact() sees from now on."""
    with _lock:
        _known.update(form for v in values for form in _forms(v) if len(form) >= _MIN_LENGTH)


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
