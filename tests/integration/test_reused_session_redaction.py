"""A running session (a notebook's, a recovery's replay) gets cloud keys as bare session settings: Spark records
them with every SQL execution it runs meanwhile (the SQL tab, the event log's modifiedConfigs). Its core redaction
pattern is fixed at start and does not know Azure's key names; tidemark extends the SQL one, which Spark applies
there too. Checked on Spark's own record of the execution, not on tidemark's settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers import write_config
from tidemark.config import load_config
from tidemark.needs import pipeline_session
from tidemark.spark.credentials import OPTIONS_REDACTION_KEY

pytestmark = [pytest.mark.integration]

KEY = "S3CRETKEY0000abcdefghijklmnopqrstuvwxyz+/=="
DFS = "prodlake.dfs.core.windows.net"


def _last_execution_configs(spark: Any) -> str:
    """The settings Spark recorded with its newest SQL execution, as Spark's status store holds them."""
    executions = spark._jsparkSession.sharedState().statusStore().executionsList()
    newest = executions.apply(executions.size() - 1)
    return str(newest.modifiedConfigs())


def test_a_reused_session_records_no_account_key(spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_SAS_TOKEN", "AZURE_CLIENT_SECRET"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", KEY)
    root = f"abfss://lake@{DFS}/clicks"
    config = load_config(
        write_config(
            tmp_path,
            sink={"path": f"{root}/output"},
            checkpoint={"location": f"{root}/checkpoint"},
            quarantine={"path": f"{root}/quarantine"},
        )
    )
    before = spark.conf.get(OPTIONS_REDACTION_KEY)
    with pipeline_session(config, spark) as session:
        assert session is spark
        assert spark.conf.get(f"fs.azure.account.key.{DFS}") == KEY  # the key is a session setting here...
        spark.range(3).selectExpr("sum(id)").collect()
        recorded = _last_execution_configs(spark)
    assert f"fs.azure.account.key.{DFS}" in recorded  # ...Spark recorded the setting with the execution...
    assert KEY not in recorded  # ...redacted
    assert spark.conf.get(OPTIONS_REDACTION_KEY) == before  # the session's own pattern back afterwards
