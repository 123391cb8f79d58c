"""``python -m delegate.host --services all|agent,memory,...``: the named services in one process."""

import argparse

from .catalog import EXTRAS, MODULES, parse
from .host import run


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m delegate.host")
    parser.add_argument(
        "--services", default="all", help=f"all, or a comma list of: {', '.join([*MODULES, *EXTRAS])} (default: all)"
    )
    args = parser.parse_args(argv)
    try:
        names = parse(args.services)
    except ValueError as exc:
        parser.error(str(exc))
    run(names)


if __name__ == "__main__":
    main()
