"""Spark DDL column lists, parsed once for every package that needs one (sources, per-key state)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql.types import StructType


def parse_ddl(ddl: str) -> StructType:
    """Parse a Spark DDL column list ('user STRING, ts TIMESTAMP'); ValueError says what is wrong."""
    from pyspark.sql.types import StructType, _parse_datatype_string

    try:
        parsed = _parse_datatype_string(ddl)
    except Exception as exc:
        msg = f"{ddl!r} is not a valid Spark DDL schema"
        raise ValueError(msg) from exc
    if not isinstance(parsed, StructType):
        msg = f"{ddl!r} must list named columns"
        raise ValueError(msg)
    return parsed
