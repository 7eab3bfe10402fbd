"""Tools pointed at the wrong thing (not a checkpoint, an empty folder, a file, no progress log) say so in one
line and exit 1, never a report of dashes with "no findings"; a bad config stays exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidemark.cli.main import main
from tidemark.errors import CheckpointError


@pytest.fixture
def places(tmp_path: Path) -> dict[str, Path]:
    """A file, an empty folder, a file sink's output folder, a folder of other things, and nothing at all."""
    config = tmp_path / "tidemark.toml"
    config.write_text('[pipeline]\nname = "x"\n', encoding="utf-8")
    empty = tmp_path / "empty"
    empty.mkdir()
    sink = tmp_path / "output"
    (sink / "_spark_metadata").mkdir(parents=True)
    (sink / "_spark_metadata" / "0").write_text('v1\n{"path":"file:///x.parquet"}\n', encoding="utf-8")
    (sink / "part-00000.parquet").write_bytes(b"PAR1")
    other = tmp_path / "project"
    (other / "landing").mkdir(parents=True)
    (other / "notes.txt").write_text("hello", encoding="utf-8")
    return {"file": config, "empty": empty, "sink": sink, "other": other, "missing": tmp_path / "nope"}


EXPECTED = {
    "file": "is a file, not a checkpoint folder",
    "empty": "is an empty folder, not a checkpoint",
    "sink": "is a query's output folder (it has _spark_metadata/), not its checkpoint",
    "other": "is not a streaming checkpoint (no offsets/ folder; it holds landing/, notes.txt)",
    "missing": "does not exist",
}
CHECKPOINT_COMMANDS = [
    ["checkpoint", "inspect", "{}"],
    ["checkpoint", "inspect", "{}", "--json"],
    ["checkpoint", "prune", "{}", "--keep", "2"],
    ["checkpoint", "prune", "{}", "--keep", "2", "--apply"],
    ["state", "stats", "{}"],
    ["state", "show", "{}"],
    ["state", "diff", "{}", "--from", "1", "--to", "2"],
    ["state", "expired", "{}"],
    ["state", "repartition", "{}", "--partitions", "3"],
    ["plan", "memory", "--from-checkpoint", "{}"],
]


def _one_error(code: int, err: str, out: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 1, err
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    assert "no findings" not in out
    return lines[0]


@pytest.mark.parametrize("what", list(EXPECTED))
@pytest.mark.parametrize(
    "command", CHECKPOINT_COMMANDS, ids=lambda c: " ".join(c[:2]) + (" " + c[-1] if "-" in c[-1] else "")
)
def test_checkpoint_tools_refuse_what_is_not_a_checkpoint(
    command: list[str], what: str, places: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    before = sorted(p.relative_to(places["file"].parent) for p in places["file"].parent.rglob("*"))
    code = main([arg.replace("{}", str(places[what])) for arg in command])
    captured = capsys.readouterr()
    line = _one_error(code, captured.err, captured.out)
    assert EXPECTED[what] in line
    assert "checkpointLocation" in line
    assert captured.out == ""
    assert sorted(p.relative_to(places["file"].parent) for p in places["file"].parent.rglob("*")) == before


LOG_COMMANDS = [
    ["analyze", "{}"],
    ["analyze", "{}", "--json"],
    ["report", "{}", "-o", "{out}"],
    ["plan", "checkpoint", "{}"],
]


@pytest.mark.parametrize("command", LOG_COMMANDS, ids=" ".join)
def test_log_tools_refuse_a_folder_without_logs_and_files_that_are_not_logs(
    command: list[str], places: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    foreign = tmp_path / "foreign.jsonl"
    foreign.write_text('{"a": 1}\n', encoding="utf-8")
    empty_log = tmp_path / "empty.jsonl"
    empty_log.write_text("", encoding="utf-8")
    report = tmp_path / "report.html"
    for target, expected in (
        (places["empty"], "holds no progress log (no *.jsonl file)"),
        (foreign, "holds no tidemark progress record"),
        (empty_log, "holds no tidemark progress record"),
        (places["missing"], "does not exist"),
    ):
        args = [a.replace("{out}", str(report)).replace("{}", str(target)) for a in command]
        code = main(args)
        captured = capsys.readouterr()
        line = _one_error(code, captured.err, captured.out)
        if command[0] != "plan":
            assert expected in line, (target, line)
        else:
            assert "holds no progress" in line or "does not exist" in line, line
        assert not report.exists()


def test_a_bad_config_stays_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "tidemark.toml"
    config.write_text('[pipeline]\nname = "x"\nbogus = 1\n', encoding="utf-8")
    for command in (["audit"], ["recover"], ["check"], ["run"], ["jars", "list"]):
        code = main([*command, str(config)])
        err = capsys.readouterr().err
        assert code == 2, (command, err)
        assert len(err.strip().splitlines()) == 1, err
        code = main([*command, str(tmp_path)])
        err = capsys.readouterr().err
        assert code == 2, (command, err)
        assert "cannot read config file" in err


def test_a_checkpoint_killed_while_spark_wrote_its_metadata_starts_as_a_new_one(tmp_path: Path) -> None:
    """A driver killed while Spark wrote `metadata` leaves only its temporary file (and tidemark's own folder): no
    batch was ever planned, so a query may start there; anything else beside it is still refused."""
    from tidemark.formats.identify import refuse_foreign, what_is_there
    from tidemark.storage import open_storage

    folder = tmp_path / "checkpoint"
    (folder / "_tidemark").mkdir(parents=True)
    (folder / ".metadata.d1085e43-9ec0-49eb-9fa3-466fa50f48b9.tmp").write_text('{"id":"x"}', encoding="utf-8")
    (folder / "..metadata.d1085e43-9ec0-49eb-9fa3-466fa50f48b9.tmp.crc").write_bytes(b"crc")
    store = open_storage(str(folder))
    refuse_foreign(store)  # the run starts
    assert what_is_there(store) == f"{store.uri()} is an empty folder, not a checkpoint"  # a reading tool still says so
    (folder / "notes.tmp").write_text("mine", encoding="utf-8")  # not Spark's temporary name: refused as before
    with pytest.raises(CheckpointError, match="is not a streaming checkpoint"):
        refuse_foreign(store)
