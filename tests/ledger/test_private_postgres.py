"""The PostgreSQL the ledger tests run on is their own, never the machine's: started from the
wheel in a temp dir, listening on no TCP port, as an unprivileged user even when the tests run
as root, and gone with its data at the end."""

import os
import subprocess

import psycopg
import pytest

from tests.support.postgres import PrivatePostgres

pytestmark = pytest.mark.integration  # a server process


def test_the_tests_server_is_private_unprivileged_and_on_no_tcp_port(postgres: PrivatePostgres) -> None:
    with psycopg.connect(postgres.url()) as conn:
        row = conn.execute("SELECT current_setting('listen_addresses'), current_setting('data_directory'),"
                           " current_setting('unix_socket_directories'), pg_postmaster_start_time()").fetchone()
    assert row is not None
    listen, data_directory, sockets, _ = row
    assert listen == ""  # no TCP at all: nothing on 5432 or any port is ever involved
    assert os.path.realpath(data_directory) == os.path.realpath(postgres.pgdata)
    assert sockets == postgres.socket_dir
    owner = os.stat(postgres.pgdata).st_uid
    assert owner != 0  # PostgreSQL refuses root: as root, the library runs it as its own user
    assert owner == os.geteuid() or os.geteuid() == 0


def test_a_fresh_database_is_empty_and_dropped(postgres: PrivatePostgres) -> None:
    url = postgres.create_database()
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone() == (0,)
    postgres.drop_database(url)
    with psycopg.connect(postgres.url()) as admin:
        name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
        assert admin.execute("SELECT count(*) FROM pg_database WHERE datname = %s", (name,)).fetchone() == (0,)


def test_the_client_tools_are_the_wheels_and_match_the_server(postgres: PrivatePostgres) -> None:
    env = PrivatePostgres.tools_env({"PATH": "/nonexistent"})  # none of the machine's
    done = subprocess.run(["pg_dump", "--version"], env=env, capture_output=True, text=True, check=True)
    with psycopg.connect(postgres.url()) as conn:
        server = conn.execute("SHOW server_version").fetchone()
    assert server is not None and done.stdout.split()[-1] == server[0].split()[0]


def test_stop_removes_the_server_and_its_data() -> None:
    server = PrivatePostgres().start()
    url = server.url()
    with psycopg.connect(url) as conn:
        conn.execute("SELECT 1")
    server.stop()
    assert not server.root.exists()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=3).close()
