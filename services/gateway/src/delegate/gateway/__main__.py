"""``python -m delegate.gateway``: run the gateway; ``... token [--rotate]``: the owner token."""

import sys

import delegate.runtime.bus  # noqa: F401 - first: nats-py without its unused aiohttp (see there)
from delegate.gateway import main

if __name__ == "__main__":
    if sys.argv[1:2] == ["token"]:
        from delegate.gateway import token_command

        sys.exit(token_command.main(sys.argv[2:]))
    main.run()
