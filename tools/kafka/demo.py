"""`make kafka-demo`: Kafka (and Event Hubs' Kafka endpoint) tried from the docs alone, on this machine.

Starts the same single-node broker the tests use (Apache Kafka's own jars, pinned by tools/kafka/pom.xml: a PLAINTEXT
listener and a SASL_PLAINTEXT one set up as Event Hubs' Kafka endpoint, user `$ConnectionString` and a fake
connection string as password), creates the topic `clicks` (4 partitions), produces demo events (JSON, keyed by
user, some late, some malformed), writes two ready configs into the folder and keeps producing a few events a
second until Ctrl-C, which stops the broker by its pid:

    make kafka-demo                                  # folder demo-kafka/, then in a second terminal:
    .venv/bin/tidemark run demo-kafka/kafka.toml                       # plain Kafka, runs until Ctrl-C
    TIDEMARK_DEMO_CONNECTION="$(cat demo-kafka/connection-string)" \\
        .venv/bin/tidemark run demo-kafka/eventhubs.toml               # the same topic as an event hub

Needs the project's venv (`make install`: confluent-kafka) and the broker's classpath (`make kafka`).
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the tests' broker and event maker are what the demo runs

from tests.kafka_broker import start_broker  # noqa: E402
from tests.kafka_data import make_events, produce  # noqa: E402

from tidemark.compat import UTC  # noqa: E402

TOPIC = "clicks"
ENV = "TIDEMARK_DEMO_CONNECTION"
COMMON = """
[event_time]
column = "ts"
watermark = "10 minutes"

[aggregation]
kind = "window"
key = ["user"]
window = "15 minutes"
extra = [{{ function = "sum", column = "value", name = "value_sum" }}]

[sink]
format = "parquet"
path = "{name}-output"

[checkpoint]
location = "{name}-checkpoint"

[quarantine]
path = "{name}-quarantine"

[trigger]
interval = "5 seconds"
"""


def write_configs(folder: Path, bootstrap: str, sasl_bootstrap: str, namespace: str) -> tuple[Path, Path]:
    """The demo's two configs: the topic over PLAINTEXT, and the same topic as an event hub over SASL."""
    kafka = folder / "kafka.toml"
    kafka.write_text(
        f'[pipeline]\nname = "kafka-demo"\n\n[source]\nformat = "kafka"\nbootstrap_servers = "{bootstrap}"\n'
        f'topic = "{TOPIC}"\nschema = "event_id BIGINT, user STRING, ts STRING, value DOUBLE"\n'
        'starting_offsets = "earliest"\nmax_offsets_per_trigger = 500\n' + COMMON.format(name="kafka"),
        encoding="utf-8",
    )
    hubs = folder / "eventhubs.toml"
    hubs.write_text(
        f'[pipeline]\nname = "eventhubs-demo"\n\n[source]\nformat = "eventhubs"\nnamespace = "{namespace}"\n'
        f'event_hub = "{TOPIC}"\nconnection_string_env = "{ENV}"\n'
        f"# The emulator's endpoint; a real namespace needs neither line (<namespace>.servicebus.windows.net:9093)\n"
        f'bootstrap_servers = "{sasl_bootstrap}"\nsecurity_protocol = "SASL_PLAINTEXT"\n'
        'schema = "event_id BIGINT, user STRING, ts STRING, value DOUBLE"\nstarting_offsets = "earliest"\n'
        + COMMON.format(name="eventhubs"),
        encoding="utf-8",
    )
    return kafka, hubs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", default="demo-kafka", type=Path)
    parser.add_argument("--events", type=int, default=2000, help="events produced at the start")
    parser.add_argument("--per-second", type=float, default=5.0, help="events a second afterwards (0: none)")
    parser.add_argument("--seconds", type=float, default=0, help="stop after this long (0: at Ctrl-C)")
    args = parser.parse_args()
    folder: Path = args.folder.resolve()
    if folder.exists():
        shutil.rmtree(folder)  # a demo folder of an earlier run: its broker's ports and data are gone
    folder.mkdir(parents=True)
    stop = {"now": False}

    def on_signal(signum: int, frame: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    broker = start_broker(folder / "broker")
    try:
        namespace = re.search(r"sb://([^.]+)\.", broker.connection_string)
        assert namespace is not None
        broker.create_topic(TOPIC, partitions=4)
        start = datetime.now(tz=UTC) - timedelta(hours=2)
        first = make_events(args.events, seed=1, start=start, late_fraction=0.02, malformed_fraction=0.02)
        produce(broker, TOPIC, first)
        kafka, hubs = write_configs(folder, broker.bootstrap, broker.sasl_bootstrap, namespace.group(1))
        secret = folder / "connection-string"
        secret.write_text(broker.connection_string, encoding="utf-8")
        secret.chmod(0o600)
        tidemark = ROOT / ".venv" / "bin" / "tidemark"
        listeners = f"{broker.bootstrap} (PLAINTEXT) and {broker.sasl_bootstrap} (SASL, as Event Hubs)"
        print(f"broker on {listeners}, pid {broker.pid}")
        print(f"topic {TOPIC}: {len(first)} records produced; {args.per_second:g} a second from now on")
        print(f"next, in another terminal: {tidemark} run {kafka}")
        print(f'  or as an event hub:      {ENV}="$(cat {secret})" {tidemark} run {hubs}')
        print("Ctrl-C here stops the broker", flush=True)
        produced, began, n = len(first), time.monotonic(), 0
        while not stop["now"] and (args.seconds <= 0 or time.monotonic() - began < args.seconds):
            if args.per_second > 0:
                now = datetime.now(tz=UTC)
                batch = make_events(1, seed=1000 + n, start=now, span=timedelta(seconds=1), first_id=produced)
                produce(broker, TOPIC, batch)
                produced += len(batch)
                n += 1
                time.sleep(1 / args.per_second)
            else:
                time.sleep(0.2)
        print(f"stopping the broker ({produced} records in {TOPIC})", flush=True)
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
