"""The credentials tidemark's own I/O takes, mapped to the Hadoop settings Spark itself needs (issue 27).

Expected keys are hadoop-azure's and hadoop-aws's own (read off Hadoop 3.4.2's ConfigurationKeys,
AzureNativeFileSystemStore and s3a.Constants); the integration tests show Spark writing with them.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from tidemark.config import load_config
from tidemark.errors import EnvironmentProblem
from tidemark.needs import pipeline_conf
from tidemark.session import runtime_key
from tidemark.spark.artifacts import check_scheme
from tidemark.spark.credentials import (
    AZURE_REDACTION,
    OPTIONS_REDACTION_KEY,
    SPARK_DEFAULT_REDACTION,
    hadoop_access,
    redaction_regex,
)

KEY = "S3CRETKEY0000abcdefghijklmnopqrstuvwxyz+/=="  # never to appear anywhere but in the settings
SAS = "sv=2024-01-01&sig=S3CRETSIGNATURE%3D"
CLIENT_SECRET = "S3CRET-client-secret"
ACCOUNT = "prodlake"
BLOB = f"{ACCOUNT}.blob.core.windows.net"
DFS = f"{ACCOUNT}.dfs.core.windows.net"
EMULATOR = "devstoreaccount1.blob.core.windows.net"
SECRETS = (KEY, SAS, "S3CRETSIGNATURE", CLIENT_SECRET, "S3CRET-aws", "S3CRET-session")


def emulator_connection(port: int = 10000) -> str:
    return (
        f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={KEY};"
        f"BlobEndpoint=http://127.0.0.1:{port}/devstoreaccount1;"
    )


def no_secret(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text


def test_wasb_on_the_emulator_port_is_hadoops_emulator_mode_and_needs_no_key() -> None:
    access = hadoop_access(
        [f"wasbs://ckpt@{EMULATOR}/job"], environ={"AZURE_STORAGE_CONNECTION_STRING": emulator_connection()}
    )
    assert access.settings == {"fs.azure.storage.emulator.account.name": EMULATOR}
    assert access.sources == (f"wasbs://ckpt@{EMULATOR}: storage emulator (AZURE_STORAGE_CONNECTION_STRING)",)


def test_wasb_on_an_emulator_elsewhere_is_one_line_pointing_at_the_port_and_at_abfs() -> None:
    env = {"AZURE_STORAGE_CONNECTION_STRING": emulator_connection(47000)}
    with pytest.raises(EnvironmentProblem) as caught:
        hadoop_access([f"wasbs://ckpt@{EMULATOR}/job"], environ=env)
    text = str(caught.value)
    assert "http://127.0.0.1:10000/devstoreaccount1" in text and "127.0.0.1:47000" in text
    assert "abfs://ckpt@devstoreaccount1.dfs.core.windows.net/job" in text and "\n" not in text
    no_secret(text)


def test_abfs_on_an_emulator_goes_over_the_blob_endpoint_with_the_key() -> None:
    fqdn = "devstoreaccount1.dfs.core.windows.net"
    env = {"AZURE_STORAGE_CONNECTION_STRING": emulator_connection(47000)}
    access = hadoop_access([f"abfs://ckpt@{fqdn}/job"], environ=env)
    assert access.settings == {
        f"fs.azure.abfs.endpoint.{fqdn}": "127.0.0.1:47000",
        f"fs.azure.fns.account.service.type.{fqdn}": "BLOB",
        f"fs.azure.account.hns.enabled.{fqdn}": "false",
        "fs.azure.metrics.collection.enabled": "false",
        "fs.azure.always.use.https": "false",
        "fs.azure.networking.library": "JDK_HTTP_URL_CONNECTION",
        f"fs.azure.account.key.{fqdn}": KEY,
        f"fs.azure.account.auth.type.{fqdn}": "SharedKey",
    }
    with pytest.raises(EnvironmentProblem, match="abfs://ckpt@"):
        hadoop_access([f"abfss://ckpt@{fqdn}/job"], environ=env)


@pytest.mark.parametrize(
    "env",
    [
        {"AZURE_STORAGE_ACCOUNT_KEY": KEY},
        {"AZURE_STORAGE_CONNECTION_STRING": f"DefaultEndpointsProtocol=https;AccountName={ACCOUNT};AccountKey={KEY};"},
    ],
)
def test_an_account_key_serves_wasb_and_abfs(env: dict[str, str]) -> None:
    access = hadoop_access([f"wasbs://a@{BLOB}/x", f"abfss://b@{DFS}/y"], environ=env)
    assert access.settings == {
        f"fs.azure.account.key.{BLOB}": KEY,
        f"fs.azure.account.key.{DFS}": KEY,
        f"fs.azure.account.auth.type.{DFS}": "SharedKey",
    }
    no_secret(repr(access), *access.sources)
    assert all("account key" in line for line in access.sources)


def test_a_sas_token_is_per_container_for_wasb_and_fixed_for_abfs() -> None:
    access = hadoop_access(
        [f"wasbs://a@{BLOB}/x", f"abfss://b@{DFS}/y"], environ={"AZURE_STORAGE_SAS_TOKEN": "?" + SAS}
    )
    assert access.settings == {
        f"fs.azure.sas.a.{BLOB}": SAS,
        f"fs.azure.account.auth.type.{DFS}": "SAS",
        f"fs.azure.sas.fixed.token.{DFS}": SAS,
    }
    no_secret(repr(access), *access.sources)


def test_a_service_principal_becomes_hadoops_client_credentials_provider() -> None:
    env = {"AZURE_CLIENT_ID": "app-id", "AZURE_TENANT_ID": "tenant-id", "AZURE_CLIENT_SECRET": CLIENT_SECRET}
    access = hadoop_access([f"abfss://b@{DFS}/y"], environ=env)
    assert access.settings == {
        f"fs.azure.account.auth.type.{DFS}": "OAuth",
        f"fs.azure.account.oauth.provider.type.{DFS}": "org.apache.hadoop.fs.azurebfs.oauth2.ClientCredsTokenProvider",
        f"fs.azure.account.oauth2.client.endpoint.{DFS}": "https://login.microsoftonline.com/tenant-id/oauth2/token",
        f"fs.azure.account.oauth2.client.id.{DFS}": "app-id",
        f"fs.azure.account.oauth2.client.secret.{DFS}": CLIENT_SECRET,
    }
    no_secret(repr(access), *access.sources)
    sovereign = hadoop_access(
        [f"abfss://b@{DFS}/y"], environ={**env, "AZURE_AUTHORITY_HOST": "https://login.chinacloudapi.cn"}
    )
    assert sovereign.settings[f"fs.azure.account.oauth2.client.endpoint.{DFS}"] == (
        "https://login.chinacloudapi.cn/tenant-id/oauth2/token"
    )


def test_workload_identity_and_managed_identity() -> None:
    workload = {"AZURE_CLIENT_ID": "app", "AZURE_TENANT_ID": "t", "AZURE_FEDERATED_TOKEN_FILE": "/var/run/token"}
    access = hadoop_access([f"abfss://b@{DFS}/y"], environ=workload)
    assert access.settings[f"fs.azure.account.oauth.provider.type.{DFS}"].endswith("WorkloadIdentityTokenProvider")
    assert access.settings[f"fs.azure.account.oauth2.token.file.{DFS}"] == "/var/run/token"
    assert access.settings[f"fs.azure.account.oauth2.msi.tenant.{DFS}"] == "t"
    system = hadoop_access([f"abfss://b@{DFS}/y"], environ={})
    assert system.settings == {
        f"fs.azure.account.auth.type.{DFS}": "OAuth",
        f"fs.azure.account.oauth.provider.type.{DFS}": "org.apache.hadoop.fs.azurebfs.oauth2.MsiTokenProvider",
    }
    user_assigned = hadoop_access([f"abfss://b@{DFS}/y"], environ={"AZURE_CLIENT_ID": "mi-client"})
    assert user_assigned.settings[f"fs.azure.account.oauth2.client.id.{DFS}"] == "mi-client"


def test_wasb_without_a_key_or_token_gets_nothing_and_says_why() -> None:
    access = hadoop_access([f"wasbs://a@{BLOB}/x"], environ={"AZURE_CLIENT_ID": "a", "AZURE_TENANT_ID": "t"})
    assert access.settings == {}
    assert "only an account key or a SAS token" in access.sources[0]


def test_an_account_the_user_configured_gets_nothing_from_tidemark() -> None:
    mine = {f"spark.hadoop.fs.azure.account.key.{BLOB}": "theirs"}
    env = {"AZURE_STORAGE_ACCOUNT_KEY": KEY}
    access = hadoop_access([f"wasbs://a@{BLOB}/x", f"abfss://b@{DFS}/y"], mine, env)
    assert access.settings == {f"fs.azure.account.key.{DFS}": KEY, f"fs.azure.account.auth.type.{DFS}": "SharedKey"}
    assert f"wasbs://a@{BLOB}: configured in the Spark settings" in access.sources
    # a global auth type set by the user covers every ABFS account
    assert hadoop_access([f"abfss://b@{DFS}/y"], {"fs.azure.account.auth.type": "Custom"}, env).settings == {}


def test_s3_from_the_aws_variables_against_an_emulator() -> None:
    env = {
        "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
        "AWS_SECRET_ACCESS_KEY": "S3CRET-aws",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:5123",
    }
    access = hadoop_access(["s3a://lake/ck", "s3a://lake/out", "s3a://other/x"], environ=env)
    assert access.settings == {
        "fs.s3a.endpoint": "http://127.0.0.1:5123",
        "fs.s3a.connection.ssl.enabled": "false",
        "fs.s3a.path.style.access": "true",
        "fs.s3a.endpoint.region": "us-east-1",
        "fs.s3a.access.key": "AKIDEXAMPLE",
        "fs.s3a.secret.key": "S3CRET-aws",
    }
    assert access.sources == (
        "s3a://lake: access key (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)",
        "s3a://other: access key (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)",
    )
    no_secret(repr(access), *access.sources)


def test_s3_session_credentials_profile_and_role() -> None:
    session = hadoop_access(
        ["s3a://lake/ck"],
        environ={
            "AWS_ACCESS_KEY_ID": "A",
            "AWS_SECRET_ACCESS_KEY": "S3CRET-aws",
            "AWS_SESSION_TOKEN": "S3CRET-session",
        },
    )
    assert session.settings["fs.s3a.session.token"] == "S3CRET-session"
    assert (
        session.settings["fs.s3a.aws.credentials.provider"]
        == "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
    )
    profile = hadoop_access(["s3a://lake/ck"], environ={"AWS_PROFILE": "prod", "AWS_REGION": "eu-west-1"})
    assert profile.settings == {
        "fs.s3a.aws.credentials.provider": "software.amazon.awssdk.auth.credentials.ProfileCredentialsProvider",
        "fs.s3a.endpoint.region": "eu-west-1",
    }
    assert hadoop_access(["s3a://lake/ck"], environ={}).settings == {}
    real_aws = hadoop_access(["s3a://lake/ck"], environ={"AWS_ENDPOINT_URL_S3": "https://s3.eu-west-1.amazonaws.com"})
    assert "fs.s3a.path.style.access" not in real_aws.settings
    assert real_aws.settings["fs.s3a.connection.ssl.enabled"] == "true"


def test_s3_credentials_the_user_gave_win_key_by_key() -> None:
    env = {"AWS_ACCESS_KEY_ID": "A", "AWS_SECRET_ACCESS_KEY": "S3CRET-aws", "AWS_ENDPOINT_URL": "http://127.0.0.1:1"}
    mine = {"spark.hadoop.fs.s3a.aws.credentials.provider": "my.Provider", "spark.hadoop.fs.s3a.endpoint": "http://x"}
    access = hadoop_access(["s3a://lake/ck"], mine, env)
    assert access.settings == {"fs.s3a.connection.ssl.enabled": "false", "fs.s3a.path.style.access": "true"}


def test_local_and_other_schemes_need_nothing() -> None:
    assert hadoop_access(["/tmp/x", None, "gs://b/x", "hdfs://nn/x"], environ={}).settings == {}


def test_spark_redacts_the_azure_keys_it_would_otherwise_show() -> None:
    pattern = redaction_regex({})
    assert pattern == f"{SPARK_DEFAULT_REDACTION}|{AZURE_REDACTION}"
    compiled = re.compile(pattern)
    for key in (
        f"spark.hadoop.fs.azure.account.key.{BLOB}",
        f"spark.hadoop.fs.azure.sas.a.{BLOB}",
        "fs.s3a.secret.key",
    ):
        assert compiled.search(key)
    assert redaction_regex({"spark.redaction.regex": "mine"}) == f"mine|{AZURE_REDACTION}"
    # The SQL options pattern (settable on a running session) gets the same names after Spark's default for it.
    assert redaction_regex({}, OPTIONS_REDACTION_KEY) == f"(?i)url|{AZURE_REDACTION}"
    own = {OPTIONS_REDACTION_KEY: "(?i)url|dsn"}
    assert redaction_regex(own, OPTIONS_REDACTION_KEY) == f"(?i)url|dsn|{AZURE_REDACTION}"


def test_pipeline_settings_carry_the_access_and_the_users_own_keys_win(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for name in ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGE_ACCOUNT_NAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", KEY)
    root = f"abfss://lake@{DFS}/clicks"
    (tmp_path / "tidemark.toml").write_text(
        f"""
[pipeline]
name = "clicks"
[spark]
master = "local[2]"
[spark.conf]
"spark.hadoop.fs.azure.account.auth.type.{DFS}" = "SharedKey"
"spark.hadoop.fs.azure.account.key.{DFS}" = "theirs"
[source]
format = "json"
path = "landing"
schema = "user STRING, ts STRING"
[event_time]
column = "ts"
watermark = "1 minute"
[aggregation]
key = ["user"]
window = "1 minute"
[sink]
path = "{root}/output"
[checkpoint]
location = "{root}/checkpoint"
[quarantine]
path = "{root}/quarantine"
""",
        encoding="utf-8",
    )
    config = load_config(tmp_path / "tidemark.toml")
    with caplog.at_level(logging.DEBUG, logger="tidemark"):
        conf = pipeline_conf(config)
    assert conf[f"spark.hadoop.fs.azure.account.key.{DFS}"] == "theirs"
    assert conf["spark.redaction.regex"] == f"{SPARK_DEFAULT_REDACTION}|{AZURE_REDACTION}"
    assert conf[OPTIONS_REDACTION_KEY] == f"(?i)url|{AZURE_REDACTION}"
    assert KEY not in conf.values()
    no_secret(caplog.text)


def test_a_running_session_takes_hadoop_settings_under_their_bare_keys() -> None:
    assert runtime_key("spark.hadoop.fs.s3a.endpoint") == "fs.s3a.endpoint"
    assert runtime_key("spark.sql.shuffle.partitions") == "spark.sql.shuffle.partitions"


@pytest.mark.parametrize("version", ["4.2.1", "4.3.0"])
def test_wasbs_on_a_spark_whose_hadoop_has_no_wasb_is_one_line_pointing_at_abfss(version: str) -> None:
    with pytest.raises(EnvironmentProblem) as caught:
        check_scheme(f"wasbs://lake@{BLOB}/jobs/ck", version)
    text = str(caught.value)
    assert f"abfss://lake@{DFS}/jobs/ck" in text and "removed after Spark 4.1" in text and "\n" not in text
    for fine in ("3.5.9", "4.0.5", "4.1.1"):
        check_scheme(f"wasbs://lake@{BLOB}/jobs/ck", fine)
    check_scheme(f"abfss://lake@{DFS}/jobs/ck", version)


def test_run_with_a_wasbs_checkpoint_on_spark_4_2_exits_1_with_that_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.helpers import write_config
    from tidemark.cli.main import main

    monkeypatch.setattr("tidemark.spark.lines.installed_version", lambda: "4.2.1")
    monkeypatch.setenv("AZURE_STORAGE_ACCOUNT_KEY", KEY)
    (tmp_path / "landing").mkdir()
    root = f"wasbs://lake@{BLOB}/clicks"
    config = write_config(
        tmp_path,
        source={"path": str(tmp_path / "landing")},
        sink={"path": f"{root}/output"},
        checkpoint={"location": f"{root}/checkpoint"},
    )
    assert main(["run", str(config)]) == 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-1].startswith("error:") and f"abfss://lake@{DFS}/clicks/" in lines[-1]
    assert "Traceback" not in err
    no_secret(err)


def test_spark_failures_from_storage_credentials_become_one_line() -> None:
    from tidemark.spark.credentials import explain_storage_failure

    # hadoop-azure's own messages (AzureNativeFileSystemStore.NO_ACCESS_TO_CONTAINER_MSG, Hadoop 3.5's WASB stub)
    no_key = (
        "org.apache.hadoop.fs.azure.AzureException: org.apache.hadoop.fs.azure.AzureException: No credentials found "
        f"for account {BLOB} in the configuration, and its container lake is not accessible using anonymous "
        "credentials. Please check if the container exists first."
    )
    line = explain_storage_failure(no_key)
    assert line is not None and f"storage account {BLOB}" in line and "AZURE_STORAGE_ACCOUNT_KEY" in line
    gone = "java.lang.UnsupportedOperationException: WASB Driver using wasb(s) schema is no longer supported. Instead"
    assert "abfss://" in (explain_storage_failure(gone) or "")
    msi = "AADToken: HTTP connection to http://169.254.169.254/metadata/identity/oauth2/token failed"
    assert "managed identity" in (explain_storage_failure(msi) or "")
    assert explain_storage_failure("[DIVIDE_BY_ZERO] Division by zero.") is None


def test_what_the_bundled_hadoop_lacks_is_said_not_mapped() -> None:
    fqdn = "devstoreaccount1.dfs.core.windows.net"
    emulator = {"AZURE_STORAGE_CONNECTION_STRING": emulator_connection(47000)}
    with pytest.raises(EnvironmentProblem, match=r"needs Spark 4\.1 or newer"):
        hadoop_access([f"abfs://ckpt@{fqdn}/job"], environ=emulator, spark_version="4.0.5")
    workload = {"AZURE_CLIENT_ID": "app", "AZURE_TENANT_ID": "t", "AZURE_FEDERATED_TOKEN_FILE": "/var/run/token"}
    old = hadoop_access([f"abfss://b@{DFS}/y"], environ=workload, spark_version="3.5.9")
    assert old.settings == {} and "workload identity" in old.sources[0] and "Spark 4.0 or newer" in old.sources[0]


def test_jars_packages_cover_the_cloud_connectors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.helpers import write_config
    from tidemark.cli.main import main

    config = write_config(
        tmp_path,
        source={"path": "s3a://lake/landing"},
        sink={"path": f"abfss://lake@{DFS}/out"},
        checkpoint={"location": f"abfss://lake@{DFS}/ck"},
    )
    assert main(["jars", "list", str(config), "--packages"]) == 0
    printed = capsys.readouterr().out.replace("\n", "")
    assert "org.apache.hadoop:hadoop-azure:3.4.2" in printed and "org.apache.hadoop:hadoop-aws:3.4.2" in printed


def test_accounts_a_running_session_already_has_credentials_for_are_left_alone() -> None:
    from tidemark.spark.credentials import auth_keys

    uris = [f"abfss://lake@{DFS}/ck", "s3a://bucket/out"]
    keys = auth_keys(uris)
    assert f"fs.azure.account.key.{DFS}" in keys and f"fs.azure.account.auth.type.{DFS}" in keys
    assert "fs.s3a.access.key" in keys and "fs.s3a.bucket.bucket.aws.credentials.provider" in keys
    # e.g. a Databricks cluster whose Spark config holds the account key: no managed identity guessed over it
    access = hadoop_access(uris, environ={}, configured=[f"fs.azure.account.key.{DFS}"])
    assert access.settings == {} and "configured in the Spark settings" in access.sources[0]
