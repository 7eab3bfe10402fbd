"""Every command of README.md and docs/ runs as written (tests/doc_blocks.py classifies the blocks).

The commands run in-process, on the shared Spark session, in a folder prepared like a user's: `tidemark init demo`
run once (the docs' `demo/`), `clicks/` (a copy whose config changed its aggregates: `check` rejects it) and
`demo/adopt.toml` (the demo described as an old job to adopt). Example paths of the docs are swapped for those
fixtures by the table below; everything else runs as it is written. A block added to any doc is picked up.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.doc_blocks import HOW_TO, Block, Command, UnclassifiedBlock, blocks
from tidemark.cli.main import main

pytestmark = [pytest.mark.integration, pytest.mark.slow]
# An unclassified block fails tests/unit/test_doc_blocks.py with its place; collecting here must not break on it.
RUNNABLE = [b for b in blocks() if b.kind_or_unclassified in ("run", "console")]


@pytest.fixture(scope="module")
def world(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The user's folder the docs' commands run in, and the swaps of the docs' example paths."""
    root = tmp_path_factory.mktemp("docs-world")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        assert main(["init", "demo"]) == 0
        assert main(["run", "demo/tidemark.toml", "--available-now"]) == 0
    shutil.copytree(root / "demo", root / "clicks")
    config = (root / "clicks" / "tidemark.toml").read_text()
    changed = 'extra = [{ function = "sum", column = "value", name = "value_sum" }, { function = "max", column = '
    changed += '"value", name = "value_max" }]'
    (root / "clicks" / "tidemark.toml").write_text(
        config.replace('extra = [{ function = "sum", column = "value", name = "value_sum" }]', changed)
    )
    adopt = (root / "demo" / "tidemark.toml").read_text()
    for old, new in (('"checkpoint"', '"adopted-checkpoint"'), ('"output"', '"adopted-output"')):
        adopt = adopt.replace(f"= {old}", f"= {new}")
    (root / "demo" / "adopt.toml").write_text(adopt.replace('= "quarantine"', '= "adopted-quarantine"'))
    (log,) = (root / "demo" / "checkpoint-monitor").glob("*.jsonl")
    swaps = {
        "{config}": "demo/adopt.toml",
        "{old_checkpoint}": "demo/checkpoint",
        "{old_sink}": "demo/output",
        "/data/checkpoints/orders": "demo/checkpoint",
        "/data/out/orders": "demo/output",
        "job.toml": "demo/tidemark.toml",
        "runs/orders/progress": "demo/checkpoint-monitor",
        "s3://bucket/ckpt/orders": "demo/checkpoint",
        "state_store.jsonl": "demo/checkpoint-monitor",
        "20260101T120000Z-ab12cd.jsonl": log.name,
    }
    return {"root": root, "swaps": swaps}


def _swap(text: str, swaps: dict[str, str]) -> str:
    for old, new in swaps.items():
        text = text.replace(old, new)
    return text


@pytest.mark.parametrize("block", RUNNABLE, ids=lambda b: b.where)
def test_the_docs_commands_run_as_written(
    block: Block, world: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(world["root"])
    try:
        commands = block.commands()
    except UnclassifiedBlock as exc:
        pytest.fail(str(exc), pytrace=False)
    for command in commands:
        for name, value in command.env.items():
            monkeypatch.setenv(name, value)
        if not command.words:
            continue  # an `export`
        args = [_swap(word, world["swaps"]) for word in command.words]
        code = main(args)
        captured = capsys.readouterr()
        wrong = _what_is_wrong(command, code, captured.err, world["swaps"])
        if wrong:
            # One message: where, the command as run, what is wrong, then the end of what it printed.
            msg = f"{block.where}: `tidemark {' '.join(args)}` {wrong} ({HOW_TO})\n{captured.err[-2000:]}"
            pytest.fail(msg, pytrace=False)
        if command.stdout_to is not None:
            Path(command.stdout_to).write_text(captured.out)


def _what_is_wrong(command: Command, code: int, err: str, swaps: dict[str, str]) -> str | None:
    if command.fails and code not in (1, 2):
        return f"exited {code}, the doc shows it failing (exit 1 or 2)"
    if not command.fails and code != 0:
        return f"exited {code}, the doc shows it succeeding"
    if command.error_line is not None and _swap(command.error_line, swaps) not in err.splitlines():
        return f"did not print the doc's error line {command.error_line!r}"
    if "Traceback" in err or "unexpected error" in err:
        return "printed a traceback or 'unexpected error'"
    return None
