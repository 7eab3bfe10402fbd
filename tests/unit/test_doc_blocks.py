"""Every fenced block of the docs is classified, and the blocks that do not run here are counted (no JVM).

tests/integration/test_docs.py runs the command blocks.
"""

from __future__ import annotations

import json

import pytest

from tests.doc_blocks import Block, UnclassifiedBlock, blocks
from tidemark.compat import tomllib

# Blocks that cannot run here, each with its reason in its first line: make's own targets (2), a real Azure,
# S3, GCS account and an HDFS namenode (1 + 4), a standalone cluster and spark-submit to a real one (3 + 2 in
# kafka.md and storage.md), the benchmarks in docs/benchmarks/ (3).
NOT_RUN = 15
ALL = blocks()


def test_every_block_says_what_it_is() -> None:
    problems = []
    for block in ALL:
        try:
            block.kind  # noqa: B018
            block.commands()
        except UnclassifiedBlock as exc:
            problems.append(str(exc))
    assert problems == []


def test_the_blocks_that_do_not_run_are_counted_and_say_why() -> None:
    skipped = [b for b in ALL if b.kind == "no-run"]
    assert len(skipped) == NOT_RUN, [f"{b.where}: {b.no_run_reason}" for b in skipped]
    assert all(len(b.no_run_reason or "") > 10 for b in skipped)


def test_there_are_commands_to_run() -> None:
    commands = [c for b in ALL for c in b.commands()]
    assert len(commands) >= 15


def _kind(block: Block) -> str:
    try:
        return block.kind
    except UnclassifiedBlock:
        return "unclassified"  # reported by test_every_block_says_what_it_is


@pytest.mark.parametrize("block", [b for b in ALL if _kind(b) == "data"], ids=lambda b: b.where)
def test_data_examples_parse(block: Block) -> None:
    if block.tag == "toml":
        tomllib.loads(block.body)
    elif block.tag == "json":
        json.loads(block.body)
    elif block.tag == "python":
        compile(block.body, block.where, "exec")


def test_an_untagged_block_is_refused_with_its_place(tmp_path: object) -> None:
    from tests.doc_blocks import ROOT

    block = Block(ROOT / "docs" / "new.md", 7, "", "tidemark run x.toml\n")
    with pytest.raises(UnclassifiedBlock, match=r"docs/new.md:7: a fenced block with no language tag. Tag it sh"):
        block.kind  # noqa: B018
    piped = Block(ROOT / "docs" / "new.md", 9, "sh", "tidemark analyze x --json | jq .a\n")
    with pytest.raises(UnclassifiedBlock, match="a pipe"):
        piped.commands()
    other = Block(ROOT / "docs" / "new.md", 11, "sh", "ls -la\n")
    with pytest.raises(UnclassifiedBlock, match="not a tidemark command"):
        other.commands()


def test_console_blocks_know_which_commands_fail() -> None:
    block = Block(ALL[0].path, 1, "console", "$ tidemark a --x\nerror: bad\n$ tidemark b \\\n    --y 1\nok\n")
    first, second = block.commands()
    assert (first.words, first.fails, first.error_line) == (("a", "--x"), True, "error: bad")
    assert (second.words, second.fails) == (("b", "--y", "1"), False)
