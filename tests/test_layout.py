"""DESIGN.md rule 5: one idea per module, and a module stays well under 800 lines."""

import pathlib

import seqrepair

PACKAGE = pathlib.Path(seqrepair.__file__).parent
LIMIT = 800


def test_every_module_stays_under_the_line_limit():
    modules = list(PACKAGE.rglob("*.py"))
    assert len(modules) > 30
    too_long = {
        str(path.relative_to(PACKAGE)): n
        for path in modules
        if (n := len(path.read_text().splitlines())) >= LIMIT
    }
    assert too_long == {}
