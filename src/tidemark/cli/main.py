"""The `tidemark` entry point: registers every command group and maps errors to exit codes."""

from __future__ import annotations

import importlib
import logging
import sys
from typing import Annotated

import click
import typer
from rich.markup import escape

from tidemark.cli.output import err
from tidemark.errors import TidemarkError

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
    "audit": "audit",
    "cluster": "cluster",
    "metrics": "metrics",
    "check": "evolve",
    "jars": "jars",
}
_debug = {"on": False}
_QUIET_LOGGERS = ("azure", "adlfs", "botocore", "aiobotocore", "s3fs", "gcsfs", "fsspec", "urllib3", "py4j")


def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks and debug logs.")] = False,
) -> None:
    _debug["on"] = debug
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if not debug:
        # Cloud SDKs log multi-line warnings (every credential they tried); tidemark says it in one line.
        for name in _QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.CRITICAL)
    else:
        # py4j's debug log is every command sent to the JVM, Spark settings (and so storage keys) included.
        logging.getLogger("py4j").setLevel(logging.INFO)


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


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; return the exit code (0 ok, 1 failure, 2 bad usage)."""
    args = sys.argv[1:] if argv is None else argv
    _debug["on"] = "--debug" in args
    try:
        result = build_app(args)(args=args, prog_name="tidemark", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.exceptions.Abort:
        err.print("[red]aborted[/red]")
        return 1
    except click.UsageError as exc:
        exc.show(file=sys.stderr)
        return 2
    except click.ClickException as exc:
        exc.show(file=sys.stderr)
        return int(exc.exit_code)
    except TidemarkError as exc:
        if _debug["on"]:
            err.print_exception()
        err.print(f"[bold red]error:[/bold red] {escape(str(exc))}")
        return exc.exit_code
    except KeyboardInterrupt:
        err.print("[red]interrupted[/red]")
        return 130
    except Exception as exc:
        if _debug["on"]:
            raise
        err.print(
            f"[bold red]unexpected error:[/bold red] {type(exc).__name__}: {escape(str(exc))} "
            "(run with --debug for details)"
        )
        return 1
    return result if isinstance(result, int) else 0


def _entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    _entry()
