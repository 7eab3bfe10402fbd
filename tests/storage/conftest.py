"""A store root of each kind for the storage tests: a temp folder, an Azurite container, a moto bucket."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.servers import Azurite, MotoS3


@pytest.fixture(params=["local", "azure", "s3"])
def store_root(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URI of an empty folder on each kind of store, with the credentials a user would set."""
    if request.param == "local":
        return str(tmp_path / "root")
    if request.param == "azure":
        azurite: Azurite = request.getfixturevalue("azure_env")
        return azurite.uri(azurite.new_container(), "root")
    moto: MotoS3 = request.getfixturevalue("s3_env")
    return f"s3a://{moto.new_bucket()}/root"
