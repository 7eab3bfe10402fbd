"""The HTML report: self-contained, escaped, and rendered by a real headless Chromium."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import zlib
from pathlib import Path
from typing import Any

import pytest

from tidemark.cli.main import main
from tidemark.monitor.report import render_report, write_report

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "progress"
EVIL = '<script>alert("x")</script>'
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, "Debian's chromium is needed to render the report (make chromium / apt-get install chromium)"
    return found


def evil_log(folder: Path) -> Path:
    """A run whose query and operator names try to inject markup."""
    progress: dict[str, Any] = json.loads(
        next(line for line in (FIXTURES / "windowed_hdfs.jsonl").read_text().splitlines() if '"progress"' in line)
    )["progress"]
    progress["name"] = EVIL
    progress["stateOperators"][0]["operatorName"] = '<img src=x onerror="alert(1)">'
    lines = [
        {"type": "started", "time": "2026-01-01T00:00:00.000Z", "run_id": "<b>run</b>", "name": EVIL},
        {"type": "progress", "time": "2026-01-01T00:00:01.000Z", "run_id": "<b>run</b>", "progress": progress},
        {
            "type": "stuck",
            "time": "2026-01-01T00:09:00.000Z",
            "run_id": "<b>run</b>",
            "batch_id": 1,
            "message": "batch 1 </pre><script>x()</script>",
        },
    ]
    target = folder / "evil.jsonl"
    target.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return target


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("report")
    logs = folder / "logs"
    logs.mkdir()
    for name in ("windowed_hdfs.jsonl", "growing_rocksdb.jsonl"):
        shutil.copy(FIXTURES / name, logs / name)
    evil_log(logs)
    result = write_report(logs, folder / "report.html")
    assert result.runs == 3
    return Path(result.path)


def run_chromium(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    profile = folder / "profile"
    return subprocess.run(
        [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_report_is_self_contained_and_escapes_data(report: Path) -> None:
    html = report.read_text()
    assert "<script" not in html.lower()
    assert "://" not in html  # no external URL of any kind
    assert "onerror=" not in html.replace("onerror=&quot;", "")
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    assert "&lt;b&gt;run&lt;/b&gt;" in html
    assert html.count("<svg") >= 6 * 2  # two fixture runs with the six charts (no watermark chart in one)


@pytest.mark.slow
def test_report_renders_in_headless_chromium(report: Path) -> None:
    dom = run_chromium(report.parent, "--dump-dom", f"file://{report}")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert dom.stdout.count("<polyline") >= 10
    assert dom.stdout.count('class="bar"') >= 13 * 3  # every batch's bar has at least three phases
    assert "<script>alert" not in dom.stdout  # the data stayed text after parsing
    assert "&lt;script&gt;alert" in dom.stdout

    shot = report.parent / "shot.png"
    # Half device scale: the same 1200x2000 layout in a quarter of the pixels, so the pure-Python decode stays quick.
    done = run_chromium(
        report.parent,
        "--force-device-scale-factor=0.5",
        f"--screenshot={shot}",
        "--window-size=1200,2000",
        f"file://{report}",
    )
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    width, height, pixels = decode_png(shot.read_bytes())
    assert (width, height) == (600, 1000)
    # Chart strokes and bars are saturated colours; text, tables and background are grey: count colour.
    colored = sum(1 for r, g, b in pixels if max(r, g, b) - min(r, g, b) > 80)
    assert colored / len(pixels) > 0.01, f"only {colored} coloured pixels: the charts did not render"


def test_cli_report_writes_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "out" / "r.html"
    assert main(["report", str(FIXTURES / "growing_rocksdb.jsonl"), "-o", str(target)]) == 0
    assert "wrote" in capsys.readouterr().out
    assert target.read_text() == render_report(FIXTURES / "growing_rocksdb.jsonl")


def decode_png(data: bytes) -> tuple[int, int, list[tuple[int, int, int]]]:
    """Decode an 8-bit RGB/RGBA, non-interlaced PNG (what Chromium writes) into RGB pixels."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and interlace == 0 and color in (2, 6)
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    previous = bytearray(stride)
    pixels: list[tuple[int, int, int]] = []
    for row in range(height):
        start = row * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            corner = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xFF
        pixels.extend((line[i], line[i + 1], line[i + 2]) for i in range(0, stride, channels))
        previous = line
    return width, height, pixels
