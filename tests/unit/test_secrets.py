"""tidemark.secrets: a remembered secret is masked in the forms a message shows it in."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tidemark.secrets import MASK, forget_all, redact, remember

KEY = "c2VjcmV0LWtleS0xMjM0NTY3ODkw+/=="
CONNECTION = f"Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=listen;SharedAccessKey={KEY}"
LOGIN = "org.apache.kafka.common.security.plain.PlainLoginModule required"
JAAS = f'{LOGIN} username="$ConnectionString" password="{CONNECTION}";'


@pytest.fixture(autouse=True)
def _forget() -> Iterator[None]:
    forget_all()
    yield
    forget_all()


def test_a_jaas_line_is_masked_whole_as_json_and_by_its_parts() -> None:
    remember(JAAS)
    for text in (JAAS, json.dumps({"options": JAAS}), f"login failed: {CONNECTION}", f"bad key {KEY} given"):
        masked = redact(text)
        assert KEY not in masked and MASK in masked, masked
    assert "ns.servicebus.windows.net" in redact(f"cannot reach ns.servicebus.windows.net ({CONNECTION})")


def test_an_azure_account_key_and_a_sas_token_are_masked_inside_a_connection_string() -> None:
    sas = "sv=2024-01-01&ss=b&sig=Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA%3D%3D"
    remember(f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={KEY};EndpointSuffix=core.windows.net", sas)
    assert KEY not in redact(f"403 for key {KEY}")
    assert "Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA" not in redact("signature sig=Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA%3D%3D refused")


def test_short_values_and_unknown_text_are_left_alone() -> None:
    remember("abc")
    assert redact("abc and more") == "abc and more"
    assert redact("nothing secret here") == "nothing secret here"
