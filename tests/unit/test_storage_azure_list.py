"""The List Blobs page parser on documents shaped like the service's (no server needed)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from email.utils import format_datetime
from urllib.parse import quote
from xml.sax.saxutils import escape

from tidemark.storage.azure_list import list_query, next_marker_of, parse_page


def _blob(name: str, size: int, when: datetime, etag: str, folder: bool = False, encoded: bool = False) -> str:
    shown = quote(name) if encoded else escape(name)
    flag = ' Encoded="true"' if encoded else ""
    metadata = "<Metadata><hdi_isfolder>true</hdi_isfolder></Metadata>" if folder else "<Metadata />"
    return (
        f"<Blob><Name{flag}>{shown}</Name><Properties><Last-Modified>{format_datetime(when, usegmt=True)}"
        f"</Last-Modified><Etag>{etag}</Etag><Content-Length>{size}</Content-Length></Properties>{metadata}</Blob>"
    )


def _page(items: list[str], next_marker: str) -> bytes:
    marker = f"<NextMarker>{next_marker}</NextMarker>" if next_marker else "<NextMarker />"
    return (
        '<?xml version="1.0" encoding="utf-8"?><EnumerationResults ContainerName="c"><Prefix>ck/</Prefix>'
        f"<MaxResults>5000</MaxResults><Blobs>{''.join(items)}</Blobs>{marker}</EnumerationResults>"
    ).encode()


def test_blobs_prefixes_folders_and_the_next_marker() -> None:
    when = datetime(2026, 5, 4, 3, 2, 1, tzinfo=UTC)
    body = _page(
        [
            _blob("ck/state/0/1/2.delta", 180, when, '"0x8DC1"'),
            _blob("ck/a&b <c>.delta", 7, when, "0x8DC2"),
            _blob("ck/bell\x07.delta", 3, when, "0x8DC3", encoded=True),  # not representable in XML 1.0
            _blob("ck/state/0/9", 0, when, "0x8DC4", folder=True),  # ADLS Gen2 folder marker
            _blob("ck/state/0/8/", 0, when, "0x8DC5"),  # a "folder/" placeholder blob
            "<BlobPrefix><Name>ck/state/0/7/</Name></BlobPrefix>",
        ],
        "2!92!MDAwMDI0IWNrL3N0YXRl",
    )
    page = parse_page(body)
    assert [(e.rel, e.size, e.etag) for e in page.files] == [
        ("ck/state/0/1/2.delta", 180, "0x8DC1"),
        ("ck/a&b <c>.delta", 7, "0x8DC2"),
        ("ck/bell\x07.delta", 3, "0x8DC3"),
    ]
    assert {e.mtime for e in page.files} == {when.timestamp()}
    assert page.prefixes == ["ck/state/0/7/"]
    assert page.next_marker == "2!92!MDAwMDI0IWNrL3N0YXRl"


def test_last_page_and_an_empty_listing() -> None:
    assert parse_page(_page([], "")).next_marker == ""
    assert parse_page(_page([], "")).files == []
    good = _blob("ck/x", 1, datetime(2026, 1, 1, tzinfo=UTC), "e")
    bad_time = re.sub("<Last-Modified>[^<]*</Last-Modified>", "<Last-Modified>yesterday</Last-Modified>", good)
    page = parse_page(_page([bad_time], ""))
    assert [(e.rel, e.mtime) for e in page.files] == [("ck/x", None)]


def test_the_query_names_prefix_delimiter_and_marker_only_when_given() -> None:
    assert list_query("", False, 5000, "") == {
        "restype": "container",
        "comp": "list",
        "maxresults": "5000",
        "include": "metadata",
    }
    query = list_query("ck/", True, 10, "m1")
    assert (query["prefix"], query["delimiter"], query["maxresults"], query["marker"]) == ("ck/", "/", "10", "m1")


def test_the_marker_found_without_parsing_is_the_parsed_one() -> None:
    """The next request goes out on a marker read from the raw bytes: it must equal what the parser reads."""
    when = datetime(2026, 5, 4, 3, 2, 1, tzinfo=UTC)
    tricky = [_blob("ck/<NextMarker>x</NextMarker>", 1, when, "e1"), _blob("ck/NextMarker", 2, when, "e2")]
    for marker in ("2!92!MDAwMDI0IWNrL3N0YXRl", "m&amp;1&lt;2", ""):
        body = _page(tricky, marker)
        assert next_marker_of(body) == parse_page(body).next_marker
    assert next_marker_of(_page(tricky, "m&amp;1&lt;2")) == "m&1<2"
    without = _page(tricky, "").replace(b"<NextMarker />", b"")
    assert next_marker_of(without) == parse_page(without).next_marker == ""
    assert next_marker_of(_page([], "").replace(b"<NextMarker />", b"<NextMarker></NextMarker>")) == ""
