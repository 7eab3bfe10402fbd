"""The HTML report: self-contained, escaped, and rendered by a real headless Chromium."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.progress_logs import duration_ms, write_long_log
from tidemark.cli.main import main
from tidemark.monitor.report import render_report, write_report
from tidemark.monitor.report.svg import PLOT_HEIGHT, PLOT_WIDTH

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
    assert "Slowest batches" not in html  # short runs: the charts show every batch


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
    image = decode_png(shot.read_bytes()).astype(int)
    assert image.shape == (1000, 600, 3)
    # Chart strokes and bars are saturated colours; text, tables and background are grey: count colour.
    colored = float(((image.max(axis=2) - image.min(axis=2)) > 80).mean())
    assert colored > 0.01, f"only {colored:.2%} coloured pixels: the charts did not render"


def test_cli_report_writes_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "out" / "r.html"
    assert main(["report", str(FIXTURES / "growing_rocksdb.jsonl"), "-o", str(target)]) == 0
    assert "wrote" in capsys.readouterr().out
    assert target.read_text() == render_report(FIXTURES / "growing_rocksdb.jsonl")


SPIKE_BATCHES = 300_000
SPIKE_AT = 123_457


@pytest.mark.slow
def test_one_spike_among_300000_batches_shows_in_the_rendered_report(tmp_path: Path) -> None:
    log = write_long_log(tmp_path / "long.jsonl", SPIKE_BATCHES, spike_batch=SPIKE_AT, spike_factor=10)
    assert log.spike_duration_ms == 10 * duration_ms(SPIKE_AT) > 8 * log.normal_max_duration_ms
    result = write_report(log.path, tmp_path / "report.html")
    log.path.unlink()  # a quarter of a gigabyte
    assert result.batches == SPIKE_BATCHES
    assert result.size_bytes <= 3_000_000  # bounded by the charts' width, not by the batch count
    html = Path(result.path).read_text()
    assert "<circle" not in html and 'class="envelope"' in html
    # The slowest-batches table names the spike first.
    assert "<h3>Slowest batches</h3>" in html and html.index(f"<td>{SPIKE_AT}</td>") < html.index("<td>17</td>")

    shot = tmp_path / "shot.png"
    done = run_chromium(tmp_path, f"--screenshot={shot}", "--window-size=600,1400", f"file://{result.path}")
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    image = decode_png(shot.read_bytes()).astype(int)
    # The first chart is the batch duration; its plot area is the first run of rows of #fafafa background.
    background = (image == 250).all(axis=2)
    top = int(np.flatnonzero(background.sum(axis=1) > PLOT_WIDTH // 2)[0])
    left = int(np.flatnonzero(background[top + PLOT_HEIGHT // 4])[0])
    plot = image[top : top + PLOT_HEIGHT - 2, left : left + PLOT_WIDTH - 2]
    dark = plot.max(axis=2) < 200  # the shade (black at 35%) and the phase areas; not background or grid lines
    upper, lower = dark[: PLOT_HEIGHT // 2], dark[-PLOT_HEIGHT // 10 :]
    # Every batch but one is under 2.1 s, at most an eighth of the height: the bottom band is drawn all along...
    assert lower.any(axis=0).mean() > 0.95
    # ...while above half the height only the spike's column has anything, and it reaches near the top.
    columns = np.flatnonzero(upper.any(axis=0))
    expected = PLOT_WIDTH * (SPIKE_AT + 0.5) / SPIKE_BATCHES - 1  # the plot's left border is at x = -1 here
    assert len(columns) > 0, "the spike is not drawn"
    assert abs(columns.min() - expected) <= 3 and abs(columns.max() - expected) <= 3, (columns, expected)
    assert len(columns) <= 3
    peak = int(np.flatnonzero(dark[:, columns].any(axis=1))[0])
    assert peak < PLOT_HEIGHT * 0.1, f"the spike's column reaches only row {peak} of {PLOT_HEIGHT}"


def decode_png(data: bytes) -> np.ndarray:
    """Decode an 8-bit RGB/RGBA, non-interlaced PNG (what Chromium writes) into a (height, width, 3) array.

    Rows filtered with None, Sub or Up are undone with numpy; Average and Paeth, which depend on the pixel to
    the left once decoded, byte by byte.
    """
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
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(height, width * channels + 1)
    image = np.zeros((height, width * channels), dtype=np.uint8)
    previous = np.zeros(width * channels, dtype=np.uint8)
    for row in range(height):
        kind, line = raw[row, 0], raw[row, 1:]
        if kind == 0:
            decoded = line.copy()
        elif kind == 1:  # each byte plus the decoded byte one pixel left: a running sum per channel, mod 256
            decoded = np.cumsum(line.reshape(width, channels), axis=0, dtype=np.uint8).reshape(-1)
        elif kind == 2:
            decoded = line + previous
        else:
            decoded = bytearray(line.tobytes())
            up = previous.tobytes()
            for i in range(len(decoded)):
                left = decoded[i - channels] if i >= channels else 0
                corner = up[i - channels] if i >= channels else 0
                if kind == 3:
                    decoded[i] = (decoded[i] + (left + up[i]) // 2) & 0xFF
                else:
                    p = left + up[i] - corner
                    pa, pb, pc = abs(p - left), abs(p - up[i]), abs(p - corner)
                    predictor = left if pa <= pb and pa <= pc else up[i] if pb <= pc else corner
                    decoded[i] = (decoded[i] + predictor) & 0xFF
            decoded = np.frombuffer(bytes(decoded), dtype=np.uint8)
        image[row] = decoded
        previous = image[row]
    return image.reshape(height, width, channels)[:, :, :3]
