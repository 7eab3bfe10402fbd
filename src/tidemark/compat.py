"""What Python 3.11 added that tidemark uses, for Python 3.10 too (Databricks' Spark 3.5 runtimes run it)."""

from __future__ import annotations

import sys
from datetime import timezone

UTC = timezone.utc

if sys.version_info >= (3, 11):
    from enum import StrEnum

    import tomllib
else:  # pragma: no cover - exercised by the Python 3.10 smoke run
    from enum import Enum

    import tomli as tomllib

    class StrEnum(str, Enum):
        """enum.StrEnum of Python 3.11: members are strings, and str() and format() give the value."""

        def __str__(self) -> str:
            return str(self.value)

        def __format__(self, spec: str) -> str:
            return format(str(self.value), spec)

        @staticmethod
        def _generate_next_value_(name: str, start: int, count: int, last_values: list[str]) -> str:
            return name.lower()


__all__ = ["UTC", "StrEnum", "tomllib"]
