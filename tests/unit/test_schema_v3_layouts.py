"""transformWithState schema files in both v3 layouts Spark wrote (issue 40).

Spark 4.0.0 to 4.3 releases write v3 with a short schema id before each key and value schema (SPARK-50714); the
pre-release 4.0.0 builds behind Spark's own `checkpoint-version-4.0.0-tws` fixtures wrote it without them, and
their operator metadata names one `stateSchemaFilePath`. A copy of the corpus' Spark 4.1.4 transformWithState
checkpoint is rewritten into that older layout by this test's own writer (DataOutputStream's encoding); every
state tool that reads schemas must read it as it reads the original, and `state stats` must still count what
Spark's own reader counted (expected.json).
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from tidemark.cli.main import main
from tidemark.formats import parse_schema_file

CASE = (
    Path(__file__).resolve().parents[1]
    / "fixtures"
    / "corpus"
    / "spark-4.1.4"
    / "rocksdb_changelog_transform_with_state"
)


def _utf(text: str) -> bytes:
    data = text.encode("utf-8")
    return struct.pack(">H", len(data)) + data


def _chunks(text: str) -> bytes:
    parts = [text[i : i + 65535] for i in range(0, len(text), 65535)] or [""]
    return struct.pack(">i", len(parts)) + b"".join(_utf(p) for p in parts)


def _v3_without_ids(original: bytes) -> bytes:
    """The same families, written as the pre-release builds did: no short schema ids."""
    at = 4  # writeUTF("v3")
    (count,) = struct.unpack_from(">i", original, at)
    at += 4

    def utf() -> str:
        nonlocal at
        (size,) = struct.unpack_from(">H", original, at)
        at += 2 + size
        return original[at - size : at].decode("utf-8")

    def chunks() -> str:
        nonlocal at
        (n,) = struct.unpack_from(">i", original, at)
        at += 4
        return "".join(utf() for _ in range(n))

    out = _utf("v3") + struct.pack(">i", count)
    for _ in range(count):
        name = utf()
        at += 2  # key schema id
        key = chunks()
        at += 2  # value schema id
        value, encoder, user_key = chunks(), chunks(), chunks()
        out += _utf(name) + _chunks(key) + _chunks(value) + _chunks(encoder) + _chunks(user_key)
    assert at == len(original)
    return out


def _pre_release_copy(tmp_path: Path) -> Path:
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(CASE / "checkpoint", checkpoint)
    (schema,) = [p for p in (checkpoint / "state/0/_stateSchema/default").iterdir() if not p.name.startswith(".")]
    schema.write_bytes(_v3_without_ids(schema.read_bytes()))
    for crc in schema.parent.glob(".*.crc"):
        crc.unlink()
    metadata = checkpoint / "state/0/_metadata/v2/0"
    version, body = metadata.read_text().split("\n", 1)
    data = json.loads(body)
    for store in data["stateStoreInfo"]:
        store["stateSchemaFilePath"] = store.pop("stateSchemaFilePaths")[0]
    metadata.write_text(f"{version}\n{json.dumps(data)}")
    for crc in metadata.parent.glob(".*.crc"):
        crc.unlink()
    return checkpoint


def test_both_layouts_parse_to_the_same_families(tmp_path: Path) -> None:
    (original,) = [
        p for p in (CASE / "checkpoint/state/0/_stateSchema/default").iterdir() if not p.name.startswith(".")
    ]
    data = original.read_bytes()
    with_ids, without_ids = parse_schema_file(data), parse_schema_file(_v3_without_ids(data))
    assert [f.name for f in with_ids] == [f.name for f in without_ids]
    assert {"count", "values", "per_minute"} <= {f.name for f in with_ids}
    assert with_ids == without_ids
    with pytest.raises(ValueError):
        parse_schema_file(_v3_without_ids(data)[:-3])  # cut short: an error, not a guess


def _counts(checkpoint: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, int]:
    capsys.readouterr()
    assert main(["state", "stats", str(checkpoint), "--reader", "files", "--json"]) == 0
    (store,) = json.loads(capsys.readouterr().out)["operators"]
    return {v["name"]: v["rows"] for v in store["state_variables"]}


def test_state_stats_reads_a_pre_release_checkpoint_as_the_release_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same counts from both layouts; the value state's count is what Spark's reader counted (expected.json;
    the corpus tests hold the files reader's list and map counts against Spark's)."""
    expected = json.loads((CASE / "expected.json").read_text())["operators"][0]["stores"][0]["state_variables"]
    counted = _counts(_pre_release_copy(tmp_path), capsys)
    assert counted == _counts(CASE / "checkpoint", capsys)
    assert counted["count"] == next(v["rows"] for v in expected if v["name"] == "count") > 0


def test_the_pre_release_layout_converts_back_byte_for_byte() -> None:
    """What a private copy hands Spark's reader: the release layout (this corpus file's schema ids are 0)."""
    from tidemark.formats.state_schema import with_schema_ids

    (original,) = [
        p for p in (CASE / "checkpoint/state/0/_stateSchema/default").iterdir() if not p.name.startswith(".")
    ]
    data = original.read_bytes()
    assert with_schema_ids(_v3_without_ids(data)) == data
    assert with_schema_ids(data) is None  # already the release layout: left alone
