"""Spark's UnsafeRow bytes decoded with a schema, without Spark; and Spark DDL parsed into that schema.

An UnsafeRow (Spark's `UnsafeRow`, little-endian): a null bitset of 8 bytes per 64 fields, one 8-byte slot per
field (fixed-width values in place; for strings, binaries, structs, arrays, maps and decimals above 18 digits the
slot holds offset << 32 | size of the bytes in the variable region, offsets from the row's start). Nested structs
are UnsafeRows; arrays are `UnsafeArrayData` (an 8-byte count, a null bitset, elements of their own width rounded
up to 8 bytes in all, or 8-byte offset/size slots); maps are an 8-byte key-array size, the key array, the value
array. Types are Spark's JSON type names (as the state schema files record them): "long", "string",
"decimal(10,2)", {"type": "struct", "fields": [...]}, {"type": "array", ...}, {"type": "map", ...}.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
import struct
from typing import Any

from tidemark.formats.state_schema import Field, struct_fields

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_FIXED = {
    "boolean": ("<?", 1),
    "byte": ("<b", 1),
    "short": ("<h", 2),
    "integer": ("<i", 4),
    "date": ("<i", 4),
    "long": ("<q", 8),
    "timestamp": ("<q", 8),
    "timestamp_ntz": ("<q", 8),
    "float": ("<f", 4),
    "double": ("<d", 8),
}
_DECIMAL = re.compile(r"decimal\((\d+),\s*(-?\d+)\)")


class RowDecodeError(ValueError):
    """The bytes do not fit the schema (a wrong schema, or not an UnsafeRow)."""


def _bitset_bytes(count: int) -> int:
    return ((count + 63) // 64) * 8


def _span(data: bytes, base: int, slot: int, limit: int) -> tuple[int, int]:
    (word,) = struct.unpack_from("<q", data, slot)
    offset, size = (word >> 32) & 0xFFFFFFFF, word & 0xFFFFFFFF
    start = base + offset
    if size < 0 or start < base or start + size > limit:
        msg = f"a variable-length field points outside the row (offset {offset}, size {size})"
        raise RowDecodeError(msg)
    return start, size


def _timestamp(micros: int) -> dt.datetime:
    return EPOCH + dt.timedelta(microseconds=micros)


def _scalar(kind: str, data: bytes, at: int) -> Any:
    fmt, _ = _FIXED[kind]
    (value,) = struct.unpack_from(fmt, data, at)
    if kind in ("timestamp", "timestamp_ntz"):
        stamp = _timestamp(value)
        return stamp if kind == "timestamp" else stamp.replace(tzinfo=None)
    if kind == "date":
        return dt.date(1970, 1, 1) + dt.timedelta(days=value)
    return value


def _value(kind: Any, data: bytes, base: int, slot: int, limit: int) -> Any:
    """One non-null value whose 8-byte slot (or element) starts at `slot`."""
    if isinstance(kind, str):
        if kind in _FIXED:
            return _scalar(kind, data, slot)
        match = _DECIMAL.fullmatch(kind)
        if match:
            precision, scale = int(match.group(1)), int(match.group(2))
            if precision <= 18:
                (unscaled,) = struct.unpack_from("<q", data, slot)
            else:
                start, size = _span(data, base, slot, limit)
                unscaled = int.from_bytes(data[start : start + size], "big", signed=True)
            return decimal.Decimal(unscaled).scaleb(-scale)
        if kind in ("string", "binary") or kind.startswith(("varchar", "char")):
            start, size = _span(data, base, slot, limit)
            raw = data[start : start + size]
            if kind == "binary":
                return bytes(raw)
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                msg = "a string field is not UTF-8"
                raise RowDecodeError(msg) from exc
        if kind in ("null", "void"):
            return None
        msg = f"type {kind!r} is not supported by tidemark's row decoder"
        raise RowDecodeError(msg)
    start, size = _span(data, base, slot, limit)
    kind_name = kind.get("type")
    if kind_name == "struct":
        return decode_row(data[start : start + size], struct_fields(kind))
    if kind_name == "array":
        return _array(kind["elementType"], data, start, start + size)
    if kind_name == "map":
        (keys_size,) = struct.unpack_from("<q", data, start)
        keys_at = start + 8
        if keys_size < 0 or keys_at + keys_size > start + size:
            msg = "a map's key array runs outside the row"
            raise RowDecodeError(msg)
        keys = _array(kind["keyType"], data, keys_at, keys_at + keys_size)
        values = _array(kind["valueType"], data, keys_at + keys_size, start + size)
        return dict(zip([_hashable(k) for k in keys], values, strict=False))
    msg = f"type {kind!r} is not supported by tidemark's row decoder"
    raise RowDecodeError(msg)


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _element_width(kind: Any) -> int:
    if isinstance(kind, str) and kind in _FIXED:
        return _FIXED[kind][1]
    if kind in ("null", "void"):
        return 8
    if isinstance(kind, str):
        match = _DECIMAL.fullmatch(kind)
        if match and int(match.group(1)) <= 18:
            return 8
    return 8  # offset/size slots


def _array(kind: Any, data: bytes, start: int, limit: int) -> list[Any]:
    if start + 8 > limit:
        msg = "an array is cut short"
        raise RowDecodeError(msg)
    (count,) = struct.unpack_from("<q", data, start)
    width = _element_width(kind)
    first = start + 8 + _bitset_bytes(count)
    if count < 0 or first + count * width > limit:
        msg = f"an array of {count} elements runs outside the row"
        raise RowDecodeError(msg)
    out = []
    for i in range(count):
        null = data[start + 8 + i // 8] >> (i % 8) & 1
        out.append(None if null else _value(kind, data, start, first + i * width, limit))
    return out


def _variable(kind: Any) -> bool:
    """True when a value lives in the variable-length region (its slot holds offset << 32 | size)."""
    if not isinstance(kind, str):
        return True
    if kind in _FIXED or kind in ("null", "void"):
        return False
    match = _DECIMAL.fullmatch(kind)
    return not (match and int(match.group(1)) <= 18)


def _check_slot(kind: Any, data: bytes, slot: int, fixed: int, null: bool) -> tuple[int, int] | None:
    """What Spark's UnsafeRowWriter leaves in a slot, checked: a null field's slot is zero; a fixed-width value
    narrower than 8 bytes is zero-padded (a boolean is 0 or 1); a variable-length value starts 8-byte aligned in
    the variable region (after the null bits and slots) and ends inside the row. Its (start, size) span, if any."""
    word = data[slot : slot + 8]
    if null:
        if word != bytes(8):
            msg = "null by its null bit, yet its slot holds a value"
            raise RowDecodeError(msg)
        return None
    if not _variable(kind):
        width = _FIXED[kind][1] if isinstance(kind, str) and kind in _FIXED else 8
        if word[width:] != bytes(8 - width):
            msg = f"a {kind} fills {width} of its slot's 8 bytes, but the rest are not zero"
            raise RowDecodeError(msg)
        if kind == "boolean" and word[0] > 1:
            msg = f"a boolean holds {word[0]}"
            raise RowDecodeError(msg)
        return None
    (packed,) = struct.unpack_from("<q", data, slot)
    offset, size = (packed >> 32) & 0xFFFFFFFF, packed & 0xFFFFFFFF
    if offset < fixed or offset % 8 or offset + size > len(data):
        msg = f"its slot is no offset and size inside the row's variable-length region (offset {offset}, size {size})"
        raise RowDecodeError(msg)
    return offset, size


def decode_row(data: bytes, fields: tuple[Field, ...]) -> dict[str, Any]:
    """One UnsafeRow as {field: value}; RowDecodeError when the bytes cannot be this schema's row.

    Fit is decided from what the bytes allow, as Spark's writer lays them out: the row is whole 8-byte words; no
    null bit beyond the schema's fields; each field's slot as _check_slot says; strings valid UTF-8; the
    variable-length values end to end (each rounded up to 8 bytes) exactly fill the row after its slots. The error
    names the columns that do not fit (a schema with the right columns in another order fails here, not as
    garbage)."""
    count = len(fields)
    bits = _bitset_bytes(count)
    fixed = bits + 8 * count
    if len(data) < fixed:
        msg = f"the row has {len(data)} bytes, fewer than the {fixed} a {count}-field row needs"
        raise RowDecodeError(msg)
    if len(data) % 8:
        msg = f"the row has {len(data)} bytes, not whole 8-byte words: not an UnsafeRow"
        raise RowDecodeError(msg)
    if any(data[i // 8] >> (i % 8) & 1 for i in range(count, bits * 8)):
        msg = f"the row's null bits mark fields beyond the schema's {count}: the row has more columns"
        raise RowDecodeError(msg)
    out: dict[str, Any] = {}
    wrong: dict[str, str] = {}
    spans: list[tuple[int, int]] = []
    for i, field in enumerate(fields):
        null = bool(data[i // 8] >> (i % 8) & 1)
        slot = bits + 8 * i
        kind = field.raw if field.raw is not None else field.type
        try:
            span = _check_slot(kind, data, slot, fixed, null)
            out[field.name] = None if null else _value(kind, data, 0, slot, len(data))
        except RowDecodeError as exc:
            wrong[field.name] = str(exc)
            continue
        if span is not None:
            spans.append(span)
    if wrong:
        shown = "; ".join(f"{name}: {why}" for name, why in wrong.items())
        msg = f"column(s) {', '.join(wrong)} do not fit the row's bytes ({shown})"
        raise RowDecodeError(msg)
    cursor = fixed
    for start, size in sorted(spans):
        if start != cursor:
            break
        cursor = start + (size + 7) // 8 * 8
    if cursor != len(data):
        variable = [f.name for f in fields if _variable(f.raw if f.raw is not None else f.type)] or ["none"]
        msg = (
            f"the row's {len(data) - fixed} bytes after its slots are not the values of the schema's "
            f"variable-length column(s) ({', '.join(variable)}) end to end: the columns' order or types differ "
            "from the row's"
        )
        raise RowDecodeError(msg)
    return out


# --- Spark DDL ("a INT, w STRUCT<start: TIMESTAMP, end: TIMESTAMP>") into the same JSON type names ----------

_SIMPLE = {
    "boolean": "boolean",
    "tinyint": "byte",
    "byte": "byte",
    "smallint": "short",
    "short": "short",
    "int": "integer",
    "integer": "integer",
    "bigint": "long",
    "long": "long",
    "float": "float",
    "real": "float",
    "double": "double",
    "date": "date",
    "timestamp": "timestamp",
    "timestamp_ltz": "timestamp",
    "timestamp_ntz": "timestamp_ntz",
    "string": "string",
    "binary": "binary",
}
_TOKEN = re.compile(r"\s*(`[^`]*`|[A-Za-z_][A-Za-z0-9_]*|\d+|[<>(),:]|'[^']*')")


class _Ddl:
    def __init__(self, text: str) -> None:
        self.tokens: list[str] = []
        at = 0
        while at < len(text):
            if text[at:].strip() == "":
                break
            match = _TOKEN.match(text, at)
            if match is None:
                msg = f"unexpected {text[at : at + 10]!r}"
                raise ValueError(msg)
            self.tokens.append(match.group(1))
            at = match.end()
        self.at = 0

    def peek(self) -> str | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def next(self) -> str:
        token = self.peek()
        if token is None:
            msg = "the schema ends early"
            raise ValueError(msg)
        self.at += 1
        return token

    def expect(self, token: str) -> None:
        found = self.next()
        if found != token:
            msg = f"expected {token!r}, found {found!r}"
            raise ValueError(msg)

    def name(self) -> str:
        token = self.next()
        return token[1:-1] if token.startswith("`") else token

    def type(self) -> Any:
        word = self.next().lower()
        if word in ("decimal", "dec", "numeric"):
            precision, scale = 10, 0
            if self.peek() == "(":
                self.next()
                precision = int(self.next())
                if self.peek() == ",":
                    self.next()
                    scale = int(self.next())
                self.expect(")")
            return f"decimal({precision},{scale})"
        if word in ("varchar", "char"):
            self.expect("(")
            self.next()
            self.expect(")")
            return "string"
        if word == "struct":
            self.expect("<")
            fields = []
            while self.peek() != ">":
                name = self.name()
                if self.peek() == ":":
                    self.next()
                fields.append(self.field(name))
                if self.peek() == ",":
                    self.next()
            self.expect(">")
            return {"type": "struct", "fields": fields}
        if word == "array":
            self.expect("<")
            element = self.type()
            self.expect(">")
            return {"type": "array", "elementType": element, "containsNull": True}
        if word == "map":
            self.expect("<")
            key = self.type()
            self.expect(",")
            value = self.type()
            self.expect(">")
            return {"type": "map", "keyType": key, "valueType": value, "valueContainsNull": True}
        if word in _SIMPLE:
            return _SIMPLE[word]
        msg = f"unknown type {word!r}"
        raise ValueError(msg)

    def field(self, name: str) -> dict[str, Any]:
        kind = self.type()
        nullable = True
        while self.peek() is not None and self.peek() not in (",", ">"):
            word = self.next().lower()
            if word == "not":
                self.expect_word("null")
                nullable = False
            elif word == "comment":
                self.next()
            else:
                msg = f"unexpected {word!r} after the type of {name!r}"
                raise ValueError(msg)
        return {"name": name, "type": kind, "nullable": nullable, "metadata": {}}

    def expect_word(self, word: str) -> None:
        found = self.next()
        if found.lower() != word:
            msg = f"expected {word!r}, found {found!r}"
            raise ValueError(msg)


def fields_from_ddl(ddl: str) -> tuple[Field, ...]:
    """The fields of a Spark DDL column list ('k STRING, n BIGINT'); ValueError says what is wrong."""
    parser = _Ddl(ddl)
    fields = []
    try:
        while parser.peek() is not None:
            name = parser.name()
            if parser.peek() == ":":
                parser.next()
            fields.append(parser.field(name))
            if parser.peek() == ",":
                parser.next()
    except ValueError as exc:
        msg = f"{ddl!r} is not a Spark DDL column list ({exc})"
        raise ValueError(msg) from exc
    if not fields:
        msg = f"{ddl!r} lists no columns"
        raise ValueError(msg)
    return struct_fields({"fields": fields})
