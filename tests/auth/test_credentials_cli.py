"""``seqrepair credentials``: the password from stdin or an environment variable (never the
command line), the file and the tokens file with mode 0600, one-line errors."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from seqrepair.auth.credentials import CredentialStore
from seqrepair.auth.restauth import read_tokens, token_hash

ROOT = Path(__file__).resolve().parents[2]
TOOLS = all(shutil.which(t, path="/usr/sbin:/usr/bin") for t in ("saslpasswd2", "db_dump"))


def cli(*args: str, stdin: str = "", env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "seqrepair.cli", "credentials", *args],
                          input=stdin, capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


@pytest.mark.skipif(not TOOLS, reason="Cyrus sasl2-bin / db-util not installed (bin/setup)")
def test_users_are_added_from_stdin_or_the_environment_listed_and_deleted(tmp_path: Path) -> None:
    creds = str(tmp_path / "creds.sasldb")
    assert cli("add", "alice", "--file", creds, stdin="from stdin\n").returncode == 0
    done = cli("add", "bob", "--file", creds, "--password-env", "BOBPW",
               env={"BOBPW": "from env"})
    assert done.returncode == 0, done.stderr
    assert cli("list", "--file", creds).stdout.split() == ["alice", "bob"]
    store = CredentialStore(creds)
    assert store.verify("alice", "from stdin")
    assert store.verify("bob", "from env")
    assert Path(creds).stat().st_mode & 0o077 == 0
    assert cli("delete", "bob", "--file", creds).returncode == 0
    assert cli("list", "--file", creds).stdout.split() == ["alice"]
    missing = cli("delete", "bob", "--file", creds)
    assert (missing.returncode, missing.stderr.strip()) == (
        1, f"seqrepair credentials: no user 'bob' in {creds}")
    bad = cli("add", "no spaces", "--file", creds, stdin="x\n")
    assert bad.returncode == 2
    assert "user name" in bad.stderr
    unset = cli("add", "carol", "--file", creds, "--password-env", "NOT_SET_ANYWHERE")
    assert unset.returncode == 2
    assert "is not set" in unset.stderr


def test_a_token_is_printed_once_and_only_its_hash_is_kept(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    done = cli("token", "alice@example.com", "--tokens", str(tokens))
    assert done.returncode == 0, done.stderr
    token = done.stdout.strip()
    assert read_tokens(tokens) == {token_hash(token): "alice@example.com"}
    assert token not in tokens.read_text()
    assert tokens.stat().st_mode & 0o077 == 0
