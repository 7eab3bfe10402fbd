"""Exit codes a scheduler can rely on: every command, enumerated from the app, answers a usage mistake with 2.

docs/cli.md has the table; a command added later is covered here without touching this file.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer

from tidemark.cli.main import build_app, main, version_text


def _tree() -> tuple[list[tuple[str, ...]], list[tuple[str, ...]], dict[tuple[str, ...], Any]]:
    """(groups, leaf commands, leaf -> its click command) of the whole CLI."""
    root = typer.main.get_command(build_app([]))
    groups: list[tuple[str, ...]] = []
    leaves: dict[tuple[str, ...], Any] = {}

    def visit(command: Any, path: tuple[str, ...]) -> None:
        children = getattr(command, "commands", None)
        if children is None:
            leaves[path] = command
            return
        if path:
            groups.append(path)
        for name, child in children.items():
            visit(child, (*path, name))

    visit(root, ())
    return groups, sorted(leaves), leaves


GROUPS, LEAVES, COMMANDS = _tree()
VALUE_OPTIONS = [
    (path, option.opts[0])
    for path in LEAVES
    for option in COMMANDS[path].params
    if option.param_type_name == "option" and not option.is_flag and option.opts[0].startswith("--")
]


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_tree_holds_every_command() -> None:
    assert len(LEAVES) >= 25
    for expected in [("run",), ("checkpoint", "prune"), ("state", "expired"), ("plan", "memory"), ("jars", "fetch")]:
        assert expected in LEAVES
    assert ("state",) in GROUPS


@pytest.mark.parametrize("path", LEAVES, ids=" ".join)
def test_a_misspelled_flag_is_exit_2_in_one_line(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run([*path, "--no-such-flag"], capsys)
    assert code == 2, err
    assert "unexpected error" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "No such option: --no-such-flag" in lines[0]
    assert f"tidemark {' '.join(path)} --help" in lines[0]


@pytest.mark.parametrize(("path", "option"), VALUE_OPTIONS, ids=lambda v: " ".join(v) if isinstance(v, tuple) else v)
def test_an_option_without_its_value_is_exit_2(
    path: tuple[str, ...], option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run([*path, option], capsys)
    assert code == 2, err
    assert "unexpected error" not in err
    assert f"{option}' requires an argument" in err
    assert len([line for line in err.splitlines() if line.strip()]) == 1, err


@pytest.mark.parametrize("path", GROUPS, ids=" ".join)
def test_a_group_alone_shows_its_help_and_exits_2(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(list(path), capsys)
    assert code == 2
    assert out.count("Usage:") == 1, out  # once: typer's rich help prints itself as the error is raised
    assert err == ""


def test_no_command_shows_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run([], capsys)
    assert (code, err) == (2, "")
    assert out.count("Usage: tidemark") == 1, out
    assert "checkpoint" in out


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["--help"], capsys)
    assert code == 0
    assert "Usage: tidemark" in out


def test_an_unknown_command_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(["inspect"], capsys)
    assert code == 2
    assert err.strip() == "error: No such command 'inspect'. (see 'tidemark --help')"


def test_a_missing_argument_and_a_bad_value_are_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(["checkpoint", "prune", "--keep", "2"], capsys)
    assert code == 2
    assert "Missing argument" in err
    code, _, err = _run(["checkpoint", "prune", "x", "--keep", "two"], capsys)
    assert code == 2
    assert "Invalid value for '--keep'" in err
    assert "unexpected error" not in err


def test_version_prints_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    code, out, err = _run(["--version"], capsys)
    assert (code, err) == (0, "")
    assert out.strip() == version_text()
    assert out.startswith(f"tidemark {version('tidemark')} (pyspark {version('pyspark')}")


def test_the_installed_script_has_the_same_codes(tmp_path: Path) -> None:
    """The console script, as a scheduler runs it (its own process, no terminal)."""
    script = Path(sys.executable).with_name("tidemark")
    for args, code in (([], 2), (["--version"], 0), (["checkpoint", "prune", str(tmp_path), "--keep"], 2)):
        done = subprocess.run([str(script), *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == code, (args, done.stderr)
        assert "unexpected error" not in done.stderr
        assert "Traceback" not in done.stderr


@pytest.mark.parametrize("flag", ["--dry-run", "--apply"])
def test_prune_takes_dry_run_as_well_as_apply(flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Dry run is the default; saying so is not a usage error (and --apply still removes)."""
    import shutil

    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(Path(__file__).resolve().parents[1] / "fixtures" / "spark35" / "hdfs_window", checkpoint)
    before = sorted(p.relative_to(checkpoint) for p in checkpoint.rglob("*"))
    code, out, err = _run(["checkpoint", "prune", str(checkpoint), "--keep", "1", flag], capsys)
    assert code == 0, err
    after = sorted(p.relative_to(checkpoint) for p in checkpoint.rglob("*"))
    if flag == "--dry-run":
        assert after == before
        assert "dry run" in out
    else:
        assert len(after) < len(before)


def test_check_before_any_committed_batch_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.helpers import write_config

    code, out, err = _run(["check", str(write_config(tmp_path))], capsys)
    assert code == 0, err
    assert "(no committed batch yet)" in out and "None" not in out, out


@pytest.mark.parametrize("on_path", [False, True])
def test_the_next_command_init_prints_works_as_printed(tmp_path: Path, on_path: bool) -> None:
    """A fresh clone has tidemark in .venv/bin, not on PATH: the hint names what works from where the user is."""
    import os
    import shlex

    script = Path(sys.executable).with_name("tidemark")
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if Path(p) != script.parent)
    env = {**os.environ, "PATH": f"{script.parent}{os.pathsep}{path}" if on_path else path}
    started = "tidemark" if on_path else str(script)
    done = subprocess.run(
        [started, "init", "demo"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    hint = next(line for line in done.stdout.splitlines() if line.startswith("next: "))
    words = shlex.split(hint.removeprefix("next: "))
    assert words[0] == "tidemark" if on_path else Path(words[0]).resolve() == script.resolve(), hint
    typed = subprocess.run(
        [*words[:1], "--version"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert typed.returncode == 0 and typed.stdout.startswith("tidemark "), typed


def test_a_class_the_jvm_cannot_load_is_one_line_naming_it() -> None:
    """A Spark session reused without the jar a command needs (found on Spark 4.2 by the abfs smoke test, where a
    session another in-process command started had no hadoop-azure): one line naming the class, not a stack."""
    from tidemark.cli.errors import EXIT_FAILURE, outcome

    stack = (
        "An error occurred while calling o519.start.\n: java.lang.RuntimeException: java.lang.ClassNotFoundException:"
        " Class org.apache.hadoop.fs.azurebfs.AzureBlobFileSystem not found\n\tat org.apache.hadoop.conf.Configuration"
    )
    result = outcome(RuntimeError(stack))
    assert result.code == EXIT_FAILURE and result.line is not None
    assert "org.apache.hadoop.fs.azurebfs.AzureBlobFileSystem" in result.line and "\n" not in result.line
    assert "unexpected error" not in result.line and "its own process" in result.line
    other = outcome(RuntimeError("java.lang.IllegalStateException: boom"))
    assert other.line is not None and "unexpected error" in other.line
