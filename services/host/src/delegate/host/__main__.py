"""``python -m delegate.host --services all|agent,memory,...``: the named services in one process."""

import gc

# A host imports about a thousand modules before its services run, and their objects live as
# long as it does: the cyclic collector, run by allocation counts, scanned them again and again
# while they were being imported (~0.1-0.2 s of CPU, a tenth of a start, for a few thousand
# objects of garbage). It is off until every service is imported; then those objects are frozen
# (never scanned again) and it runs as usual (``host.run``).
gc.disable()

import argparse  # noqa: E402

from .catalog import EXTRAS, MODULES, parse  # noqa: E402
from .host import run  # noqa: E402


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
