"""Loads the processor class a config names ("package.module:Class")."""

from __future__ import annotations

import importlib
import re

from tidemark.errors import UsageError
from tidemark.stateful.api import KeyedProcessor

_SPEC = re.compile(r"^(?P<module>[A-Za-z_][\w.]*):(?P<name>[A-Za-z_]\w*)$")


def load_processor(spec: str) -> KeyedProcessor:
    """Import "package.module:Class" and return an instance of it (a KeyedProcessor subclass)."""
    match = _SPEC.match(spec.strip())
    if match is None:
        msg = f"processor {spec!r} must look like 'package.module:Class'"
        raise UsageError(msg)
    module_name, class_name = match["module"], match["name"]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        msg = f"cannot import processor module {module_name!r} ({exc}): put it on PYTHONPATH or install it"
        raise UsageError(msg) from exc
    cls = getattr(module, class_name, None)
    if not isinstance(cls, type) or not issubclass(cls, KeyedProcessor):
        msg = f"{spec!r} must name a subclass of tidemark.stateful.KeyedProcessor"
        raise UsageError(msg)
    if not module_name.startswith("tidemark."):
        # Ship the user's module with the processor, so Python workers need not find it on their own path.
        from pyspark import cloudpickle

        cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]
    try:
        return cls()
    except TypeError as exc:
        msg = f"processor class {spec!r} must be constructible without arguments: {exc}"
        raise UsageError(msg) from exc
