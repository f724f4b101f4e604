"""DESIGN.md rule 5: one idea per module, a module well under 800 lines, and the AMQP binding in
five parts whose imports go one way (``seqrepair/amqp/__init__.py``): the relay is a component
fed by a client, so it may import both (and the wire); nothing imports the relay."""

import ast
import pathlib

import seqrepair

PACKAGE = pathlib.Path(seqrepair.__file__).parent
AMQP = PACKAGE / "amqp"
LIMIT = 800

PARTS = {
    "wire": {"wire"},
    "component": {"wire", "component"},
    "client": {"wire", "client"},
    "gateway": {"wire", "client", "gateway"},
    "relay": {"wire", "client", "component", "relay"},
}
"""Each AMQP part, and the parts (itself included) it may import."""
ON_TOP = {"__init__", "commands", "demo"}
"""The only modules directly in ``seqrepair/amqp/``: they may import any part."""


def test_every_module_stays_under_the_line_limit():
    modules = list(PACKAGE.rglob("*.py"))
    assert len(modules) > 30
    too_long = {
        str(path.relative_to(PACKAGE)): n
        for path in modules
        if (n := len(path.read_text().splitlines())) >= LIMIT
    }
    assert too_long == {}


def imported_modules(tree: ast.AST, package: str) -> set[str]:
    """Every module ``tree`` imports (type-checking and function-level imports too), absolute;
    ``package`` resolves relative imports."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            names.add(module)
            # ``from seqrepair.amqp import client`` imports a part by its attribute name
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def parts_imported(tree: ast.AST, package: str) -> set[str]:
    """The AMQP parts (``wire``, ``component``, ...) among what ``tree`` imports."""
    parts = set()
    for name in imported_modules(tree, package):
        pieces = name.split(".")
        if pieces[:2] == ["seqrepair", "amqp"] and len(pieces) > 2:
            parts.add(pieces[2])
    return parts


def test_the_amqp_folder_holds_only_its_parts_and_the_commands_on_top():
    loose = {path.stem for path in AMQP.glob("*.py")}
    assert loose == ON_TOP
    folders = {path.name for path in AMQP.iterdir() if (path / "__init__.py").exists()}
    assert folders == set(PARTS)


def test_each_amqp_part_imports_only_the_parts_below_it():
    offenders = {}
    for part, allowed in PARTS.items():
        modules = list((AMQP / part).glob("*.py"))
        assert len(modules) >= 2, part
        for path in modules:
            package = f"seqrepair.amqp.{part}"
            found = parts_imported(ast.parse(path.read_text()), package)
            if found - allowed:
                offenders[f"{part}/{path.name}"] = sorted(found - allowed)
    assert offenders == {}


def test_the_direction_check_sees_every_way_of_importing_a_part():
    tree = ast.parse(
        "from seqrepair.amqp.component.links import SubscriberLink\n"
        "import seqrepair.amqp.gateway.gateway\n"
        "from seqrepair.amqp import client\n"
        "from ..component import config\n"
        "def later():\n"
        "    from seqrepair.amqp.wire.codec import encode\n"
    )
    assert parts_imported(tree, "seqrepair.amqp.wire") == {
        "component", "gateway", "client", "wire",
    }
