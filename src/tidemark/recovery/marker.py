"""The repair of a recovered pipeline's new sink log, driven by the checkpoint's recovery marker.

After a recovery the new query's sink log starts at batch 0 and does not know the files that
survived from before the resume point. Once the replay has committed a batch, those files are
added to the log (into the file Spark's readers start from), so Spark readers see them again.
The marker keeps the resume point too: every later run of this checkpoint keeps the same replay
filter, so a restart never rewrites a window the sink already holds.
"""

from __future__ import annotations

from dataclasses import replace

from tidemark.formats import (
    inject_sink_entries,
    read_recovery_marker,
    read_sink_log,
    write_recovery_marker,
)
from tidemark.storage import Location, open_storage, parse_location


def finish_pending(checkpoint: Location, sink: Location) -> int | None:
    """Repair the new sink log if the marker says it is pending and a batch has committed; None if not yet."""
    marker = read_recovery_marker(checkpoint)
    if marker is None or marker.injected:
        return None
    store = open_storage(sink)
    if read_sink_log(store).latest_batch is None:
        return None
    added = inject_sink_entries(store, marker.entries, parse_location(marker.archive))
    write_recovery_marker(checkpoint, replace(marker, injected=True))
    return added
