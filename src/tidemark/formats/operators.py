"""The operator metadata files of a checkpoint (`state/<op>/_metadata`), as repartition and check need them."""

from __future__ import annotations

from dataclasses import dataclass

from tidemark.errors import CheckpointError
from tidemark.formats.checkpoint import Checkpoint
from tidemark.formats.entries import OperatorFile, schema_file_name
from tidemark.formats.layout import operator_metadata_v1, operator_metadata_v2_dir, schema_folder
from tidemark.spark.lines import Feature, first_line_with


@dataclass(frozen=True)
class OperatorEntry:
    """One operator: its metadata file(s) relative to the checkpoint and what the newest one says."""

    operator_id: int
    metadata: OperatorFile
    files: tuple[str, ...]  # every metadata file of the operator (v2 keeps one per batch it was written)


def _metadata_files(checkpoint: Checkpoint, op: int, latest_batch: int) -> list[str]:
    v1 = operator_metadata_v1(op)
    files = [v1] if checkpoint.store.stat(v1) is not None else []
    folder = operator_metadata_v2_dir(op)
    listing = checkpoint.store.list_dir(folder)
    v2 = sorted(int(n) for n, _ in (listing.files if listing else []) if n.isdigit())
    files += [f"{folder}/{b}" for b in v2]
    newest_v2 = [b for b in v2 if b <= latest_batch]
    if newest_v2:  # the one Spark reads for the next batch goes last
        files.remove(f"{folder}/{newest_v2[-1]}")
        files.append(f"{folder}/{newest_v2[-1]}")
    return files


def operator_entries(checkpoint: Checkpoint) -> list[OperatorEntry]:
    """Every stateful operator with its metadata; a CheckpointError for operators Spark 4 wrote none for."""
    latest = checkpoint.latest_committed_batch()
    entries = []
    for op in checkpoint.operator_ids():
        files = _metadata_files(checkpoint, op, latest)
        if not files:
            msg = (
                f"operator {op} of {checkpoint.uri} has no state metadata (written before Spark "
                f"{first_line_with(Feature.OPERATOR_METADATA)}): run the query for one batch on Spark "
                f"{first_line_with(Feature.OPERATOR_METADATA)} or newer first, which writes it, then repartition"
            )
            raise CheckpointError(msg)
        text = checkpoint.read_text(files[-1]) or ""
        try:
            metadata = OperatorFile.parse(text)
        except (ValueError, TypeError, KeyError) as exc:
            msg = f"{checkpoint.store.uri(files[-1])} is not readable operator metadata ({exc}): it may be corrupt"
            raise CheckpointError(msg) from exc
        entries.append(OperatorEntry(op, metadata, tuple(files)))
    return entries


def schema_files(checkpoint: Checkpoint, operator_id: int, store: str, recorded: tuple[str, ...]) -> tuple[str, ...]:
    """The URIs, inside this checkpoint, of the schema files an operator's metadata records (Spark records them
    absolute, so a moved checkpoint still names the old place); a CheckpointError when one is not here."""
    folder = schema_folder(operator_id, store)
    rels = [f"{folder}/{schema_file_name(p)}" for p in recorded]
    for rel, original in zip(rels, recorded, strict=True):
        if checkpoint.store.stat(rel) is None:
            msg = f"the schema file {original} of operator {operator_id} is not in {checkpoint.uri}"
            raise CheckpointError(msg)
    return tuple(checkpoint.store.uri(rel) for rel in rels)
