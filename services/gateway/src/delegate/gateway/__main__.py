"""``python -m delegate.gateway``: run the gateway; ``... token [--rotate]``: the owner token."""

import sys

from delegate.gateway import main

if __name__ == "__main__":
    if sys.argv[1:2] == ["token"]:
        from delegate.gateway import token_command

        sys.exit(token_command.main(sys.argv[2:]))
    main.run()
