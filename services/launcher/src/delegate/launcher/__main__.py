"""``python -m delegate.launcher``: run everything; ``... nats-config``: print the server config."""

import argparse
import sys
from pathlib import Path

from . import run


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m delegate.launcher")
    commands = parser.add_subparsers(dest="command")
    commands.add_parser("run", help="the whole system with a private nats-server (the default)")
    conf = commands.add_parser("nats-config", help="print a nats-server config with one user per service")
    conf.add_argument("--listen", default="0.0.0.0:4222")
    conf.add_argument("--http", default="0.0.0.0:8222", help="the monitoring port (health checks)")
    conf.add_argument("--store-dir", default="/nats")
    setup = commands.add_parser("nats-setup", help="(for `run`) the private server's identities, as JSON")
    setup.add_argument("directory", type=Path)
    args = parser.parse_args(argv)
    if args.command == "nats-config":
        from .natsconf import operator_config

        sys.stdout.write(operator_config(listen=args.listen, http=args.http, store_dir=args.store_dir))
        return
    if args.command == "nats-setup":
        from .private_server import print_prepared

        print_prepared(args.directory)
        return
    run.main()


if __name__ == "__main__":
    main()
