"""The List Blobs page parser on documents shaped like the service's (no server needed)."""

from __future__ import annotations

import re
from datetime import datetime
from email.utils import format_datetime
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit
from xml.sax.saxutils import escape

from tidemark.compat import UTC
from tidemark.storage import parse_location
from tidemark.storage.azure import AzureBackend
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
    assert (query["prefix"], query["delimiter"], query["maxresults"], query["marker"]) == ("ck%2F", "%2F", "10", "m1")
    # azure-core pastes values into the URL as given: anything that would change the query is quoted.
    awkward = list_query("my ck/a&b+c#d%/", False, 10, "2!9+/=&x")
    assert (awkward["prefix"], awkward["marker"]) == ("my%20ck%2Fa%26b%2Bc%23d%25%2F", "2%219%2B%2F%3D%26x")


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


class _Answer:
    def __init__(self, body: bytes) -> None:
        self.status_code = 200
        self.body = body

    def read(self) -> bytes:
        return self.body


class _Container:
    """What AzureBackend uses of a ContainerClient: its URL, API version and the pipeline's sender."""

    def __init__(self, pages: dict[str, bytes]) -> None:
        self.url = "http://127.0.0.1:1/acct/c"
        self.api_version = "2021-08-06"
        self.pages = pages
        self.asked: list[str] = []
        self._client = SimpleNamespace(_client=SimpleNamespace(send_request=self.send))

    def send(self, request: Any) -> _Answer:
        marker = parse_qs(urlsplit(request.url).query).get("marker", [""])[0]  # decoded, as a server would
        self.asked.append(marker)
        return _Answer(self.pages[marker])


def _backend(container: _Container) -> AzureBackend:
    backend = AzureBackend(parse_location("wasbs://c@acct.blob.core.windows.net/ck"), None)  # type: ignore[arg-type]
    backend._container = container
    return backend


def test_pages_come_in_order_with_one_request_ahead() -> None:
    when = datetime(2026, 5, 4, 3, 2, 1, tzinfo=UTC)
    pages = {
        "": _page([_blob("ck/a", 1, when, "e1")], "m&amp;1"),
        "m&1": _page([_blob("ck/b", 2, when, "e2")], "m2"),
        "m2": _page([_blob("ck/c", 3, when, "e3")], ""),
    }
    container = _Container(pages)
    listed = [[e.rel for e in files] for files, _ in _backend(container).list_pages("ck/", False)]
    assert listed == [["ck/a"], ["ck/b"], ["ck/c"]]
    assert container.asked == ["", "m&1", "m2"]


def test_a_wrong_guess_of_the_marker_is_asked_again_with_the_parsed_one() -> None:
    """A document whose last <NextMarker> is not the root's: the page goes on from the parsed marker."""
    when = datetime(2026, 5, 4, 3, 2, 1, tzinfo=UTC)
    odd = _page([_blob("ck/a", 1, when, "e1")], "right").replace(
        b"</EnumerationResults>", b"<Extra><NextMarker>wrong</NextMarker></Extra></EnumerationResults>"
    )
    container = _Container({"": odd, "wrong": _page([], ""), "right": _page([_blob("ck/b", 2, when, "e2")], "")})
    listed = [e.rel for files, _ in _backend(container).list_pages("ck/", False) for e in files]
    assert listed == ["ck/a", "ck/b"]
    assert container.asked == ["", "wrong", "right"]
