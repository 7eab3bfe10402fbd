"""What the state tools need to know of a checkpoint's folders, asked of the checkpoint package (no Spark)."""

from __future__ import annotations

from dataclasses import dataclass

from tidemark.formats import Checkpoint, FileKind


@dataclass(frozen=True)
class OperatorFolder:
    """What the file system says about one state/<op> folder."""

    operator_id: int
    partitions: tuple[int, ...]
    stores: tuple[str, ...]
    has_operator_metadata: bool
    has_changelog: bool
    disk_bytes: int
    store_bytes: dict[str, int]  # each store's own files, every partition (checksum files left out)


def operator_folders(checkpoint: Checkpoint) -> list[OperatorFolder]:
    """Every state/<op> folder with its partitions, named stores and size on disk (checksum files left out)."""
    found = []
    for op_id, op in sorted(checkpoint.scan().operators.items()):
        has_metadata = checkpoint.operator_metadata(op_id) is not None
        size = op.bytes - op.kinds[FileKind.CRC][1]
        if not has_metadata and size == 0:
            # Spark's statestore reader leaves empty state/<op>/<part>/_metadata folders behind when asked
            # for an operator that does not exist: not an operator.
            continue
        keys = sorted(op.stores)
        store_bytes: dict[str, int] = {}
        for (_, name), store in op.stores.items():
            store_bytes[name] = store_bytes.get(name, 0) + store.bytes - store.crc_bytes
        found.append(
            OperatorFolder(
                operator_id=op_id,
                partitions=tuple(sorted({partition for partition, _ in keys})),
                stores=tuple(sorted({name for _, name in keys})) or ("default",),
                has_operator_metadata=has_metadata,
                has_changelog=op.kinds[FileKind.CHANGELOG][0] > 0,
                disk_bytes=size,
                store_bytes=store_bytes,
            )
        )
    return found
