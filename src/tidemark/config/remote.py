"""[spark] remote: a Spark Connect endpoint, checked so that no credential is ever kept in a config file."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator

# Parameters of a Spark Connect URL (sc://host:port/;key=value;...) that carry a credential.
SECRET_PARAMETERS = frozenset({"token", "password", "secret"})


def _check_remote(value: Any) -> Any:
    if value is None:
        return None
    if not isinstance(value, str) or not value.startswith("sc://") or len(value) <= len("sc://"):
        msg = 'must be a Spark Connect endpoint "sc://host:port" (e.g. "sc://127.0.0.1:15002")'
        raise ValueError(msg)
    names = [part.split("=", 1)[0].strip().lower() for part in value.split(";")[1:]]
    if SECRET_PARAMETERS.intersection(names):
        msg = (
            "carries a credential: keep it out of the config and give the whole endpoint in the environment "
            "(SPARK_REMOTE='sc://host:port/;token=...')"
        )
        raise ValueError(msg)
    return value


Remote = Annotated[str | None, BeforeValidator(_check_remote)]
