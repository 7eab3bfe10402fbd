"""Every fenced block of the docs is classified, and the blocks that do not run here are counted (no JVM).

tests/integration/test_docs.py runs the command blocks.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.doc_blocks import Block, UnclassifiedBlock, blocks
from tidemark.compat import tomllib

# Blocks that cannot run here, each with its reason in its first line: make's own targets (2), a real Azure,
# S3, GCS account and an HDFS namenode (1 + 4), a standalone cluster and spark-submit to a real one (3 + 2 in
# kafka.md and storage.md), the benchmarks in docs/benchmarks/ (3).
NOT_RUN = 17
ALL = blocks()


def test_every_block_says_what_it_is() -> None:
    problems = []
    for block in ALL:
        try:
            block.kind  # noqa: B018
            block.commands()
        except UnclassifiedBlock as exc:
            problems.append(str(exc))
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


def test_the_blocks_that_do_not_run_are_counted_and_say_why() -> None:
    skipped = [b for b in ALL if b.kind_or_unclassified == "no-run"]
    listed = "\n".join(f"  {b.where}: {b.no_run_reason}" for b in skipped)
    if len(skipped) != NOT_RUN:
        msg = f"{len(skipped)} blocks are marked no-run, NOT_RUN in {__name__} pins {NOT_RUN}: is each reason true?\n"
        pytest.fail(msg + listed, pytrace=False)
    short = [
        f"{b.where}: '# no-run: {b.no_run_reason}' is no reason" for b in skipped if len(b.no_run_reason or "") <= 10
    ]
    if short:
        pytest.fail("\n".join(short), pytrace=False)


def test_there_are_commands_to_run() -> None:
    commands = [c for b in ALL if b.kind_or_unclassified in ("run", "console") for c in b.commands()]
    assert len(commands) >= 15


@pytest.mark.parametrize("block", [b for b in ALL if b.kind_or_unclassified == "data"], ids=lambda b: b.where)
def test_data_examples_parse(block: Block) -> None:
    try:
        if block.tag == "toml":
            tomllib.loads(block.body)
        elif block.tag == "json":
            json.loads(block.body)
        elif block.tag == "python":
            compile(block.body, block.where, "exec")
    except (ValueError, SyntaxError) as exc:
        pytest.fail(f"{block.where}: this {block.tag} example does not parse: {exc}", pytrace=False)


def test_an_untagged_block_is_refused_with_its_place(tmp_path: object) -> None:
    from tests.doc_blocks import ROOT

    block = Block(ROOT / "docs" / "new.md", 7, "", "tidemark run x.toml\n")
    with pytest.raises(UnclassifiedBlock, match=r"docs/new.md:7: a fenced block with no language tag; .* tag it sh"):
        block.kind  # noqa: B018
    assert block.kind_or_unclassified == "unclassified"
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


@pytest.mark.parametrize(
    ("body", "hint"),
    [
        ('[source]\nformat = "kafka"\n', "tag it toml"),
        ('{"a": 1}\n', "tag it json"),
        ("error: data lost in Kafka: clicks-0 offsets 45..51\n", "tag it text"),
        ("$ tidemark analyze demo/checkpoint-monitor\nno findings\n", "tag it console ("),
        ("$ spark-submit --packages x main.py\n", "tag it console, first line '# no-run: <reason>'"),
        ("tidemark run demo/tidemark.toml\n", "tag it sh ("),
        ('spark-submit --packages "$(x)" \\\n  --conf a=b\n', "tag it sh, first line '# no-run: <reason>'"),
    ],
)
def test_a_block_without_a_tag_is_told_which_tag_it_looks_like(body: str, hint: str) -> None:
    from tests.doc_blocks import ROOT

    with pytest.raises(UnclassifiedBlock, match=r"^docs/kafka.md:3: .*" + re.escape(hint)):
        Block(ROOT / "docs" / "kafka.md", 3, "", body).kind  # noqa: B018
