"""The smoke runs: tidemark's smoke subset on every other supported Spark line and every other Python.

    python3 tools/spark_lines/smoke.py run                  # every target in TARGETS (what `make test` runs)
    python3 tools/spark_lines/smoke.py run 3.5@3.11         # one: Spark line 3.5 on Python 3.11
    python3 tools/spark_lines/smoke.py run default@3.13     # the default Spark (uv.lock) on Python 3.13
    python3 tools/spark_lines/smoke.py run 4.0@3.10:lowest  # the oldest versions the ranges admit (see below)
    python3 tools/spark_lines/smoke.py env 3.5@3.11         # build (or reuse) one environment, print its python

A target is LINE@PYTHON[:VARIANT]. Its environment is built the way a user's would be, outside the clone, in
`~/.cache/tidemark-ci/smoke/<target>-<key>` (TIDEMARK_ENV_CACHE moves the root): first the user's Spark stack
alone (`requirements-<line>.txt`; for `default`, the Spark stack of uv.lock), then tidemark's wheel with pip, as a
user types `pip install tidemark`, with the rest of uv.lock as constraints, then the test runner. The build fails
when installing tidemark changed any package of the user's Spark stack (it must keep the user's Spark). The key
is the sha256 of everything that decides the environment (the line's pins, uv.lock's export, the Python, RECIPE
below: bump it when the way an environment is built changes), so a changed pin or lock builds a new one and an
unchanged one is reused; a folder counts once its `.complete` marker exists. Each run reinstalls the wheel built
from the clone (no dependencies: seconds). Nothing else is needed on a clean machine than this clone's files,
`make install` (uv), Java, network access to PyPI and the Pythons of TARGETS (~/.pyenv/versions, else uv's own
discovery): an environment that cannot be built fails the run with the step that failed, never a skip.

Variants check the dependency ranges: `lowest` installs the line's newest pyspark with the oldest pandas, pyarrow,
numpy and protobuf that tidemark's ranges and the line's own minimums admit (uv's lowest-direct resolution),
`highest` the newest. They are not part of `make test`; tools/spark_lines/README.md records their results.

`run` writes one JSON file per target to `build/smoke/` (what each smoke test proved: a feature works, or is
refused in one line naming the Spark that has it), which `compat.py` compares with the README's table, and one to
`build/reliability/` (the fault-matrix cells its tests proved), which `tools/reliability.py` checks
docs/reliability.md against. Needs uv (`TIDEMARK_UV`, else this clone's `.uv/bin/uv`, else `uv` on PATH) and Java.
Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # env.py beside this file: run as a script or loaded by path (tests)
from env import find_python, find_uv  # noqa: E402

REPO = HERE.parent.parent
RESULTS = REPO / "build" / "smoke"
RELIABILITY = REPO / "build" / "reliability"
LOGS = REPO / "build" / "smoke-logs"  # each smoke run's output, printed whole when the run ends
MARKER = ".complete"
# Every other Spark line on Python 3.11, every other Python on the default Spark (not the cross product).
# In order of their run's length (longest first), so that JOBS side by side end close together.
TARGETS = ("4.2@3.11", "4.0@3.11", "3.5@3.11", "4.3@3.11", "default@3.12", "default@3.10", "default@3.13")
# Smoke runs side by side: a run waits on JVM starts and its broker as much as it computes, so two on two cores
# take less than one after the other (measured in docs/compatibility.md, "What CI runs").
JOBS = 2
# Features whose code is all on the JVM side, which another Python does not change (the Delta and Iceberg sinks:
# their jars and a foreachBatch that only calls the writer, their tables read through the delta-rs and pyiceberg
# wheels; the Kafka source: the locked connector jars; abfs: Hadoop's ABFS driver, and tidemark's own I/O through
# the same pure-Python Azure SDK wheels on every Python): the other Pythons on the default Spark leave them out (the
# full suite runs them on the default Python); README's table says "-".
JVM_ONLY = (
    "check",
    "state repartition",
    "repartition join v4",
    "delta",
    "iceberg",
    "kafka",
    "abfs",
    "delta abfs",
    "connect",
)
# The packages that make up "the user's Spark": installed first, and tidemark's install must leave them alone.
SPARK_STACK = ("pyspark", "py4j", "pandas", "pyarrow", "numpy", "protobuf")
# tidemark's dependency ranges that the lowest/highest variants move (read off the wheel's metadata).
RANGED = ("pandas", "pyarrow", "numpy", "protobuf")
# The Connect extra's packages that require a protobuf major of their own (grpcio-status 1.72+ wants protobuf 6): on a
# line that pins protobuf, pip chooses their versions under it instead of uv.lock's.
PROTOBUF_BOUND = ("grpcio-status", "googleapis-common-protos")
# What tests/conftest.py loads: pytest itself and the Kafka broker plugin's client.
TEST_TOOLS = ("pytest", "pytest-timeout", "confluent-kafka")
# The lines whose lane also runs the fault matrix's kill cells (tests/smoke/test_fault_cells.py: marked
# `reliability`, not `smoke`; docs/reliability.md). Their S3 cells need tidemark's s3 extra and moto's server, which
# only these lanes install, after the check that tidemark's own install kept the user's packages: botocore (under
# s3fs, and moto) requires python-dateutil<3, so on a stack where pandas brought dateutil 4 pip moves it to 2.9, as
# it does for any user who installs boto3 there. That one move is allowed and logged (S3_MOVES); any other fails.
FAULT_CELL_LINES = ("4.2",)
FAULT_CELL_TOOLS = ("moto[server]",)
S3_MOVES = ("python-dateutil",)
# Part of every environment's cache key: bump it when build(), wheelhouse() or the lists above change what an
# environment holds (a change of this file's comments then rebuilds nothing).
RECIPE = "5"


@dataclass(frozen=True)
class Target:
    """One smoke environment: a Spark line (or the default of uv.lock) on one Python, maybe at a range's end."""

    line: str
    python: str
    variant: str = "pinned"

    @classmethod
    def parse(cls, text: str) -> Target:
        found = re.fullmatch(r"(default|\d+\.\d+)@(\d+\.\d+)(?::(lowest|highest))?", text)
        if found is None:
            sys.exit(f"bad target {text!r}: LINE@PYTHON[:lowest|highest], e.g. 3.5@3.11 or default@3.13")
        return cls(found.group(1), found.group(2), found.group(3) or "pinned")

    @property
    def name(self) -> str:
        suffix = "" if self.variant == "pinned" else f"-{self.variant}"
        return f"{self.line}-py{self.python}{suffix}"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def uv_env() -> dict[str, str]:
    env = dict(os.environ, UV_PYTHON_DOWNLOADS="never", UV_NO_CONFIG="1")
    env.pop("VIRTUAL_ENV", None)
    return env


def run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, check=True, text=True, env=uv_env(), **kwargs)  # type: ignore[call-overload, no-any-return]


def lock_export(uv: str) -> str:
    """uv.lock as pinned requirements (runtime, every extra, the dev group), with markers, no hashes."""
    command = [uv, "export", "--frozen", "--no-hashes", "--no-header", "--no-emit-project", "--all-extras"]
    command += ["--directory", str(REPO)]
    env = uv_env()
    env.pop("UV_NO_CONFIG")  # export reads the project's pyproject.toml
    done = subprocess.run(command, check=True, text=True, capture_output=True, env=env)
    return "\n".join(line for line in done.stdout.splitlines() if line and not line.lstrip().startswith("#")) + "\n"


def requirement_name(line: str) -> str:
    return re.split(r"[=<>!~ ;\[]", line.strip(), maxsplit=1)[0].lower().replace("_", "-")


def stack_from_lock(export: str) -> str:
    return "".join(line + "\n" for line in export.splitlines() if requirement_name(line) in SPARK_STACK)


def wheel_ranges(wheel: Path) -> dict[str, str]:
    """tidemark's own Requires-Dist specifiers for the ranged packages, read from the built wheel."""
    import zipfile

    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(name).decode("utf-8")
    ranges = {}
    for line in metadata.splitlines():
        if line.startswith("Requires-Dist:") and "extra ==" not in line:
            spec = line.split(":", 1)[1].strip()
            if requirement_name(spec) in RANGED and ";" not in spec:
                ranges[requirement_name(spec)] = spec
    return ranges


def protobuf_floor(line: str) -> str | None:
    """The protobuf runtime transformWithStateInPandas' generated code needs on the line's newest release."""
    table = json.loads((REPO / "src" / "tidemark" / "spark" / "releases.json").read_text())["releases"]
    newest = max((v for v in table if v.startswith(line + ".")), key=lambda v: tuple(map(int, v.split("."))))
    gencode = table[newest].get("protobuf_gencode")
    return str(gencode) if gencode else None


def variant_requirements(uv: str, target: Target, wheel: Path) -> str:
    """The Spark stack at one end of tidemark's ranges: the line's newest pyspark, resolved by uv."""
    pins = (HERE / f"requirements-{target.line}.txt").read_text()
    pyspark = next(line for line in pins.splitlines() if requirement_name(line) == "pyspark")
    wanted = [pyspark.replace("pyspark", "pyspark[sql]", 1), *wheel_ranges(wheel).values()]
    floor = protobuf_floor(target.line)
    if floor is not None:
        wanted.append(f"protobuf>={floor}")
    with tempfile.TemporaryDirectory(prefix="tidemark-smoke-") as work:
        source = Path(work) / "in.txt"
        source.write_text("\n".join(wanted) + "\n")
        resolution = "lowest-direct" if target.variant == "lowest" else "highest"
        command = [uv, "pip", "compile", "--quiet", "--no-header", "--no-annotate", "--resolution", resolution]
        command += ["--python", find_python(target.python), str(source)]
        done = run(command, capture_output=True)
    return done.stdout


def wheelhouse(uv: str, stack: str, python: Path) -> Path:
    """A folder holding a built wheel of the stack's pyspark (pyspark is an sdist only: 300-460 MB, 1-2 min to build).

    The wheel is built once per version (or linked from uv's own cache, where uv built it before: uv may fetch and
    build the same sdist again when its HTTP cache entry goes stale) and installed from here with --find-links.
    It is built by python's pip: the new environment's (seeded), since the clone's .venv (made by uv) has none.
    """
    folder = Path(os.environ.get("TIDEMARK_ENV_CACHE", Path.home() / ".cache" / "tidemark-ci")) / "wheels"
    folder.mkdir(parents=True, exist_ok=True)
    pinned = re.search(r"^pyspark(?:\[[a-z,]+\])?==([\w.]+)", stack, re.MULTILINE)
    if pinned is None:
        return folder
    version = pinned.group(1)
    name = f"pyspark-{version}-py2.py3-none-any.whl"
    if (folder / name).exists():
        return folder
    cache = Path(os.environ.get("UV_CACHE_DIR", Path.home() / ".cache" / "uv"))
    built = sorted(cache.glob(f"sdists-v*/pypi/pyspark/{version}/*/{name}"))
    if built:
        try:
            os.link(built[0], folder / f".{name}")  # the same file, no copy
        except OSError:
            shutil.copyfile(built[0], folder / f".{name}")
    else:
        with tempfile.TemporaryDirectory(prefix="tidemark-wheel-", dir=folder) as work:
            command = [str(python), "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-cache-dir"]
            run([*command, "--no-binary", "pyspark", "--wheel-dir", work, f"pyspark=={version}"])
            shutil.move(next(Path(work).glob("pyspark-*.whl")), folder / f".{name}")
    os.replace(folder / f".{name}", folder / name)
    return folder


def freeze(python: Path) -> dict[str, str]:
    done = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
        check=True,
        text=True,
        capture_output=True,
    )
    return {item["name"].lower().replace("_", "-"): item["version"] for item in json.loads(done.stdout)}


def build_wheel(uv: str, python: str) -> Path:
    """tidemark's wheel for one Python (its optional C extension makes it version-specific), built from the clone into
    build/wheel/<python> (seconds)."""
    out = REPO / "build" / "wheel" / python
    shutil.rmtree(out, ignore_errors=True)
    env = uv_env()
    env.pop("UV_NO_CONFIG")
    command = [uv, "build", "--wheel", "--quiet", "--python", find_python(python), "--out-dir", str(out), str(REPO)]
    subprocess.run(command, check=True, env=env, text=True)
    return next(out.glob("tidemark-*.whl"))


def env_dir(target: Target, stack: str, export: str) -> Path:
    digest = hashlib.sha256()
    for part in (target.name, stack, export, RECIPE, " ".join(SPARK_STACK + TEST_TOOLS)):
        digest.update(part.encode("utf-8") + b"\0")
    root = Path(os.environ.get("TIDEMARK_ENV_CACHE", Path.home() / ".cache" / "tidemark-ci")) / "smoke"
    return root / f"{target.name}-{digest.hexdigest()[:12]}"


def _moved(before: dict[str, str], after: dict[str, str]) -> dict[str, str]:
    """The packages of `before` an install changed: name -> "old -> new" (new None: removed)."""
    return {name: f"{before[name]} -> {after.get(name)}" for name in before if after.get(name) != before[name]}


def _runs_fault_cells(target: Target) -> bool:
    return target.line in FAULT_CELL_LINES and target.variant == "pinned"


def build(target: Target, wheel: Path, uv: str) -> Path:
    """The target's environment with tidemark installed the way a user installs it; its python."""
    export = lock_export(uv)
    if target.variant != "pinned":
        stack = variant_requirements(uv, target, wheel)
    elif target.line == "default":
        stack = stack_from_lock(export)
    else:
        stack = (HERE / f"requirements-{target.line}.txt").read_text()
    folder = env_dir(target, stack, export)
    python = folder / "bin" / "python"
    if (folder / MARKER).exists():
        return python
    started = time.monotonic()
    shutil.rmtree(folder, ignore_errors=True)
    folder.parent.mkdir(parents=True, exist_ok=True)
    run([uv, "venv", "--quiet", "--seed", "--python", find_python(target.python), str(folder)])
    with tempfile.TemporaryDirectory(prefix="tidemark-smoke-") as work:
        stack_file = Path(work) / "stack.txt"
        stack_file.write_text(stack)
        # 1. The user's environment: their Spark, pandas, pyarrow, numpy (and protobuf).
        wheels = ["--find-links", str(wheelhouse(uv, stack, python))]
        run([uv, "pip", "install", "--quiet", "--python", str(python), *wheels, "-r", str(stack_file)])
        before = freeze(python)
        # 2. `pip install tidemark`, the other dependencies held at uv.lock's versions (the stack is not constrained:
        # pip must keep what is installed, and fails here when tidemark's ranges exclude it).
        constraints = Path(work) / "constraints.txt"
        held = [line for line in export.splitlines() if requirement_name(line) not in before]
        if "protobuf" in before:  # the line's own protobuf (5.x on 4.0): the gRPC packages follow it, pip picks them
            held = [line for line in held if requirement_name(line) not in PROTOBUF_BOUND]
            held.append(f"protobuf=={before['protobuf']}")
        constraints.write_text("".join(line + "\n" for line in held))
        pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-c", str(constraints)]
        # With its Azure extra, as a user on Azure installs it (`tidemark[azure]`): the abfs smoke feature; and its
        # Spark Connect extra (the connect smoke feature).
        run([*pip, f"{wheel}[azure,connect]"])
        changed = _moved(before, freeze(python))
        if changed:
            sys.exit(f"{target.name}: installing tidemark changed the user's packages: {changed}")
        # 3. The test runner, at uv.lock's versions; a lane that runs the fault cells, tidemark's S3 extra and moto.
        moved: dict[str, str] = {}
        if _runs_fault_cells(target):
            run([*pip, f"{wheel}[azure,connect,s3]", *FAULT_CELL_TOOLS])
            moved = _moved(before, freeze(python))
            if set(moved) - set(S3_MOVES):
                sys.exit(f"{target.name}: installing tidemark[s3] changed the user's packages: {moved}")
        run([uv, "pip", "install", "--quiet", "--python", str(python), "-c", str(constraints), *TEST_TOOLS])
    kept = {name: before[name] for name in SPARK_STACK if name in before}
    record = {"target": target.name, "kept": kept, "s3_moved": moved, "seconds": round(time.monotonic() - started, 1)}
    (folder / MARKER).write_text(json.dumps(record) + "\n")
    for stale in folder.parent.glob(f"{target.name}-*"):
        if stale != folder and re.fullmatch(re.escape(target.name) + r"-[0-9a-f]{12}", stale.name):
            shutil.rmtree(stale, ignore_errors=True)  # an older key of this target: its pins or lock changed
    log(f"{target.name}: built in {record['seconds']} s; tidemark's install kept {kept}")
    if moved:
        log(f"{target.name}: tidemark[s3] and moto (the fault cells) moved {moved} (botocore wants dateutil<3)")
    return python


def reinstall(python: Path, wheel: Path, uv: str) -> None:
    """This clone's tidemark into the environment, over the one installed before (no dependencies: seconds)."""
    run([uv, "pip", "install", "--quiet", "--python", str(python), "--no-deps", "--reinstall", str(wheel)])


def smoke(target: Target, python: Path, wheel: Path, uv: str, output: Path) -> int:
    """Reinstall the clone's wheel, run the smoke tests, write build/smoke/<target>.json; pytest's exit code.

    Everything the run prints goes to `output` (runs go side by side; main prints each whole when it ends).
    """
    reinstall(python, wheel, uv)
    # The range-end variants prove the ranges, not the README's table: their results go elsewhere.
    folder = RESULTS if target.variant == "pinned" else RESULTS.with_name("smoke-ranges")
    folder.mkdir(parents=True, exist_ok=True)
    results = folder / f"{target.name}.json"
    results.unlink(missing_ok=True)
    env = dict(os.environ, TIDEMARK_SMOKE_RESULTS=str(results), TIDEMARK_SMOKE_TARGET=target.name)
    # The cells of the fault matrix its tests proved (tools/reliability.py), per Spark line: the default line's come
    # from make test's own run, not from the other Pythons' lanes on it.
    if target.variant == "pinned" and target.line != "default":
        matrix = RELIABILITY / f"{target.name}.json"
        matrix.unlink(missing_ok=True)
        env["TIDEMARK_RELIABILITY_RESULTS"] = str(matrix)
    if target.line == "default":
        env["TIDEMARK_SMOKE_LEAVE_OUT"] = ",".join(JVM_ONLY)
    env.pop("VIRTUAL_ENV", None)
    with output.open("w", encoding="utf-8") as out:
        # tidemark's JVM helper, compiled against this line's jars (cached per pyspark version and source): every
        # part the line claims (tidemark.spark.lines) must compile, or the run fails here.
        helper = [str(python), "-m", "tidemark.spark.jvm"]
        done = subprocess.run(helper, cwd=REPO, env=env, check=False, stdout=out, stderr=subprocess.STDOUT)
        if done.returncode != 0:
            return done.returncode
        # Its own pytest base folder: two runs side by side never share (or clean up) each other's temp folders.
        basetemp = REPO / "build" / "smoke-tmp" / target.name
        basetemp.parent.mkdir(parents=True, exist_ok=True)  # pytest makes (and empties) the last part only
        command = [
            str(python),
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--timeout=600",
            "--durations=5",
            "-m",
            "smoke or reliability" if _runs_fault_cells(target) else "smoke",
        ]
        command += [f"--basetemp={basetemp}", "tests/smoke"]
        done = subprocess.run(command, cwd=REPO, env=env, check=False, stdout=out, stderr=subprocess.STDOUT)
        return done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["run", "env"])
    parser.add_argument("targets", nargs="*", help=f"LINE@PYTHON[:lowest|highest] (default: {' '.join(TARGETS)})")
    parser.add_argument("--jobs", type=int, default=JOBS, help=f"smoke runs side by side (default {JOBS})")
    args = parser.parse_intermixed_args()
    targets = [Target.parse(t) for t in (args.targets or TARGETS)]
    uv = find_uv()
    wheels = {python: build_wheel(uv, python) for python in sorted({t.python for t in targets})}
    failed = []
    built: list[tuple[Target, Path, float]] = []
    # The environments one by one (a build downloads and may fail loudly), then the smoke runs side by side.
    for target in targets:
        started = time.monotonic()
        wheel = wheels[target.python]
        try:
            python = build(target, wheel, uv)
        except subprocess.CalledProcessError as exc:
            # Loud, and the other targets still run: the step that failed, and the run fails at the end.
            command = " ".join(str(part) for part in exc.cmd)
            log(f"{target.name}: ENVIRONMENT NOT BUILT: `{command}` exited {exc.returncode}")
            failed.append(f"{target.name} (environment not built)")
            continue
        if args.command == "env":
            reinstall(python, wheel, uv)
            print(python)
            continue
        built.append((target, python, time.monotonic() - started))
    printing = threading.Lock()
    timings: dict[str, str] = {}

    def one(target: Target, python: Path, env_seconds: float) -> None:
        started = time.monotonic()
        LOGS.mkdir(parents=True, exist_ok=True)
        output = LOGS / f"{target.name}.log"
        code = smoke(target, python, wheels[target.python], uv, output)
        seconds = time.monotonic() - started
        timings[target.name] = f"{target.name}: env {env_seconds:.0f} s, smoke {seconds:.0f} s"
        with printing:
            log(f"== {target.name} (exit {code}, {seconds:.0f} s; {output})")
            sys.stderr.write(output.read_text(encoding="utf-8", errors="replace"))
            sys.stderr.flush()
        if code != 0:
            failed.append(target.name)

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for future in [pool.submit(one, *item) for item in built]:
            future.result()
    for target, _, _ in built:
        log(timings[target.name])
    if failed:
        sys.exit(f"smoke runs failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
