"""A class-data-sharing (AppCDS) archive of the classes a Spark driver JVM loads, for the tests' JVM starts.

The suite starts a few hundred driver JVMs of their own (each kill is one; the smoke runs' commands) and each spends
seconds loading and verifying Spark's classes. JDK 17 can write the classes one run loaded to an archive at its exit
(`-XX:ArchiveClassesAtExit`) and map them in later runs (`-XX:SharedArchiveFile`): a `tidemark run` of the demo,
a fresh process timed whole, takes 0.73x the time here (BENCHMARKS.md, "JVM starts from a class archive"). The
archive changes no result: the same classes, read from a mapped file instead of the jars.

It belongs to one JVM build and one class path (the Spark installation's jars, by absolute path), so it is cached
outside the clone, keyed by both: ~/.cache/tidemark-ci/cds/<key>.jsa (TIDEMARK_ENV_CACHE moves the root, as for the
smoke environments; the KEPT used last stay). A JVM whose class path or build differs from the archive's would
silently start without any shared classes, even the JDK's own default archive, so the key covers every jar's name,
size and mtime and the JVM library's. The first test run of an installation writes it (one `tidemark run` of
`tidemark init`'s demo, ~50 s); a dump that fails leaves no file and the tests run as before, saying so in one line.
The archive is used only through SPARK_SUBMIT_OPTS, which Spark's launcher hands to the driver JVM alone, never
JAVA_TOOL_OPTIONS (every `java`, and its banner on stderr).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.helpers import wait_gone

# The JVM says nothing about the archive (a mismatch, a dump): no test reads a line it did not expect.
QUIET = "-Xlog:cds=off,cds+dynamic=off"
# Archives kept in the cache: one per smoke lane (7) and the clones' default environments.
KEPT = 12


def root() -> Path:
    return Path(os.environ.get("TIDEMARK_ENV_CACHE", Path.home() / ".cache" / "tidemark-ci")) / "cds"


def _spark_home() -> Path:
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home()).resolve()  # type: ignore[no-untyped-call]


def _java() -> Path:
    from tidemark.session import check_java

    return Path(check_java()).resolve()


def key() -> str:
    """What decides whether an archive fits: the JVM build, the Spark installation's path and its jars."""
    java = _java()
    home = _spark_home()
    digest = hashlib.sha256()
    digest.update(f"{java}\0{home}\0".encode())
    for library in sorted(java.parent.parent.glob("lib/server/libjvm.so")):
        stat = library.stat()
        digest.update(f"{library}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    for jar in sorted((home / "jars").glob("*.jar")):
        stat = jar.stat()
        digest.update(f"{jar.name}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    return digest.hexdigest()[:16]


def archive() -> Path | None:
    """This installation's archive, if one was written."""
    path = root() / f"{key()}.jsa"
    return path if path.is_file() else None


def submit_options(path: Path) -> str:
    """The driver JVM options that map the archive."""
    return f"-XX:SharedArchiveFile={path} {QUIET}"


def _dump(target: Path, work: Path) -> str | None:
    """Write the archive to `target` from one demo run; None, or why it was not written."""
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_SUBMIT_OPTS": f"-XX:ArchiveClassesAtExit={target} {QUIET}",
    }
    cli = [sys.executable, "-m", "tidemark.cli.main"]
    demo = work / "demo"
    steps = [[*cli, "init", str(demo)], [*cli, "run", str(demo / "tidemark.toml"), "--available-now"]]
    for step in steps:
        with (work / "log.txt").open("ab") as log:
            driver = subprocess.Popen(step, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                code = driver.wait(timeout=300)
            except subprocess.TimeoutExpired:
                os.killpg(driver.pid, 9)
                return f"`{' '.join(step[2:])}` ran over 300 s"
        if not wait_gone(driver.pid, 120, group=True):  # the JVM writes the archive at its exit, after its Python
            os.killpg(driver.pid, 9)
            return "the JVM did not exit within 120 s of its Python"
        if code != 0:
            tail = (work / "log.txt").read_text(errors="replace").strip().splitlines()[-1:]
            return f"`{' '.join(step[2:4])}` exited {code}: {' '.join(tail)}"
    if not target.is_file():
        return "the JVM wrote no archive"
    # Mapped by a JVM that must use it (-Xshare:on fails when it does not fit): Spark's own launcher, its class path.
    submit = _spark_home() / "bin" / "spark-submit"
    check_env = {**env, "SPARK_SUBMIT_OPTS": f"-XX:SharedArchiveFile={target} -Xshare:on {QUIET}"}
    done = subprocess.run([str(submit), "--version"], env=check_env, capture_output=True, check=False, timeout=120)
    if done.returncode != 0:
        return f"the archive does not map (-Xshare:on exited {done.returncode})"
    return None


def _prune(folder: Path) -> None:
    """The KEPT archives used last stay; older ones go (a clone elsewhere, a rebuilt lane: ~170 MB each)."""
    archives = sorted(folder.glob("*.jsa"), key=lambda path: path.stat().st_mtime, reverse=True)
    for stale in archives[KEPT:]:
        stale.unlink(missing_ok=True)


def ensure() -> Path | None:
    """This installation's archive, written first if there is none; None (and one line on stderr) if it cannot be."""
    from tidemark.errors import EnvironmentProblem

    try:
        final = root() / f"{key()}.jsa"
    except (EnvironmentProblem, ImportError, OSError) as exc:  # no Java, no Spark: the tests that need one say so
        print(f"no JVM class archive: {exc}", file=sys.stderr)
        return None
    if final.is_file():
        os.utime(final)  # in use: the newest are kept (_prune)
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    partial = final.with_name(f"{final.stem}.{os.getpid()}.partial")
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="tidemark-cds-") as work:
            why = _dump(partial, Path(work))
        if why is None:
            os.replace(partial, final)  # whole or not at all: a run that sees the name maps a complete archive
            _prune(final.parent)
            print(f"JVM class archive written in {time.monotonic() - started:.0f} s: {final}", file=sys.stderr)
            return final
    except (OSError, subprocess.SubprocessError) as exc:
        why = f"{type(exc).__name__}: {exc}"
    finally:
        partial.unlink(missing_ok=True)
    print(f"no JVM class archive (the tests' JVMs start without one): {why}", file=sys.stderr)
    return None
