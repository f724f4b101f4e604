"""DESIGN.md rule 1: the core imports no I/O library and never reads the clock."""

import ast
import pathlib

import seqrepair.core

CORE = pathlib.Path(seqrepair.core.__file__).parent
FORBIDDEN_MODULES = {"proton", "redis", "pyspark", "socket", "asyncio", "threading", "select",
                     "subprocess", "time", "datetime", "os", "pyarrow", "structlog", "logging"}
CLOCK_CALLS = {"time", "monotonic", "perf_counter", "now", "utcnow", "today"}


def imported_roots(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module.split(".")[0]


def test_core_modules_exist_to_be_checked():
    assert len(list(CORE.glob("*.py"))) >= 8


def test_core_imports_no_io_library_and_no_clock():
    offenders = {}
    for path in CORE.glob("*.py"):
        tree = ast.parse(path.read_text())
        bad = set(imported_roots(tree)) & FORBIDDEN_MODULES
        calls = {node.func.attr for node in ast.walk(tree)
                 if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                 and node.func.attr in CLOCK_CALLS}
        if bad or calls:
            offenders[path.name] = sorted(bad | calls)
    assert offenders == {}


def test_the_purity_check_catches_an_offender():
    tree = ast.parse("import redis\nfrom time import monotonic\n")
    assert set(imported_roots(tree)) & FORBIDDEN_MODULES == {"redis", "time"}
