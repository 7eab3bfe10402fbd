"""`tidemark jars list|fetch CONFIG`: the JVM jars a pipeline needs, from tidemark's pinned lock."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from tidemark.cli.output import download_progress, err, out, print_json

ConfigArg = Annotated[Path, typer.Argument(help="The pipeline's TOML config file.", show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]

jars_app = typer.Typer(
    name="jars",
    help="The JVM jars a pipeline needs (Kafka connector, hadoop-azure/aws), pinned with sha256.",
    no_args_is_help=True,
)


@jars_app.command("list")
def list_jars(
    config: ConfigArg,
    packages: Annotated[
        bool,
        typer.Option(
            "--packages",
            help="Print only the top-level coordinates, comma separated: for spark-submit --packages, "
            "spark.jars.packages or a Databricks cluster library.",
        ),
    ] = False,
    json_output: JsonOpt = False,
) -> None:
    """What the config needs for the installed Spark: coordinates, sha256, and whether each jar is cached."""
    from tidemark.config import load_config
    from tidemark.needs import jar_features
    from tidemark.spark.inventory import jar_inventory

    inventory = jar_inventory(jar_features(load_config(config)))
    if packages:
        out.print(",".join(inventory.packages), soft_wrap=True)
        return
    if json_output:
        print_json(inventory)
        return
    if not inventory.features:
        out.print(f"Spark {inventory.spark_version}: this pipeline needs no jars beyond the pyspark wheel's")
        return
    table = Table(title=f"jars for Spark {inventory.spark_version}: {', '.join(inventory.features)}")
    for column in ("feature", "coordinate", "bytes", "sha256", "status"):
        table.add_column(column, justify="right" if column == "bytes" else "left")
    for jar in inventory.jars:
        table.add_row(jar.feature, escape(jar.coordinate), f"{jar.size:,}", jar.sha256[:12], jar.status)
    out.print(table)
    out.print(f"--packages {','.join(inventory.packages)}", soft_wrap=True)
    for note in inventory.served_by:
        out.print(f"[yellow]note:[/yellow] {escape(note)}")
    if not inventory.locked:
        out.print("[yellow]not in tidemark's lock: `tidemark jars fetch` refuses them (docs/kafka.md, Jars)[/yellow]")


@jars_app.command("fetch")
def fetch_jars(config: ConfigArg, json_output: JsonOpt = False) -> None:
    """Download (or copy from ~/.m2) and verify every jar the config needs, so runs work offline afterwards."""
    from tidemark.config import load_config
    from tidemark.needs import jar_features
    from tidemark.spark.jars import fetch, jars_dir

    features = jar_features(load_config(config))
    fetched = fetch(features, progress=None if json_output else download_progress())
    if json_output:
        print_json(fetched)
        return
    for note in fetched.served_by:
        err.print(f"[yellow]note:[/yellow] {escape(note)}")
    err.print(
        f"{len(fetched.paths)} jar(s) for {', '.join(f.value for f in fetched.features) or 'nothing'} on Spark "
        f"{fetched.spark_version} verified in {escape(str(jars_dir()))} ({fetched.downloaded:,} bytes downloaded)"
    )


def register(app: typer.Typer) -> None:
    """Attach the jars commands to the root app."""
    app.add_typer(jars_app, name="jars")
