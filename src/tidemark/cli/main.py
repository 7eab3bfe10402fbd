"""The `tidemark` entry point: registers every command group and maps errors to exit codes (cli/errors.py)."""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
import threading
import traceback
from types import FrameType
from typing import Annotated, Any

import typer

from tidemark.cli.errors import EXIT_INTERRUPTED, EXIT_TERMINATED, EXITS, outcome
from tidemark.cli.output import err, out, show_steps
from tidemark.secrets import RedactingFilter, redact
from tidemark.steps import show_with

# Which module registers each top-level command: only that one is imported for a run of the CLI,
# so `tidemark checkpoint inspect` does not pay for the imports of every other command.
COMMAND_MODULES = {
    "run": "pipeline",
    "generate": "pipeline",
    "init": "pipeline",
    "checkpoint": "checkpoint",
    "state": "state",
    "analyze": "monitor",
    "report": "monitor",
    "plan": "plan",
    "recover": "recover",
    "adopt": "adopt",
    "audit": "audit",
    "cluster": "cluster",
    "metrics": "metrics",
    "check": "evolve",
    "jars": "jars",
}
_state = {"debug": False, "interrupted": False, "terminated": False}
_QUIET_LOGGERS = ("azure", "adlfs", "botocore", "aiobotocore", "s3fs", "gcsfs", "fsspec", "urllib3", "py4j")
# pyspark's own Python loggers: an analysis error is logged as JSON with its whole JVM stack before it is raised.
_PYSPARK_LOGGERS = ("SQLQueryContextLogger", "pyspark")


def version_text() -> str:
    """`tidemark --version`: tidemark's version and the Spark and Python it runs with."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        spark = version("pyspark")
    except PackageNotFoundError:
        spark = "not installed"
    return f"tidemark {version('tidemark')} (pyspark {spark}, Python {sys.version.split()[0]})"


def _show_version(value: bool) -> None:
    if value:
        out.print(version_text(), markup=False)
        raise typer.Exit(0)


def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks and debug logs.")] = False,
    version: Annotated[
        bool,
        typer.Option("--version", is_eager=True, callback=_show_version, help="Print the version and exit."),
    ] = False,
) -> None:
    del version
    _state["debug"] = debug
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for handler in logging.getLogger().handlers:  # a secret read at run time never reaches a log line
        handler.addFilter(RedactingFilter())
    if not debug:
        # Cloud SDKs log multi-line warnings (every credential they tried); tidemark says it in one line.
        for name in _QUIET_LOGGERS + _PYSPARK_LOGGERS:
            logging.getLogger(name).setLevel(logging.CRITICAL)
        # py4j logs its connection errors (a Ctrl-C in the middle of a call) with a traceback on the root logger.
        for handler in logging.getLogger().handlers:
            handler.addFilter(_not_from_py4j)
        # Spark's own log and Java stack traces go to a file (docs/cli.md), not between tidemark's lines.
        from tidemark.cache import cache_root
        from tidemark.session import send_jvm_output_to

        send_jvm_output_to(cache_root() / "logs")
    else:
        # py4j's debug log is every command sent to the JVM, Spark settings (and so storage keys) included.
        logging.getLogger("py4j").setLevel(logging.INFO)


def _not_from_py4j(record: logging.LogRecord) -> bool:
    return f"{os.sep}py4j{os.sep}" not in record.pathname


def build_app(args: list[str] | None = None) -> typer.Typer:
    """The root app with the commands args need (all of them for help or an unknown command)."""
    app = typer.Typer(
        name="tidemark",
        help="Stateful Spark Structured Streaming pipelines from one config file, and the tools around them.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        add_completion=False,
    )
    app.callback()(_root)
    words = [a for a in args or [] if not a.startswith("-")]
    wanted = COMMAND_MODULES.get(words[0]) if words else None
    names = [wanted] if wanted else list(dict.fromkeys(COMMAND_MODULES.values()))
    for name in names:
        importlib.import_module(f"tidemark.cli.{name}").register(app)
    return app


def command_words(app: typer.Typer, args: list[str]) -> str:
    """'tidemark checkpoint prune' for args that start with those words (for the hint of a usage error)."""
    words = ["tidemark"]
    command: Any = typer.main.get_command(app)
    for arg in args:
        if arg.startswith("-"):
            continue
        sub = (getattr(command, "commands", None) or {}).get(arg)
        if sub is None:
            break
        words.append(arg)
        command = sub
    return " ".join(words)


def _on_interrupt(signum: int, frame: FrameType | None) -> None:
    """Ctrl-C or SIGTERM: remember it (an exception it causes deep in Spark still ends as 'interrupted'), cancel
    Spark's jobs."""
    del frame
    first = not _state["interrupted"]
    _state["interrupted"] = True
    if signum == signal.SIGTERM:
        _state["terminated"] = True
    context = getattr(sys.modules.get("pyspark"), "SparkContext", None)
    active = getattr(context, "_active_spark_context", None)
    if active is not None and first:
        # From another thread (its own py4j connection): a call from inside this handler would cut into the one
        # the main thread is waiting on.
        threading.Thread(target=_cancel_jobs, args=(active,), name="tidemark-cancel", daemon=True).start()
    raise KeyboardInterrupt


def _cancel_jobs(context: Any) -> None:
    try:
        context.cancelAllJobs()
    except Exception as exc:  # the JVM may be going away already; the interrupt stops the command either way
        logging.getLogger(__name__).debug("cancelling Spark's jobs: %s", exc)


# tidemark.session puts this handler back after pyspark's SparkContext installs its own.
_on_interrupt.tidemark_interrupt = True  # type: ignore[attr-defined]


def _install_interrupt_handler() -> None:
    try:
        signal.signal(signal.SIGINT, _on_interrupt)
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:  # a scheduler's stop: the same clean exit (143)
            signal.signal(signal.SIGTERM, _on_interrupt)
    except ValueError:  # not the main thread (embedded use): leave the handler alone
        return


def _words(app: typer.Typer | None, args: list[str]) -> str:
    try:
        return command_words(app, args) if app is not None else "tidemark"
    except Exception:
        return "tidemark"


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; return the exit code (0 ok, 1 failure, 2 bad usage, 130 interrupted)."""
    args = sys.argv[1:] if argv is None else argv
    _state["debug"] = "--debug" in args
    _state["interrupted"] = False
    _state["terminated"] = False
    previous = signal.getsignal(signal.SIGINT)
    previous_term = signal.getsignal(signal.SIGTERM)
    _install_interrupt_handler()
    show_steps(json_output="--json" in args)
    app: typer.Typer | None = None
    try:
        app = build_app(args)
        result = app(args=args, prog_name="tidemark", standalone_mode=False)
        code = result if isinstance(result, int) else 0
    except BaseException as exc:
        if isinstance(exc, SystemExit):
            raise
        if _state["debug"] and not isinstance(exc, EXITS):
            # The whole trace, with every secret tidemark read masked (an exception's text may quote one).
            trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            err.print(redact(trace), markup=False, highlight=False)
        ended = outcome(exc, _words(app, args))
        if (_state["interrupted"] or _interrupted_within(exc)) and ended.code != 0:
            # An interrupt that surfaced as another error (py4j's, while pyspark's own handler was in place).
            ended = outcome(KeyboardInterrupt())
        if ended.help_text is not None:
            out.print(ended.help_text, markup=False, highlight=False)
        if ended.line is not None:
            err.print(redact(ended.line))  # a secret read at run time never reaches the terminal
        code = ended.code
        if code == EXIT_INTERRUPTED and _state["terminated"]:
            code = EXIT_TERMINATED
    else:
        # typer turns a KeyboardInterrupt inside a command into exit code 130 itself.
        if code == EXIT_INTERRUPTED:
            err.print(outcome(KeyboardInterrupt()).line)
            code = EXIT_TERMINATED if _state["terminated"] else code
    finally:
        show_with(None)
        try:
            signal.signal(signal.SIGINT, previous)
            signal.signal(signal.SIGTERM, previous_term)
        except (ValueError, TypeError):
            pass
    return code


def _interrupted_within(exc: BaseException) -> bool:
    """True when a KeyboardInterrupt is among the causes of exc."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def _entry() -> None:
    code = main()
    if code in (EXIT_INTERRUPTED, EXIT_TERMINATED):
        # A second Ctrl-C while the interpreter shuts Spark down must not print a traceback.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        # The process is ending: no JVM it started may outlive it (one still starting would). Only here, not in
        # main(), which a notebook or a test calls with a session that must go on.
        from tidemark.session import end_started_jvms

        end_started_jvms()
    sys.exit(code)


if __name__ == "__main__":
    _entry()
