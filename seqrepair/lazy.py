"""Names a package exports without importing the modules that define them until first use
(PEP 562): ``seqrepair.journal`` and ``seqrepair.spark`` are imported by the CLI's parser, which
must not import redis or pyspark (the extras)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def lazy_exports(
    package: str, homes: Mapping[str, str], exported: Iterable[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package``: a name of ``homes`` is
    imported from its module (``homes[name]``) when first asked for, then kept in the package."""
    namespace = sys.modules[package].__dict__
    names = frozenset(exported)

    def __getattr__(name: str) -> Any:
        module = homes.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *names})

    return __getattr__, __dir__
