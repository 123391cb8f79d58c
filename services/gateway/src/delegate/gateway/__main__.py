"""``python -m delegate.gateway``: run the gateway; ``... token [--rotate]``: the owner token."""

import sys

import delegate.runtime.bus  # noqa: F401 - first: nats-py without its unused aiohttp (see there)

if __name__ == "__main__":
    if sys.argv[1:2] == ["token"]:
        # Before the app's imports (FastAPI, uvicorn, the routes): `make token` needs none of
        # them, and they were 40% of the command's CPU (~0.5 s a run).
        from delegate.gateway import token_command

        sys.exit(token_command.main(sys.argv[2:]))
    from delegate.gateway import main

    main.run()
