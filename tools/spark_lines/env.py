"""Build (or reuse) a Python environment for one Spark line, outside the clone, and print its python.

    python3 tools/spark_lines/env.py 4.0                 # Python 3.11 (the default)
    python3 tools/spark_lines/env.py 3.5 --python 3.10
    python3 tools/spark_lines/env.py 3.3 --python 3.9    # older lines: see tools/spark_lines/README.md

The environment is `~/.cache/tidemark-ci/envs/<line>-py<python>-<first 12 hex of the sha256 of the requirements
file>` (override the root with TIDEMARK_ENV_CACHE), so changing a pin builds a new one and an unchanged file
reuses the old one. It is built with uv (`TIDEMARK_UV`, else `.uv/bin/uv` of this clone, else `uv` on PATH) from
`requirements-<line>.txt` beside this file; the Python comes from pyenv (`~/.pyenv/versions/<python>.*`) when
there is one, else from uv's own discovery (never downloaded). A folder is used only once its `.complete` marker
is written, so an interrupted build is started over. Only the standard library: runs on any Python 3.8+.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
MARKER = ".complete"


def requirements_file(line: str) -> Path:
    path = HERE / f"requirements-{line}.txt"
    if not path.is_file():
        known = sorted(p.stem.replace("requirements-", "") for p in HERE.glob("requirements-*.txt"))
        sys.exit(f"no requirements file for Spark line {line!r}; known lines: {', '.join(known)}")
    return path


def env_dir(line: str, python: str, requirements: Path) -> Path:
    digest = hashlib.sha256(requirements.read_bytes()).hexdigest()[:12]
    root = Path(os.environ.get("TIDEMARK_ENV_CACHE", Path.home() / ".cache" / "tidemark-ci" / "envs"))
    return root / f"{line}-py{python}-{digest}"


def find_uv() -> str:
    for candidate in (os.environ.get("TIDEMARK_UV"), str(REPO / ".uv" / "bin" / "uv"), shutil.which("uv")):
        if candidate and Path(candidate).is_file():
            return candidate
    sys.exit("uv not found: run `make install` in the clone, or set TIDEMARK_UV")


def find_python(python: str) -> str:
    """The newest pyenv interpreter of that minor version, else the version request itself for uv."""
    versions = Path.home() / ".pyenv" / "versions"
    matches = []
    for folder in versions.glob(f"{python}.*"):
        parts = folder.name.split(".")
        if len(parts) == 3 and all(p.isdigit() for p in parts) and (folder / "bin" / "python3").exists():
            matches.append((tuple(int(p) for p in parts), folder / "bin" / "python3"))
    return str(max(matches)[1]) if matches else python


def build(line: str, python: str) -> Path:
    requirements = requirements_file(line)
    target = env_dir(line, python, requirements)
    interpreter = target / "bin" / "python"
    if (target / MARKER).exists():
        return interpreter
    shutil.rmtree(target, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    uv = find_uv()
    env = dict(os.environ, UV_PYTHON_DOWNLOADS="never")
    env.pop("VIRTUAL_ENV", None)
    log = sys.stderr
    subprocess.run(
        [uv, "venv", "--no-config", "--quiet", "--python", find_python(python), str(target)], check=True, env=env
    )
    install = [uv, "pip", "install", "--no-config", "--quiet", "--python", str(interpreter), "-r", str(requirements)]
    subprocess.run(install, check=True, env=env, stdout=log)
    (target / MARKER).write_text(requirements.read_text())
    return interpreter


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("line", help="Spark line, e.g. 3.5 or 4.1 (a requirements-<line>.txt beside this script)")
    parser.add_argument("--python", default="3.11", help="Python minor version (default 3.11)")
    args = parser.parse_args()
    print(build(args.line, args.python))


if __name__ == "__main__":
    main()
