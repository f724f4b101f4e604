"""``seqrepair credentials add|delete|list``: manage the credentials file both ports check
(:mod:`seqrepair.auth.credentials`). A password never travels on the command line: it is read
from ``--password-env VAR`` or stdin (one line; without a terminal, or prompted for twice)."""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from typing import Any

from seqrepair.core.errors import InvalidConfigError


def register(subparsers: Any) -> None:
    """Add ``seqrepair credentials`` to the ``seqrepair`` parser."""
    creds = subparsers.add_parser(
        "credentials", help="manage the credentials file (salted SCRAM-SHA-256 secrets) that "
                            "serve --credentials and the REST API's HTTP Basic check")
    actions = creds.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = actions.add_parser("add", help="add a user, or change its password")
    add.add_argument("user")
    add.add_argument("--password-env", metavar="VAR",
                     help="read the password from this environment variable (default: stdin)")
    delete = actions.add_parser("delete", help="remove a user")
    delete.add_argument("user")
    listing = actions.add_parser("list", help="print the users, one a line")
    for sub in (add, delete, listing):
        sub.add_argument("--file", required=True, metavar="SASLDB",
                         help="the credentials file (created with mode 0600)")
        sub.set_defaults(func=credentials)
    token = actions.add_parser(
        "token", help="make a REST bearer token for a principal: print it once, append its "
                      "SHA-256 to the tokens file (serve --rest-tokens)")
    token.add_argument("principal")
    token.add_argument("--tokens", required=True, metavar="PATH",
                       help="the tokens file (created with mode 0600)")
    token.set_defaults(func=credentials)


def _password(args: argparse.Namespace) -> str:
    if args.password_env:
        value = os.environ.get(args.password_env)
        if value is None:
            raise InvalidConfigError(f"--password-env: ${args.password_env} is not set",
                                     got=args.password_env)
        return value
    if sys.stdin.isatty():
        first = getpass.getpass(f"password for {args.user}: ")
        if getpass.getpass("again: ") != first:
            raise InvalidConfigError("the two passwords differ")
        return first
    return sys.stdin.readline().rstrip("\r\n")


def credentials(args: argparse.Namespace) -> int:
    """``seqrepair credentials``: 0 once done (errors: one line, exit 2 or 1)."""
    from seqrepair.auth.credentials import CredentialStore
    from seqrepair.auth.restauth import new_token

    if args.action == "token":
        print(new_token(args.tokens, args.principal))
        return 0
    store = CredentialStore(args.file)
    if args.action == "add":
        store.add(args.user, _password(args))
    elif args.action == "delete":
        store.delete(args.user)
    else:
        for user in store.users():
            print(user)
    return 0
