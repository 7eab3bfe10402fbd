"""The fenced blocks of README.md and docs/**/*.md, classified for the doc tests (tests/integration/test_docs.py).

Every block says what it is by its language tag:

- `sh` (or `bash`, `shell`): commands that run as written, each must exit 0;
- `console`: `$ ` lines run; the other lines show output. A shown line starting with `error:` or `incompatible`
  means the command fails (exit 1 or 2), and a shown `error:` line must be what it prints;
- `text`: not a command (output, a usage synopsis, a folder tree);
- `toml`, `yaml`, `json`, `python`: examples checked for syntax (TOML, JSON and Python are parsed).

A command block that cannot run here starts with `# no-run: <reason>` (shown to readers, counted by a test). A
block with no tag, or another tag, is an error naming the file and line and the tag it looks like, so a new doc
cannot slip through. How to tag, for writers of docs: CONTRIBUTING.md, "Docs that run".
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN_TAGS = frozenset({"sh", "bash", "shell"})
DATA_TAGS = frozenset({"toml", "yaml", "json", "python"})
NO_RUN = re.compile(r"^# no-run: (?P<reason>\S.*)$")
_FENCE = re.compile(r"^```(?P<tag>[^\n`]*)\n(?P<body>.*?)^```[ \t]*$", re.S | re.M)
HOW_TO = "CONTRIBUTING.md, 'Docs that run'"


class UnclassifiedBlock(ValueError):
    """A block the doc tests cannot tell what to do with."""


@dataclass(frozen=True)
class Command:
    """One command of a block: its words, environment assignments, stdout redirection, expected failure."""

    words: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    stdout_to: str | None = None
    fails: bool = False
    error_line: str | None = None  # the error line a console block shows for it


@dataclass(frozen=True)
class Block:
    """One fenced block of a markdown file."""

    path: Path
    line: int
    tag: str
    body: str

    @property
    def where(self) -> str:
        """file:line, relative to the repository."""
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def kind(self) -> str:
        """run, console, no-run, text or data; UnclassifiedBlock when the tag says none of them."""
        if self.tag in RUN_TAGS or self.tag == "console":
            return "no-run" if self.no_run_reason else ("run" if self.tag in RUN_TAGS else "console")
        if self.tag == "text":
            return "text"
        if self.tag in DATA_TAGS:
            return "data"
        what = f"the language tag {self.tag!r}" if self.tag else "no language tag"
        msg = (
            f"{self.where}: a fenced block with {what}; it looks like {_looks_like(self.body)} (the tags: sh, "
            f"console, text, toml, yaml, json, python, and '# no-run: <reason>': {HOW_TO})"
        )
        raise UnclassifiedBlock(msg)

    @property
    def kind_or_unclassified(self) -> str:
        """kind, or 'unclassified' (reported with its place by tests/unit/test_doc_blocks.py)."""
        try:
            return self.kind
        except UnclassifiedBlock:
            return "unclassified"

    @property
    def no_run_reason(self) -> str | None:
        """The reason a command block gives for not running here."""
        first = self.body.splitlines()[0] if self.body.strip() else ""
        found = NO_RUN.match(first.strip())
        return found.group("reason") if found else None

    def commands(self) -> list[Command]:
        """The commands of a run or console block, in order."""
        if self.kind == "run":
            return [c for line in _logical_lines(self.body) for c in _parse(line, self.where)]
        if self.kind == "console":
            return _console(self.body, self.where)
        return []


def _looks_like(body: str) -> str:
    """The tag a block without one probably wants: a hint in the error message, never a classification."""
    from tidemark.compat import tomllib

    lines = [line.strip() for line in body.splitlines() if line.strip()]
    if any(line.startswith("$ ") for line in lines):
        runs_here = all(line[2:].split()[:1] == ["tidemark"] for line in lines if line.startswith("$ "))
        return "a console session: tag it console" + ("" if runs_here else ", first line '# no-run: <reason>'")
    if lines and re.match(r"^(?:[A-Z_][A-Z0-9_]*=\S*\s+)*[a-z][\w.-]*(?:\s|$)", lines[0]) and ":" not in lines[0][:12]:
        runs_here = all(line.split()[:1] in (["tidemark"], ["export"]) or line.startswith("#") for line in lines)
        return "commands: tag it sh" + ("" if runs_here else ", first line '# no-run: <reason>'")
    for name, parse in (("toml", tomllib.loads), ("json", json.loads)):
        try:
            parse(body)
        except ValueError:
            continue
        if lines:
            return f"{name}: tag it {name}"
    return "output or a synopsis: tag it text"


def _logical_lines(body: str) -> list[str]:
    lines: list[str] = []
    pending = ""
    for raw in body.splitlines():
        text = pending + raw
        if text.rstrip().endswith("\\"):
            pending = text.rstrip()[:-1] + " "
            continue
        pending = ""
        if text.strip():
            lines.append(text)
    return lines


def _parse(line: str, where: str) -> list[Command]:
    """A shell line: NAME=value assignments, `export`, `&&`, `> file`; anything else is refused."""
    words = shlex.split(line, comments=True)
    commands: list[Command] = []
    while words:
        part = words[: words.index("&&")] if "&&" in words else words
        words = words[len(part) + 1 :]
        if "|" in part:
            msg = (
                f"{where}: a pipe in {line!r}: the doc tests run tidemark commands only (write to a file instead, "
                f"or mark the block '# no-run: <reason>'; {HOW_TO})"
            )
            raise UnclassifiedBlock(msg)
        env: dict[str, str] = {}
        if part and part[0] == "export":
            commands.append(Command((), dict(w.split("=", 1) for w in part[1:])))
            continue
        while part and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", part[0]):
            name, value = part[0].split("=", 1)
            env[name] = value
            part = part[1:]
        stdout_to = None
        if ">" in part:
            stdout_to = part[part.index(">") + 1]
            part = part[: part.index(">")]
        if not part or part[0] != "tidemark":
            msg = (
                f"{where}: {line!r} is not a tidemark command: the doc tests run tidemark commands only "
                f"(mark the block '# no-run: <reason>' as its first line; {HOW_TO})"
            )
            raise UnclassifiedBlock(msg)
        commands.append(Command(tuple(part[1:]), env, stdout_to))
    return commands


def _console(body: str, where: str) -> list[Command]:
    commands: list[Command] = []
    current: list[str] = []
    shown: list[list[str]] = []
    for raw in body.splitlines():
        if raw.startswith("$ "):
            current = [raw[2:]]
            shown.append(current)
            commands.append(Command(()))
        elif current and current[-1].rstrip().endswith("\\"):
            current[-1] = current[-1].rstrip()[:-1] + " " + raw.strip()
        elif commands:
            current.append(raw)
    parsed: list[Command] = []
    for lines in shown:
        (command,) = _parse(lines[0], where)
        output = [line for line in lines[1:] if line.strip()]
        error = next((line for line in output if line.startswith("error:")), None)
        fails = error is not None or any(line.startswith("incompatible") for line in output)
        parsed.append(Command(command.words, command.env, command.stdout_to, fails, error))
    return parsed


def doc_files() -> list[Path]:
    """README.md, CONTRIBUTING.md and every markdown file under docs/ (new docs are picked up by themselves)."""
    top = [ROOT / name for name in ("README.md", "CONTRIBUTING.md") if (ROOT / name).is_file()]
    return [*top, *sorted((ROOT / "docs").rglob("*.md"))]


def blocks() -> list[Block]:
    """Every fenced block, in file then line order."""
    found: list[Block] = []
    for path in doc_files():
        text = path.read_text(encoding="utf-8")
        for match in _FENCE.finditer(text):
            line = text[: match.start()].count("\n") + 1
            found.append(Block(path, line, match.group("tag").strip(), match.group("body")))
    return found
