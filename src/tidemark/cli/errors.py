"""The CLI's one error funnel: every exception a command can end with becomes one line and an exit code.

Exit codes (docs/cli.md): 0 ok, 1 failure (or findings at or above the threshold), 2 bad usage (bad flag, bad
config, no command), 130 interrupted (Ctrl-C), 143 stopped by SIGTERM. A traceback is printed only with
`tidemark --debug`.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import Any

from tidemark.errors import TidemarkError

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143  # 128 + SIGTERM, as a shell reports a process SIGTERM ended
_MAX_LINE = 400  # characters of a foreign exception's message shown on the error line


def _classes(name: str) -> tuple[type[BaseException], ...]:
    """click's exception class `name`, and typer's own copy of it (typer >= 0.16 ships its own click)."""
    found: list[type[BaseException]] = []
    for module in ("click.exceptions", "typer._click.exceptions", "typer.exceptions"):
        try:
            cls = getattr(importlib.import_module(module), name, None)
        except ImportError:
            continue
        if isinstance(cls, type) and issubclass(cls, BaseException) and cls not in found:
            found.append(cls)
    return tuple(found)


USAGE_ERRORS = _classes("UsageError")
CLICK_ERRORS = _classes("ClickException")
EXITS = _classes("Exit")
ABORTS = _classes("Abort")


@dataclass(frozen=True)
class Outcome:
    """What the CLI prints (one line, or a help text) and the exit code it ends with."""

    code: int
    line: str | None = None  # rich markup, already escaped
    help_text: str | None = None  # printed as it is, on stdout


def first_line(text: str, limit: int | None = _MAX_LINE) -> str:
    """The first non-empty line of text, cut to limit characters (a foreign message may hold a whole stack)."""
    for line in text.splitlines():
        if line.strip():
            line = line.strip()
            return line if limit is None or len(line) <= limit else line[: limit - 1] + "…"
    return ""


def _usage(exc: BaseException, command: str) -> Outcome:
    ctx: Any = getattr(exc, "ctx", None)
    if type(exc).__name__ == "NoArgsIsHelpError" and ctx is not None:
        # `tidemark` or `tidemark state` alone: the help once, and exit 2 (no command was run). The error holds
        # what ctx.get_help() returned when it was raised: empty where typer's rich help printed itself then.
        shown = str(getattr(exc, "message", "") or "")
        return Outcome(EXIT_USAGE, help_text=shown or None)
    format_message = getattr(exc, "format_message", None)
    message = format_message() if callable(format_message) else str(exc)
    hint = f" (see '{ctx.command_path if ctx is not None else command} --help')"
    return Outcome(EXIT_USAGE, _error(first_line(str(message)) + hint))


def _error(text: str) -> str:
    return "[bold red]error:[/bold red] " + _escape(text)


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def _os_error(exc: OSError) -> str:
    """One line for a file the command could not read or write (permission, missing, wrong kind)."""
    name = exc.filename if exc.filename is not None else ""
    reason = {
        PermissionError: "permission denied",
        FileNotFoundError: "no such file or folder",
        IsADirectoryError: "it is a folder, a file was expected",
        NotADirectoryError: "it is a file, a folder was expected",
    }.get(type(exc), exc.strerror or type(exc).__name__)
    return f"cannot open {name}: {reason}" if name else f"{reason}: {first_line(str(exc))}"


# A JVM class Spark could not load, as a Py4JJavaError (or a query failure) carries it in its Java stack.
_MISSING_CLASS = re.compile(r"java\.lang\.ClassNotFoundException: (?:Class )?([\w.$]+)")


def missing_class_line(name: str) -> str:
    """One line for a class the running JVM cannot load: which jar it is in is fixed when the JVM starts."""
    return (
        f"Spark cannot load {name}: its jar is not on this JVM's classpath; jars are fixed when the JVM starts, so a "
        "Spark session started earlier in this process without it (a notebook's, another command's) keeps going "
        "without: run the command in its own process (`tidemark ...`), or start the session with the jars "
        "`tidemark jars list` names"
    )


def outcome(exc: BaseException, command: str = "tidemark") -> Outcome:
    """The line and exit code for an exception that ended a command (command: its words, for the help hint)."""
    if isinstance(exc, EXITS):
        return Outcome(int(getattr(exc, "exit_code", getattr(exc, "code", 1)) or 0))
    if isinstance(exc, (KeyboardInterrupt, *ABORTS)):
        return Outcome(EXIT_INTERRUPTED, "[red]interrupted[/red]")
    if isinstance(exc, USAGE_ERRORS):
        return _usage(exc, command)
    if isinstance(exc, CLICK_ERRORS):
        message = getattr(exc, "format_message", lambda: str(exc))()
        return Outcome(int(getattr(exc, "exit_code", 1)), _error(first_line(message)))
    if isinstance(exc, TidemarkError):
        # tidemark's own messages are one line by design and never cut; a second line is never shown.
        return Outcome(exc.exit_code, _error(first_line(str(exc), None) or type(exc).__name__))
    if isinstance(exc, OSError) and type(exc) in (
        PermissionError,
        FileNotFoundError,
        IsADirectoryError,
        NotADirectoryError,
    ):
        return Outcome(EXIT_FAILURE, _error(_os_error(exc)))
    missing = _MISSING_CLASS.search(str(exc))
    if missing is not None:
        return Outcome(EXIT_FAILURE, _error(missing_class_line(missing.group(1))))
    return Outcome(
        EXIT_FAILURE,
        "[bold red]unexpected error:[/bold red] "
        + _escape(f"{type(exc).__name__}: {first_line(str(exc))} (run with --debug for details)"),
    )
