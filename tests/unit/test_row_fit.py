"""A state schema that does not fit the bytes is an error naming the columns, never garbage (issue 40).

On real checkpoints of the corpus (Spark 4.1.4's and 3.1.3's `dropDuplicates(k, ts)`): the key schema as Spark
recorded it reads the rows Spark's own reader counted; a schema with an extra column, a missing one or the
columns in another order is refused in one line (exit 2) that names what does not fit. The old decoder printed
the extra column as a number read out of the string's bytes, and the short schema as if it were whole.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tidemark.cli.main import main
from tidemark.formats import Checkpoint, RowDecodeError, decode_row, fields_from_ddl, read_store

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus"
DEDUP_41 = CORPUS / "spark-4.1.4" / "hdfs_dedup"
DEDUP_31 = CORPUS / "spark-3.1.3" / "hdfs_dedup"
VALUE = "__dummy INT"


def _show(checkpoint: Path, key_schema: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["state", "show", str(checkpoint), "--reader", "files", "--key-schema", key_schema,
                 "--value-schema", VALUE, "--json", "--limit", "1000"])  # fmt: skip
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_recorded_order_reads_what_spark_counted(capsys: pytest.CaptureFixture[str]) -> None:
    expected = json.loads((DEDUP_41 / "expected.json").read_text())["operators"][0]["stores"][0]["rows"]
    code, out, err = _show(DEDUP_41 / "checkpoint", "k STRING, ts TIMESTAMP", capsys)
    assert code == 0, err
    rows = json.loads(out)["rows"]
    assert len(rows) == expected > 0
    assert all(str(k).startswith("k") and str(ts).startswith("2024-01-01T") for k, ts, *_ in rows)


@pytest.mark.parametrize("case", [DEDUP_41, DEDUP_31], ids=lambda p: p.parent.name)
@pytest.mark.parametrize(
    ("key_schema", "named"),
    [
        ("k STRING, ts TIMESTAMP, n BIGINT", "column(s) k do not fit"),  # an extra column
        ("k STRING", "variable-length column(s) (k)"),  # a missing one
        ("ts TIMESTAMP, k STRING", "column(s) k do not fit"),  # another order
    ],
)
def test_a_schema_that_does_not_fit_is_one_line_naming_the_columns(
    case: Path, key_schema: str, named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _show(case / "checkpoint", key_schema, capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and out == "" and len(lines) == 1, (code, out, err)
    assert "do not fit" in lines[0] or "not the values" in lines[0], lines[0]
    assert named in lines[0], lines[0]


def test_each_check_on_a_spark_written_row() -> None:
    """One key row Spark 4.1.4 wrote, against schemas that differ from it one way each."""
    checkpoint = Checkpoint.open(str(DEDUP_41 / "checkpoint"))
    stores = [read_store(checkpoint, 0, p, "default", 4, keep_entries=True) for p in (0, 1)]
    key = next(k for s in stores for k in (s.entries or {}))
    assert set(decode_row(key, fields_from_ddl("k STRING, ts TIMESTAMP"))) == {"k", "ts"}
    with pytest.raises(RowDecodeError, match="not whole 8-byte words"):
        decode_row(key + b"\x00", fields_from_ddl("k STRING, ts TIMESTAMP"))
    with pytest.raises(RowDecodeError, match="n: a integer fills 4 of its slot"):
        decode_row(key, fields_from_ddl("k STRING, n INT"))  # the timestamp's 8 bytes are no int
    nulled = bytes([key[0] | 0b100]) + key[1:]  # a third null bit on a two-column row
    with pytest.raises(RowDecodeError, match="beyond the schema's 2"):
        decode_row(nulled, fields_from_ddl("k STRING, ts TIMESTAMP"))
    ts_null = bytes([key[0] | 0b10]) + key[1:]  # ts null by its bit, its slot still holding the time
    with pytest.raises(RowDecodeError, match="ts: null by its null bit"):
        decode_row(ts_null, fields_from_ddl("k STRING, ts TIMESTAMP"))
