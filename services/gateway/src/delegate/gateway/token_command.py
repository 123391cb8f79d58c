"""``python -m delegate.gateway token [--rotate]``: print, or replace, the stored owner token.

The token lives in ``RUNTIME_DATA_DIR/delegate-token`` (mode 0600), unless ``DELEGATE_TOKEN``
sets it, read with the gateway's own settings (the environment first, then ``.env``).
``--rotate`` writes a new one atomically (a temporary file, fsynced, renamed into place):
a running gateway keeps the token it started with until it is restarted, and the change
revokes every browser session (sessions are bound to the token they were made with).
"""

import argparse
import os
import secrets
import sys
from pathlib import Path

from .auth import TOKEN_FILE, private_temp_file
from .settings import Settings


def write_token(path: Path, token: str) -> None:
    """`token` into `path`, mode 0600, all or nothing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = private_temp_file(path, token)
    try:
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename itself survives a power loss
    finally:
        os.close(dir_fd)


def main(argv: list[str] | None = None, settings: Settings | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m delegate.gateway token", description=__doc__.split("\n")[0])
    parser.add_argument("--rotate", action="store_true", help="replace the stored token with a new one")
    args = parser.parse_args(argv)
    settings = settings or Settings()
    path = settings.runtime_data_dir / TOKEN_FILE
    if settings.delegate_token is not None:
        if args.rotate:
            sys.stderr.write("the owner token is set by DELEGATE_TOKEN (environment or .env): change it there\n")
            return 2
        sys.stderr.write("the owner token is set by DELEGATE_TOKEN (environment or .env)\n")
        sys.stdout.write(settings.delegate_token.get_secret_value() + "\n")
        return 0
    if args.rotate:
        token = secrets.token_urlsafe(32)
        write_token(path, token)
        sys.stdout.write(token + "\n")
        sys.stderr.write(
            f"wrote a new owner token to {path}. Restart running gateways (`make run`: Ctrl-C, then start it "
            "again); every browser session signed in with the old token is revoked: sign in again with this one.\n"
        )
        return 0
    try:
        token = path.read_text().strip()
    except FileNotFoundError:
        sys.stderr.write(f"no owner token yet: {path} is created on the gateway's first start (`make run`)\n")
        return 1
    if not token:
        sys.stderr.write(f"{path} is empty: run with --rotate to write a new owner token\n")
        return 1
    sys.stderr.write(f"the owner token stored in {path}:\n")
    sys.stdout.write(token + "\n")
    return 0
