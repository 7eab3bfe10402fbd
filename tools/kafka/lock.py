"""The Kafka broker's jars pinned by sha256, as tidemark's own Spark jars are (src/tidemark/spark/jars.lock.json).

`make kafka` resolves tools/kafka/pom.xml with Maven into ~/.m2 and writes the classpath to classpath.txt; then

    python3 tools/kafka/lock.py verify [CLASSPATH]   # every jar of the classpath is in broker.lock.json, same sha256
    python3 tools/kafka/lock.py write     # (after changing pom.xml) write broker.lock.json from the classpath

`verify` exits 1 with one line naming the first jar that is not the locked one (another version, other bytes, a jar
the lock does not know or a locked jar the classpath lacks): a jar Maven hands over is never trusted on first use.
tests/kafka_broker.py runs the same check before it starts a broker. Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CLASSPATH = HERE / "classpath.txt"
LOCK = HERE / "broker.lock.json"


def coordinate(jar: Path) -> str:
    """group:artifact:version of a jar in a Maven repository layout (…/repository/<group path>/<a>/<v>/<a>-<v>.jar)."""
    parts = jar.parts
    root = len(parts) - 1 - parts[::-1].index("repository")
    *group, artifact, version, _ = parts[root + 1 :]
    return f"{'.'.join(group)}:{artifact}:{version}"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def classpath_jars(classpath: Path = CLASSPATH) -> list[Path]:
    """The jars of the broker's classpath, as Maven wrote it."""
    if not classpath.exists():
        msg = f"{classpath} is missing: run `make kafka`"
        raise SystemExit(msg)
    return [Path(p) for p in classpath.read_text(encoding="utf-8").strip().split(os.pathsep) if p]


def problems(jars: list[Path], lock: dict[str, dict[str, object]]) -> list[str]:
    """Every difference between the classpath's jars and the lock, one line each."""
    found = []
    seen = set()
    for jar in jars:
        name = coordinate(jar)
        seen.add(name)
        pinned = lock.get(name)
        if pinned is None:
            found.append(f"{name} ({jar}) is not in {LOCK.name}")
        elif not jar.exists():
            found.append(f"{jar} is gone: run `make kafka`")
        elif jar.stat().st_size != pinned["size"] or _sha256(jar) != pinned["sha256"]:
            found.append(f"{jar} is not the locked {name} (sha256 or size differ): not used")
    found += [f"{name} is locked but not on the classpath" for name in sorted(set(lock) - seen)]
    return found


def main() -> None:
    command = sys.argv[1] if len(sys.argv) > 1 else "verify"
    jars = classpath_jars(Path(sys.argv[2]) if len(sys.argv) > 2 else CLASSPATH)
    if command == "write":
        body = {coordinate(j): {"sha256": _sha256(j), "size": j.stat().st_size} for j in sorted(jars)}
        LOCK.write_text(json.dumps(dict(sorted(body.items())), indent=1) + "\n", encoding="utf-8")
        print(f"wrote {LOCK}: {len(body)} jars")
        return
    if command != "verify":
        msg = f"usage: {sys.argv[0]} verify|write"
        raise SystemExit(msg)
    found = problems(jars, json.loads(LOCK.read_text(encoding="utf-8")))
    if found:
        raise SystemExit(
            f"the Kafka broker's jars do not match {LOCK}: {found[0]}"
            + (f" (and {len(found) - 1} more)" if len(found) > 1 else "")
        )
    print(f"{len(jars)} Kafka broker jars match {LOCK.name}")


if __name__ == "__main__":
    main()
