"""The README stays true: its config example is valid and every command it lists exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tidemark.cli.main import main
from tidemark.compat import tomllib
from tidemark.config import parse_config

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")


def test_readme_config_example_is_valid(tmp_path: Path) -> None:
    block = re.search(r"```toml\n(.*?)```", README, re.S)
    assert block is not None
    config = parse_config(tomllib.loads(block.group(1)), base=tmp_path)
    assert config.pipeline.name == "clicks"
    assert config.source.path == str(tmp_path / "landing")
    assert config.spark_conf()["spark.sql.streaming.stateStore.maintenanceInterval"] == "30s"


GROUPS = ("checkpoint", "state", "plan", "cluster", "metrics")


def _commands(text: str) -> list[str]:
    """Every `tidemark X` / `tidemark GROUP a/b/c` the README names, slash lists expanded."""
    found: set[str] = set()
    for first, rest in re.findall(r"(?:^|`)tidemark ([a-z]+)(?: ([a-z]+(?:[|/][a-z]+)*))?", text, re.M):
        if first in GROUPS:
            found.update(f"{first} {sub}" for sub in re.split(r"[|/]", rest) if sub)
        else:
            found.add(first)
    return sorted(found)


COMMANDS = _commands(README)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_readme_command_exists(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*command.split(), "--help"]) == 0, command
    assert "Usage" in capsys.readouterr().out


def test_readme_lists_the_main_commands() -> None:
    for command in (
        "run",
        "generate",
        "init",
        "checkpoint inspect",
        "checkpoint prune",
        "recover",
        "analyze",
        "report",
        "plan memory",
        "plan checkpoint",
        "state stats",
        "state show",
        "state diff",
        "state expired",
        "cluster up",
        "cluster down",
        "cluster status",
        "metrics rules",
        "metrics dashboard",
    ):
        assert command in COMMANDS


def test_architecture_map_names_every_package_and_the_layering_contract_covers_them() -> None:
    import tidemark

    root = Path(tidemark.__file__).parent
    packages = sorted(p.name for p in root.iterdir() if (p / "__init__.py").exists())
    section = README.split("## Architecture", 1)[1].split("\n## ", 1)[0]
    assert [p for p in packages if f"{p}/" not in section] == []
    pyproject = tomllib.loads((root.parents[1] / "pyproject.toml").read_text(encoding="utf-8"))
    (layers,) = [c for c in pyproject["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    layered = {name.strip() for line in layers["layers"] for name in line.split("|")}
    modules = {p.stem for p in root.glob("*.py") if p.stem != "__init__"}
    assert (set(packages) | modules) - layered == set()
