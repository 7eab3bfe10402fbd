"""A finding of a diagnostic (`checkpoint inspect`, `plan checkpoint`): a stable code, a severity, a fix."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tidemark.compat import StrEnum


class Severity(StrEnum):
    """How bad a finding is: an error makes `checkpoint inspect` exit 1."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


@dataclass(frozen=True)
class Finding:
    """One problem or piece of advice: a stable code, what was seen (naming batch, operator, ...) and the fix."""

    code: str
    severity: Severity
    message: str
    fix: str
    file: str | None = None  # the file (or folder) it is about, relative to what was inspected
    impact: str | None = None  # what it breaks: can the query restart, and from which batch

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Finding:
        """Rebuild a finding from its JSON form."""
        file, impact = data.get("file"), data.get("impact")
        return cls(
            str(data["code"]),
            Severity(data["severity"]),
            str(data["message"]),
            str(data["fix"]),
            str(file) if file is not None else None,
            str(impact) if impact is not None else None,
        )
