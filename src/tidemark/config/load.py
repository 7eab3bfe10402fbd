"""Read a TOML config file, resolve its relative paths, and turn validation errors into one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tidemark.compat import tomllib
from tidemark.config.model import TidemarkConfig
from tidemark.errors import ConfigError

# (table, key) pairs holding paths that are resolved against the config file's folder.
_PATH_KEYS = (
    ("source", "path"),
    ("sink", "path"),
    ("checkpoint", "location"),
    ("quarantine", "path"),
    ("monitor", "dir"),
)


# Keys a user reaches for to put a secret in the TOML, and where the secret goes instead (it never goes in the file).
_SECRET_KEYS = {
    "connection_string": (
        "a connection string never goes in the TOML: name the environment variable that holds it with "
        "connection_string_env, or a file with connection_string_file"
    ),
}
_OPTIONS_HINT = (
    "a secret never goes in the TOML: name the environment variable that holds it with options_from_env = "
    '{ "kafka.sasl.jaas.config" = "KAFKA_JAAS" }, or a file with options_from_file (docs/kafka.md)'
)
_SECRET_KEYS.update(dict.fromkeys(("password", "sasl_jaas_config", "jaas_config"), _OPTIONS_HINT))


def _describe(error: ValidationError, origin: str) -> str:
    first = error.errors()[0]
    key = ".".join(str(part) for part in first["loc"])
    if first["type"] == "extra_forbidden":
        secret = _SECRET_KEYS.get(str(first["loc"][-1]))
        if secret is not None:
            return f"{origin}: unknown key '{key}': {secret}"
        return f"{origin}: unknown key '{key}' (check its spelling; see the README for the keys of each table)"
    if first["type"] == "missing":
        return f"{origin}: missing key '{key}'"
    message = first["msg"].removeprefix("Value error, ")
    where = f"'{key}'" if key else "config"
    return f"{origin}: bad value for {where}: {message}"


def _is_uri(value: str) -> bool:
    """True for a URI, `file:/x` (the form Spark and Hadoop print paths in) as well as `scheme://...`; a one-letter
    scheme is a Windows drive letter."""
    scheme, colon, _ = value.partition(":")
    word = scheme.replace("+", "").replace("-", "").replace(".", "")
    return bool(colon) and len(scheme) > 1 and scheme[0].isalpha() and word.isalnum()


# (table, sub-table, key): paths one table deeper (an Iceberg catalog's warehouse).
_NESTED_PATH_KEYS = (("sink", "catalog", "warehouse"),)


def _resolve(section: Any, key: str, base: Path) -> None:
    if isinstance(section, dict) and isinstance(section.get(key), str):
        value: str = section[key]
        if not _is_uri(value) and not Path(value).is_absolute():
            section[key] = str((base / value).resolve())


def _resolve_paths(data: dict[str, Any], base: Path) -> dict[str, Any]:
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    for table, key in _PATH_KEYS:
        _resolve(out.get(table), key, base)
    for table, sub, key in _NESTED_PATH_KEYS:
        section = out.get(table)
        if isinstance(section, dict) and isinstance(section.get(sub), dict):
            section[sub] = dict(section[sub])
            _resolve(section[sub], key, base)
    return out


def parse_config(data: dict[str, Any], base: Path | None = None, origin: str = "config") -> TidemarkConfig:
    """Validate a config mapping; relative paths are resolved against base when given."""
    if base is not None:
        data = _resolve_paths(data, base)
    try:
        return TidemarkConfig.model_validate(data)
    except ValidationError as exc:
        # Not chained: pydantic's own text quotes the input, which may hold a secret the config must not carry.
        raise ConfigError(_describe(exc, origin)) from None


def load_config(path: str | Path) -> TidemarkConfig:
    """Load and validate a TOML config file."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        msg = f"config file {file} does not exist (create one with 'tidemark init DIR')"
        raise ConfigError(msg) from exc
    except OSError as exc:
        msg = f"cannot read config file {file}: {exc.strerror}"
        raise ConfigError(msg) from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = f"{file}: not valid TOML: {exc}"
        raise ConfigError(msg) from exc
    return parse_config(data, base=file.resolve().parent, origin=str(file))
