"""``python -m delegate.ledger <command>``: the ledger's maintenance commands beside the service.

    python -m delegate.ledger                      # the service (no command)
    python -m delegate.ledger backup PATH          # an online backup while the system runs
    python -m delegate.ledger restore PATH         # verify a backup, then put it in place
    python -m delegate.ledger migrate --from sqlite:///path/ledger.sqlite --to postgresql://...

Each command exits 0 on success and prints one line of what it did; on failure it exits
non-zero with the reason, and leaves what it was given untouched.
"""

import argparse
import asyncio
import sys

from delegate.runtime.logs import configure_logging

from .settings import Settings


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m delegate.ledger", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    backup = commands.add_parser("backup", help="an online backup of the ledger's database")
    backup.add_argument("path", help="the backup file to write (SQLite) or dump file (PostgreSQL)")
    restore = commands.add_parser("restore", help="verify a backup, then replace the database with it")
    restore.add_argument("path")
    migrate = commands.add_parser("migrate", help="copy a SQLite ledger into PostgreSQL, verified")
    migrate.add_argument("--from", dest="source", required=True, help="sqlite:///path/to/ledger.sqlite")
    migrate.add_argument("--to", dest="target", required=True, help="postgresql://user@host/db")
    args = parser.parse_args(argv)
    settings = Settings()
    configure_logging(f"ledger-{args.command}", settings.log_level)
    if args.command in ("backup", "restore"):
        from . import backup as tool

        run = tool.backup if args.command == "backup" else tool.restore
        return asyncio.run(run(settings, args.path))
    from . import migrate as migration

    return asyncio.run(migration.migrate(args.source, args.target))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
