"""The credentials tidemark's own I/O takes, as the Hadoop settings Spark itself needs for the same locations.

One set of credentials serves both: storage/credentials.py resolves them from the environment (same order, same
variables), and this module writes the matching `fs.azure.*` / `fs.s3a.*` keys of hadoop-azure and hadoop-aws
(read off their code for Hadoop 3.4.2: AzureNativeFileSystemStore, AbfsConfiguration, s3a.Constants). Settings
the user gives explicitly win: a storage account or S3 whose credentials the user configured gets none from
tidemark, and any single key the user set is left as it is. Values never reach a log, a repr or an error.

What Hadoop has no provider for is tidemark-only (docs/storage.md): WASB takes only an account key or a SAS
token (no Azure AD at all); ABFS takes a key, a SAS token, a service principal (client secret), workload
identity and the VM's managed identity (IMDS), but not `az login`, Visual Studio Code, Azure PowerShell,
azd, a client certificate or the App Service identity endpoint that DefaultAzureCredential also tries.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from tidemark.errors import EnvironmentProblem
from tidemark.secrets import remember
from tidemark.session import HADOOP_PREFIX, runtime_key
from tidemark.spark.lines import Feature, lacking
from tidemark.storage.credentials import (
    ACCOUNT_KEY,
    CONNECTION_STRING,
    SAS_TOKEN,
    AzureAccess,
    azure_access,
    parse_connection_string,
)
from tidemark.storage.uri import Location, StoreKind, parse_location

REDACTION_KEY = "spark.redaction.regex"
# Spark's default redaction pattern hides "secret", "password", "token" and "access.key" in the UI, the event
# log and the environment page, but not an Azure account key or a WASB SAS key: those are added.
SPARK_DEFAULT_REDACTION = r"(?i)secret|password|token|access[.]?key"
AZURE_REDACTION = r"fs\.azure\.account\.key|fs\.azure\.sas\."
# spark.redaction.regex is fixed when the SparkContext starts: a running session (a notebook, a recovery's replay)
# cannot extend it. The SQL options pattern can be set at any time, and Spark applies both to the settings a SQL
# execution records (the SQL tab, the event log's modifiedConfigs), where a session's bare Hadoop keys show.
OPTIONS_REDACTION_KEY = "spark.sql.redaction.options.regex"
SPARK_DEFAULT_OPTIONS_REDACTION = "(?i)url"
WASB_SCHEMES = frozenset({"wasb", "wasbs"})
ABFS_SCHEMES = frozenset({"abfs", "abfss"})
# hadoop-azure's emulator mode (fs.azure.storage.emulator.account.name) always connects to the development
# storage account of the Azure Storage SDK it uses: this endpoint, this account, the well-known key.
WASB_EMULATOR_ENDPOINT = "http://127.0.0.1:10000/devstoreaccount1"
WASB_EMULATOR_HOSTS = frozenset({"127.0.0.1:10000", "localhost:10000"})
AAD_AUTHORITY = "https://login.microsoftonline.com/"
CLIENT_CREDS_PROVIDER = "org.apache.hadoop.fs.azurebfs.oauth2.ClientCredsTokenProvider"
WORKLOAD_IDENTITY_PROVIDER = "org.apache.hadoop.fs.azurebfs.oauth2.WorkloadIdentityTokenProvider"
MSI_PROVIDER = "org.apache.hadoop.fs.azurebfs.oauth2.MsiTokenProvider"
TEMPORARY_AWS_PROVIDER = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
PROFILE_AWS_PROVIDER = "software.amazon.awssdk.auth.credentials.ProfileCredentialsProvider"
# The keys that say "these are the credentials for this account/bucket": one of them set by the user means
# tidemark maps no credentials there at all (a half-mapped mix of two auth methods would be worse than none).
_AZURE_AUTH_KEYS = (
    "fs.azure.account.key.",
    "fs.azure.account.keyprovider.",
    "fs.azure.account.auth.type",
    "fs.azure.account.oauth.provider.type",
    "fs.azure.sas.",
    "fs.azure.storage.emulator.account.name",
)
_AZURE_GLOBAL_AUTH_KEYS = frozenset(
    {"fs.azure.account.auth.type", "fs.azure.account.oauth.provider.type", "fs.azure.storage.emulator.account.name"}
)
# Parts of a Hadoop key whose value is a secret (masked in tidemark's messages as soon as it is read).
_SECRET_KEY_PARTS = ("account.key.", ".sas.", "client.secret", "secret.key", "session.token")
_S3_AUTH_KEYS = frozenset({"access.key", "secret.key", "session.token", "aws.credentials.provider"})


@dataclass(frozen=True)
class HadoopAccess:
    """Hadoop settings for some locations (keys without the spark.hadoop. prefix) and what each came from."""

    settings: dict[str, str] = field(repr=False)
    # One line per location, naming the method and the variables it came from; never a value.
    sources: tuple[str, ...] = ()

    def spark_conf(self) -> dict[str, str]:
        """As Spark settings for a new session (spark.hadoop.<key>)."""
        return {HADOOP_PREFIX + key: value for key, value in self.settings.items()}


def _account_configured(fqdn: str, explicit: set[str]) -> bool:
    return any(
        key.startswith(_AZURE_AUTH_KEYS) and (key.endswith("." + fqdn) or key in _AZURE_GLOBAL_AUTH_KEYS)
        for key in explicit
    )


def _s3_configured(bucket: str, explicit: set[str]) -> bool:
    for key in explicit:
        if not key.startswith("fs.s3a."):
            continue
        rest = key[len("fs.s3a.") :]
        prefix = f"bucket.{bucket}."
        if rest in _S3_AUTH_KEYS or (rest.startswith(prefix) and rest[len(prefix) :] in _S3_AUTH_KEYS):
            return True
    return False


def _path_style_endpoint(endpoint: str, account: str) -> bool:
    """True for an emulator's endpoint: the account in the path (http://host:port/<account>), not the host."""
    return urlsplit(endpoint).path.strip("/") == account


def _wasb_emulator(location: Location, fqdn: str, endpoint: str, spark_version: str | None) -> dict[str, str]:
    parts = urlsplit(endpoint)
    if parts.scheme != "http" or parts.netloc not in WASB_EMULATOR_HOSTS or location.account != "devstoreaccount1":
        msg = (
            f"{location.uri}: Spark's WASB driver reaches a storage emulator only at {WASB_EMULATOR_ENDPOINT} "
            f"(hadoop-azure's emulator mode), but {CONNECTION_STRING} points at {endpoint}: serve the emulator "
            f"there, or use abfs://{location.bucket}@{location.account}.dfs.core.windows.net/{location.key} "
            "(ABFS reaches an emulator on any port)"
        )
        raise EnvironmentProblem(msg)
    return {"fs.azure.storage.emulator.account.name": fqdn}


def _abfs_emulator(location: Location, fqdn: str, endpoint: str, spark_version: str | None) -> dict[str, str]:
    problem = lacking(Feature.ABFS_OVER_BLOB, spark_version)
    if problem is not None:
        msg = f"{location.uri}: the storage emulator at {endpoint} serves only the Blob API, and {problem}"
        raise EnvironmentProblem(msg)
    parts = urlsplit(endpoint)
    if parts.scheme == "http" and location.scheme == "abfss":
        msg = (
            f"{location.uri}: the storage emulator at {endpoint} speaks plain http, which abfss:// never uses: "
            f"write abfs://{location.bucket}@{fqdn}/{location.key} for it"
        )
        raise EnvironmentProblem(msg)
    settings = {
        # ABFS's own override for an emulator or a test endpoint: http[s]://host:port/<account>/<container>.
        f"fs.azure.abfs.endpoint.{fqdn}": parts.netloc,
        # An emulator serves the Blob API only (no DFS endpoint): ABFS over the Blob endpoint (HADOOP-19226),
        # for an account without a hierarchical namespace.
        f"fs.azure.fns.account.service.type.{fqdn}": "BLOB",
        f"fs.azure.account.hns.enabled.{fqdn}": "false",
        # Hadoop 3.5's ABFS sends its client metrics to the account when the JVM exits (a shutdown hook), retrying
        # for minutes where the call fails: an emulator does not serve it, so the JVM outlived its command
        # (found on Spark 4.2/4.3 by the abfs smoke test). Nothing to send to an emulator.
        "fs.azure.metrics.collection.enabled": "false",
    }
    if parts.scheme == "http":
        settings["fs.azure.always.use.https"] = "false"
        # Hadoop 3.5's default client (Apache HttpClient) fails on plain http ("SSL socket factory may not be
        # null"); the JDK's, 3.4's default, does not.
        settings["fs.azure.networking.library"] = "JDK_HTTP_URL_CONNECTION"
    return settings


def _azure_oauth(fqdn: str, env: Mapping[str, str], spark_version: str | None) -> tuple[dict[str, str], str]:
    """ABFS's OAuth settings for the links of DefaultAzureCredential's chain Hadoop has a provider for."""
    client, tenant = env.get("AZURE_CLIENT_ID"), env.get("AZURE_TENANT_ID")
    authority = env.get("AZURE_AUTHORITY_HOST", AAD_AUTHORITY).rstrip("/") + "/"
    settings = {f"fs.azure.account.auth.type.{fqdn}": "OAuth"}
    if client and tenant and env.get("AZURE_CLIENT_SECRET"):
        settings.update(
            {
                f"fs.azure.account.oauth.provider.type.{fqdn}": CLIENT_CREDS_PROVIDER,
                f"fs.azure.account.oauth2.client.endpoint.{fqdn}": f"{authority}{tenant}/oauth2/token",
                f"fs.azure.account.oauth2.client.id.{fqdn}": client,
                f"fs.azure.account.oauth2.client.secret.{fqdn}": env["AZURE_CLIENT_SECRET"],
            }
        )
        return settings, "service principal (AZURE_CLIENT_ID, AZURE_TENANT_ID, AZURE_CLIENT_SECRET)"
    if client and tenant and env.get("AZURE_FEDERATED_TOKEN_FILE"):
        problem = lacking(Feature.ABFS_WORKLOAD_IDENTITY, spark_version)
        if problem is not None:
            return {}, f"none: workload identity is set, but {problem}"
        settings.update(
            {
                f"fs.azure.account.oauth.provider.type.{fqdn}": WORKLOAD_IDENTITY_PROVIDER,
                f"fs.azure.account.oauth2.msi.authority.{fqdn}": authority,
                f"fs.azure.account.oauth2.msi.tenant.{fqdn}": tenant,
                f"fs.azure.account.oauth2.client.id.{fqdn}": client,
                f"fs.azure.account.oauth2.token.file.{fqdn}": env["AZURE_FEDERATED_TOKEN_FILE"],
            }
        )
        return settings, "workload identity (AZURE_CLIENT_ID, AZURE_TENANT_ID, AZURE_FEDERATED_TOKEN_FILE)"
    settings[f"fs.azure.account.oauth.provider.type.{fqdn}"] = MSI_PROVIDER
    if client:  # a user-assigned identity, as DefaultAzureCredential's ManagedIdentityCredential takes it
        settings[f"fs.azure.account.oauth2.client.id.{fqdn}"] = client
    if tenant:
        settings[f"fs.azure.account.oauth2.msi.tenant.{fqdn}"] = tenant
    return settings, "managed identity (the VM's metadata endpoint" + (", AZURE_CLIENT_ID)" if client else ")")


def _azure(
    location: Location, fqdn: str, env: Mapping[str, str], spark_version: str | None
) -> tuple[dict[str, str], str]:
    access: AzureAccess = azure_access(location, dict(env))
    wasb = location.scheme in WASB_SCHEMES
    settings: dict[str, str] = {}
    key, sas = access.account_key, access.sas_token
    origin = {"account-key": ACCOUNT_KEY, "sas-token": SAS_TOKEN}.get(access.method, "")
    if access.connection_string is not None:
        parts = parse_connection_string(access.connection_string)
        key, sas, origin = parts.get("AccountKey"), parts.get("SharedAccessSignature"), CONNECTION_STRING
        if _path_style_endpoint(access.blob_endpoint, access.account):
            emulator = _wasb_emulator if wasb else _abfs_emulator
            settings.update(emulator(location, fqdn, access.blob_endpoint, spark_version))
            if wasb:  # emulator mode signs with the development account's own key: nothing more to give
                return settings, f"storage emulator ({CONNECTION_STRING})"
    if key:
        settings[f"fs.azure.account.key.{fqdn}"] = key
        if not wasb:
            settings[f"fs.azure.account.auth.type.{fqdn}"] = "SharedKey"
        return settings, f"account key ({origin})"
    if sas:
        token = sas.lstrip("?")
        if wasb:
            settings[f"fs.azure.sas.{location.bucket}.{fqdn}"] = token
        else:
            settings[f"fs.azure.account.auth.type.{fqdn}"] = "SAS"
            settings[f"fs.azure.sas.fixed.token.{fqdn}"] = token
        return settings, f"SAS token ({origin})"
    if wasb:
        # WASB has no Azure AD sign-in at all: Spark gets nothing from tidemark and Hadoop's own configuration
        # (core-site.xml) decides; without one, Spark's error is turned into a line naming what to set.
        return settings, "none for WASB (it takes only an account key or a SAS token)"
    oauth, described = _azure_oauth(fqdn, env, spark_version)
    settings.update(oauth)
    return settings, described


def _s3(location: Location, env: Mapping[str, str], configured: bool) -> tuple[dict[str, str], str]:
    settings: dict[str, str] = {}
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if endpoint:
        parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        settings["fs.s3a.endpoint"] = endpoint
        settings["fs.s3a.connection.ssl.enabled"] = "true" if parts.scheme == "https" else "false"
        if not (parts.hostname or "").endswith(".amazonaws.com"):
            settings["fs.s3a.path.style.access"] = "true"  # MinIO, moto, Ceph: buckets in the path
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if region:
        settings["fs.s3a.endpoint.region"] = region
    if configured:
        return settings, "configured in the Spark settings"
    key_id, secret = env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY")
    if key_id and secret:
        settings["fs.s3a.access.key"] = key_id
        settings["fs.s3a.secret.key"] = secret
        if env.get("AWS_SESSION_TOKEN"):
            settings["fs.s3a.session.token"] = env["AWS_SESSION_TOKEN"]
            settings["fs.s3a.aws.credentials.provider"] = TEMPORARY_AWS_PROVIDER
            return settings, "session credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN)"
        return settings, "access key (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)"
    if env.get("AWS_PROFILE"):
        settings["fs.s3a.aws.credentials.provider"] = PROFILE_AWS_PROVIDER
        return settings, "profile (AWS_PROFILE; read on the driver's machine)"
    # S3A's own default chain: environment variables, then the instance or container role.
    return settings, "S3A's default chain (instance or container role)"


def hadoop_access(
    uris: Iterable[str | None],
    explicit: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
    spark_version: str | None = None,
    configured: Iterable[str] = (),
) -> HadoopAccess:
    """The Hadoop settings Spark needs for these locations, from the environment; explicit keys are kept out.

    explicit: the Spark settings the user gave ([spark.conf]); keys in spark.hadoop.<key> or bare form.
    spark_version: the Spark whose Hadoop reads them (default: the installed one).
    configured: Hadoop keys already set where Spark reads them (a running session's), treated as explicit.
    """
    env = os.environ if environ is None else environ
    given = {runtime_key(key) for key in (explicit or {})} | set(configured)
    settings: dict[str, str] = {}
    sources: list[str] = []
    done: set[tuple[str, str]] = set()
    for uri in uris:
        if not uri or "://" not in uri:
            continue
        location = parse_location(uri)
        if location.kind is StoreKind.AZURE and location.scheme in WASB_SCHEMES | ABFS_SCHEMES:
            fqdn = _fqdn(location)
            scope = (location.scheme.rstrip("s"), f"{location.bucket}@{fqdn}")
            if scope in done:
                continue
            done.add(scope)
            if _account_configured(fqdn, given):
                sources.append(f"{location.root_uri}: configured in the Spark settings")
                continue
            found, described = _azure(location, fqdn, env, spark_version)
        elif location.kind is StoreKind.S3 and location.scheme == "s3a":
            scope = ("s3a", location.bucket)
            if scope in done:
                continue
            done.add(scope)
            found, described = _s3(location, env, _s3_configured(location.bucket, given))
        else:
            continue
        settings.update(found)
        sources.append(f"{location.root_uri}: {described}")
    # Every secret value Spark is given is masked in tidemark's own messages too (Hadoop's errors may quote one).
    remember(*(v for k, v in settings.items() if any(part in k for part in _SECRET_KEY_PARTS)))
    return HadoopAccess({k: v for k, v in settings.items() if k not in given}, tuple(sources))


def _fqdn(location: Location) -> str:
    return location.uri.split("://", 1)[1].split("/", 1)[0].split("@", 1)[1].lower()


def auth_keys(uris: Iterable[str | None]) -> list[str]:
    """The Hadoop keys whose presence means someone configured these locations' credentials already."""
    keys: list[str] = []
    for uri in uris:
        if not uri or "://" not in uri:
            continue
        location = parse_location(uri)
        if location.kind is StoreKind.AZURE and location.scheme in WASB_SCHEMES | ABFS_SCHEMES:
            fqdn = _fqdn(location)
            keys += [f"{prefix}{fqdn}" for prefix in _AZURE_AUTH_KEYS if prefix.endswith(".")]
            keys += [f"fs.azure.sas.{location.bucket}.{fqdn}", f"fs.azure.sas.fixed.token.{fqdn}"]
            keys += [f"{key}.{fqdn}" for key in _AZURE_GLOBAL_AUTH_KEYS] + sorted(_AZURE_GLOBAL_AUTH_KEYS)
        elif location.kind is StoreKind.S3 and location.scheme == "s3a":
            keys += [f"fs.s3a.{key}" for key in sorted(_S3_AUTH_KEYS)]
            keys += [f"fs.s3a.bucket.{location.bucket}.{key}" for key in sorted(_S3_AUTH_KEYS)]
    return list(dict.fromkeys(keys))


def redaction_regex(explicit: Mapping[str, str], key: str = REDACTION_KEY) -> str:
    """Spark's redaction pattern (key: spark.redaction.regex or the SQL options one) with the Azure key names added
    (a user's own pattern is kept, and extended)."""
    default = SPARK_DEFAULT_OPTIONS_REDACTION if key == OPTIONS_REDACTION_KEY else SPARK_DEFAULT_REDACTION
    own = explicit.get(key, default)
    return own if AZURE_REDACTION in own else f"{own}|{AZURE_REDACTION}"


def redaction_conf(explicit: Mapping[str, str]) -> dict[str, str]:
    """Both redaction patterns, extended: the core one for a new session, the SQL one for a running session too."""
    return {key: redaction_regex(explicit, key) for key in (REDACTION_KEY, OPTIONS_REDACTION_KEY)}


# Hadoop's own words for "no or wrong credentials", and the one line tidemark says instead (first match wins).
_STORAGE_FAILURES: tuple[tuple[str, str], ...] = (
    (
        r"WASB Driver using wasb\(s\) schema is no longer supported",
        "this Spark's Hadoop has no WASB driver: write abfss://<container>@<account>.dfs.core.windows.net/... instead",
    ),
    (
        r"No credentials found for account (\S+) in the configuration",
        "Spark's WASB driver has no key or SAS token for storage account {0}: set "
        f"{ACCOUNT_KEY}, {SAS_TOKEN} or {CONNECTION_STRING} (WASB takes no Azure AD sign-in), or use abfss://",
    ),
    (
        r"169\.254\.169\.254|MsiTokenProvider",
        "Spark could not get a token from the machine's managed identity: where there is none, set "
        f"{ACCOUNT_KEY}, {SAS_TOKEN} or AZURE_CLIENT_ID/AZURE_TENANT_ID/AZURE_CLIENT_SECRET "
        "(az login and the other developer sign-ins are tidemark-only: Hadoop has no provider for them)",
    ),
    (
        r"Server failed to authenticate the request|AuthenticationFailed|AuthorizationPermissionMismatch",
        f"Azure refused Spark's credentials (HTTP 403): correct {ACCOUNT_KEY}, {SAS_TOKEN} or "
        f"{CONNECTION_STRING}, or the identity's role on the container",
    ),
    (
        r"NoAuthWithAWSException|No AWS Credentials provided|Unable to load AWS credentials",
        "Spark found no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)",
    ),
    (
        r"AccessDenied|403 Forbidden|Status Code: 403",
        "S3 refused Spark's access (HTTP 403): check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY and the bucket policy",
    ),
    (
        r"No FileSystem for scheme \"?(\w+)",
        "Spark has no file system for {0}://: tidemark adds hadoop-azure and hadoop-aws itself unless "
        "[spark.conf] sets spark.jars.packages (then add them there)",
    ),
)


def explain_storage_failure(text: str) -> str | None:
    """One line for a Spark failure that comes from storage credentials or connectors, or None."""
    for pattern, message in _STORAGE_FAILURES:
        found = re.search(pattern, text)
        if found is not None:
            return message.format(*found.groups())
    return None
