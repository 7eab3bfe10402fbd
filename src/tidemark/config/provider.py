"""The state store provider: the one Spark setting that names it, its two classes, and which kind a class is.

Spark records the provider in every offsets entry's conf and refuses a restart on another one; tidemark reads it
there (inspect, check, plan, repartition) and sets it from `[checkpoint] state_store`. Spelled here only.
"""

from __future__ import annotations

PROVIDER_KEY = "spark.sql.streaming.stateStore.providerClass"
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
