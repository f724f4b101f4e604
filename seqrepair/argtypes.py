"""Argument types for the command line: each turns a word into a value or says, in argparse's
own usage error (exit 2), what it expected."""

from __future__ import annotations

import argparse
import re
from math import isfinite


def _number(text: str, kind: type[int] | type[float]) -> float:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected {'an integer' if kind is int else 'a number'}, got {text!r}"
        ) from None
    if not isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1."""
    value = int(_number(text, int))
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    """An integer >= 0."""
    value = int(_number(text, int))
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0."""
    value = _number(text, float)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    """A finite number >= 0."""
    value = _number(text, float)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    return value


def finite_float(text: str) -> float:
    """Any finite number."""
    return _number(text, float)


def fraction(text: str) -> float:
    """A share in [0, 1)."""
    value = _number(text, float)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text!r}")
    return value


def bit_width(text: str) -> int:
    """A sequence bit width, 2..64."""
    value = int(_number(text, int))
    if not 2 <= value <= 64:
        raise argparse.ArgumentTypeError(f"must be a bit width in 2..64, got {text!r}")
    return value


_SPARK_MASTER = re.compile(
    r"local(\[(\*|[1-9]\d*)(,\s*[1-9]\d*)?\])?|local-cluster\[.+\]|spark://\S+|yarn"
    r"|k8s://\S+"
)


def spark_master(text: str) -> str:
    """A Spark master URL: local, local[N], local[*], local[N,F], local-cluster[...],
    spark://HOST:PORT, yarn, k8s://URL."""
    if not _SPARK_MASTER.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"not a Spark master URL: {text!r} (local, local[N], local[*], spark://HOST:PORT, "
            f"yarn, k8s://URL)"
        )
    return text


def host_port(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (port 0..65535; 0 lets the system choose)."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)
