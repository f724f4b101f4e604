"""The ``seqrepair`` command installs part by part: ``--help`` needs only the base install, a
command whose extra is missing says which one in one line, ``--version``, ``python -m seqrepair``.

A missing extra is simulated in a real ``seqrepair`` process: a ``sitecustomize`` on its
PYTHONPATH puts a finder first on ``sys.meta_path`` that refuses the modules named in
``SEQREPAIR_TEST_BLOCK`` as an absent package would (ModuleNotFoundError).
"""

import argparse
import importlib.metadata
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from seqrepair.cli import build_parser
from seqrepair.extras import EXTRA_OF, MissingExtraError, load_body

EVERY_EXTRA = ("proton", "redis", "pyspark", "pyarrow", "pandas")

BLOCKER = textwrap.dedent('''
    import os
    import sys

    BLOCKED = set(filter(None, os.environ.get("SEQREPAIR_TEST_BLOCK", "").split(",")))


    class Absent:
        """Finds the blocked packages (and their submodules) and says they are not there."""

        @staticmethod
        def find_spec(name, path=None, target=None):
            if name.partition(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None


    sys.meta_path.insert(0, Absent())
''')


@pytest.fixture(scope="module")
def shim(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("shim")
    (folder / "sitecustomize.py").write_text(BLOCKER)
    return folder


def seqrepair(shim: Path, blocked: tuple[str, ...], *argv: str, cwd: Path | None = None):
    """Run ``python -m seqrepair ARGV`` with ``blocked`` missing; the finished process."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(shim), env.get("PYTHONPATH", "")])
    env["SEQREPAIR_TEST_BLOCK"] = ",".join(blocked)
    return subprocess.run([sys.executable, "-m", "seqrepair", *argv], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=60)


def subcommands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    """Every command path of ``parser`` (``("serve",)``, ``("journal", "info")``, ...)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*prefix, name)
                yield from subcommands(sub, (*prefix, name))


def test_the_shim_really_hides_a_module(shim):
    result = seqrepair(shim, ("redis",), "--help")
    assert result.returncode == 0
    hidden = subprocess.run(
        [sys.executable, "-c", "import redis"], capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(shim), "SEQREPAIR_TEST_BLOCK": "redis"},
    )
    assert hidden.returncode == 1
    assert "ModuleNotFoundError: No module named 'redis'" in hidden.stderr


def test_every_help_works_without_any_extra(shim):
    paths = list(subcommands(build_parser()))
    assert {("serve",), ("publish",), ("subscribe",), ("journal", "info"), ("rebuild",),
            ("demo",)} <= set(paths)
    for path in [(), *paths]:
        result = seqrepair(shim, EVERY_EXTRA, *path, "--help")
        assert result.returncode == 0, (path, result.stderr)
        assert result.stdout.startswith(f"usage: seqrepair {' '.join(path)}".rstrip()), path
        assert result.stderr == "", path


COMMANDS = [
    (("serve", "--redis-url", "redis://127.0.0.1:1"), "the 'amqp' and 'redis' extras",
     "seqrepair[amqp,redis]"),
    (("publish", "--source", "feed.a", "--count", "1"), "the 'amqp' extra", "seqrepair[amqp]"),
    (("publish", "--source", "feed.a", "--count", "1", "--redis-url", "redis://127.0.0.1:1"),
     "the 'amqp' and 'redis' extras", "seqrepair[amqp,redis]"),
    (("subscribe", "--address", "/#"), "the 'amqp' extra", "seqrepair[amqp]"),
    (("subscribe", "--address", "/q", "--broker", "127.0.0.1:1", "--redis-url", "redis://x"),
     "the 'amqp' and 'redis' extras", "seqrepair[amqp,redis]"),
    (("gateway", "--upstream", "127.0.0.1:1"), "the 'amqp' extra", "seqrepair[amqp]"),
    (("capabilities",), "the 'amqp' extra", "seqrepair[amqp]"),
    (("journal", "info"), "the 'redis' extra", "seqrepair[redis]"),
    (("journal", "trim", "--max-count", "1"), "the 'redis' extra", "seqrepair[redis]"),
    (("journal", "export", "feed.a", "--archive", "out"), "the 'redis' extra",
     "seqrepair[redis]"),
    (("rebuild", "--archive", "arch"), "the 'spark' extra", "seqrepair[spark]"),
    (("audit", "--journal", "redis://x"), "the 'spark' extra", "seqrepair[spark]"),
    (("demo",), "the 'all' extra", "seqrepair[all]"),
]


@pytest.mark.parametrize(("argv", "needs", "install"), COMMANDS,
                         ids=[" ".join(argv[:2]) for argv, _, _ in COMMANDS])
def test_a_command_without_its_extra_says_which_in_one_line(shim, tmp_path, argv, needs,
                                                            install):
    result = seqrepair(shim, EVERY_EXTRA, *argv, cwd=tmp_path)
    command = " ".join(argv[:2]) if argv[0] == "journal" else argv[0]
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith(f"seqrepair {command}: needs {needs}: "
                                    f"pip install '{install}' (no module named "), result.stderr
    assert list(tmp_path.iterdir()) == []  # nothing was attempted


def test_only_the_missing_module_of_several_is_named_and_every_needed_extra_listed(shim):
    result = seqrepair(shim, ("redis",), "serve", "--redis-url", "redis://127.0.0.1:1")
    assert result.returncode == 2
    assert result.stderr == ("seqrepair serve: needs the 'amqp' and 'redis' extras: "
                             "pip install 'seqrepair[amqp,redis]' (no module named 'redis')\n")


def test_demo_without_redis_needs_no_extra(shim):
    result = seqrepair(shim, EVERY_EXTRA, "demo", "--no-redis", "--only", "in-process",
                       "--publications", "500")
    assert result.returncode == 0, result.stderr
    assert "demo: all stages OK" in result.stdout


def test_other_import_errors_are_not_taken_for_a_missing_extra(tmp_path, monkeypatch):
    (tmp_path / "brokenbody.py").write_text("import seqrepair_no_such_module\n")
    (tmp_path / "brokenextra.py").write_text("import proton._no_such_submodule\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError, match="seqrepair_no_such_module"):
        load_body("x", "brokenbody:run", ())
    # an installed extra missing a part is a broken install, not a missing extra
    pytest.importorskip("proton")
    with pytest.raises(ModuleNotFoundError, match=r"proton\._no_such_submodule"):
        load_body("x", "brokenextra:run", ("proton",))


def test_a_missing_extra_names_the_command_and_its_extras():
    error = MissingExtraError("journal export", ["redis", "amqp", "redis"], "pyarrow")
    assert str(error) == ("seqrepair journal export: needs the 'redis' and 'amqp' extras: "
                          "pip install 'seqrepair[redis,amqp]' (no module named 'pyarrow')")
    # spark installs redis: naming both would say more than pip needs
    assert MissingExtraError("audit", ["spark", "redis"], "redis").extras == ["spark"]
    assert set(EXTRA_OF) == set(EVERY_EXTRA)


def test_help_imports_no_extra():
    """``seqrepair --help`` (and building the parser) imports none of the extras' modules: it
    took 2.3-2.8 s when it imported pyspark."""
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "seqrepair", "--help"],
                            capture_output=True, text=True, check=True)
    imported = {line.split("|")[-1].strip().split(".")[0]
                for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert "seqrepair" in imported
    assert imported.isdisjoint(EVERY_EXTRA), imported & set(EVERY_EXTRA)
    probe = ("import sys\nfrom seqrepair.cli import build_parser\nbuild_parser()\n"
             "print(sorted({m.partition('.')[0] for m in sys.modules}))")
    modules = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                             check=True).stdout
    for name in EVERY_EXTRA:
        assert repr(name) not in modules


def test_version():
    installed = importlib.metadata.version("seqrepair")
    result = subprocess.run([sys.executable, "-m", "seqrepair", "--version"],
                            capture_output=True, text=True, check=True)
    assert result.stdout == f"seqrepair {installed}\n"
    import seqrepair

    assert seqrepair.__version__ == installed


def test_python_dash_m_seqrepair_is_the_command():
    result = subprocess.run([sys.executable, "-m", "seqrepair", "--help"],
                            capture_output=True, text=True, check=True)
    assert result.stdout.startswith("usage: seqrepair ")
    assert "serve" in result.stdout
    bad = subprocess.run([sys.executable, "-m", "seqrepair", "journal", "trim"],
                         capture_output=True, text=True)
    assert bad.returncode == 2  # parsed and run by seqrepair.cli.main like the script
    assert bad.stderr == "seqrepair journal trim: give --max-count and/or --max-age\n"


def test_the_spark_package_still_exports_its_functions_when_imported_lazily():
    pytest.importorskip("pyspark")
    probe = ("import seqrepair.spark as s, sys\nassert 'pyspark' not in sys.modules\n"
             "from seqrepair.spark.audit import audit\n"  # binds the submodule on the package
             "from seqrepair.spark import audit as exported, rebuild_images\n"
             "assert exported is audit and callable(rebuild_images), exported\n")
    subprocess.run([sys.executable, "-c", probe], check=True)
