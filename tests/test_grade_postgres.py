"""The gradebook on PostgreSQL: ``grade --db postgresql://...`` end to end, against a throwaway server on loopback.

The server is PostgreSQL's own ``initdb`` / ``pg_ctl`` (Debian's ``postgresql`` package), run as the ``postgres``
user when we are root, with its data folder in a temporary folder and a free port; it is stopped at the end even when
a test fails. Without those programs the tests are skipped with the reason.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from autograder_cases import toy

PG_DIRS = ["/usr/lib/postgresql/15/bin", "/usr/local/bin", *sorted(map(str, Path("/usr/lib/postgresql").glob("*/bin")))]
pytestmark = pytest.mark.autograder


def pg_tool(name: str) -> str | None:
    for folder in PG_DIRS:
        if os.access(Path(folder) / name, os.X_OK):
            return str(Path(folder) / name)
    return shutil.which(name)


def _skip(reason: str):
    print(f"\nPostgreSQL gradebook tests skipped: {reason}", file=sys.stderr)
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A PostgreSQL server for one test module: ``initdb`` into ``folder/data``, ``pg_ctl start`` on ``port``."""

    def __init__(self, folder: Path):
        self.folder, self.port = folder, free_port()
        self.data, self.log = folder / "data", folder / "server.log"
        self.as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self.as_postgres:  # the server refuses to run as root; its folder must be the postgres user's
            shutil.chown(folder, "postgres")
            folder.chmod(0o700)

    def _run(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([*self.as_postgres, *argv], capture_output=True, text=True, timeout=timeout,
                              cwd=self.folder)

    def start(self) -> str:
        init = self._run(pg_tool("initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                         "--no-sync")
        if init.returncode:
            raise RuntimeError(f"initdb failed: {init.stderr[-2000:]}")
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.folder} -c fsync=off"
        start = self._run(pg_tool("pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-o", options, "-w",
                          "-t", "60", "start")
        if start.returncode:
            log = self.log.read_text() if self.log.exists() else ""
            raise RuntimeError(f"pg_ctl start failed: {start.stderr[-1000:]} {log[-2000:]}")
        import psycopg

        with psycopg.connect(f"postgresql://postgres@127.0.0.1:{self.port}/postgres", autocommit=True) as conn:
            conn.execute("CREATE DATABASE gradebook")
        return f"postgresql://postgres@127.0.0.1:{self.port}/gradebook"

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run(pg_tool("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "-t", "30", "stop")


@pytest.fixture(scope="module")
def postgres():
    if not (pg_tool("initdb") and pg_tool("pg_ctl")):
        _skip("PostgreSQL's initdb/pg_ctl not found (apt-get install postgresql, as root: make test does)")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _skip("the psycopg driver is not installed (pip install -r requirements.txt)")
    if os.geteuid() == 0 and not shutil.which("runuser"):
        _skip("running as root without runuser: cannot start PostgreSQL as the postgres user")
    # not under pytest's tmp_path: its folders are root's alone (0700), and the server runs as postgres
    folder = Path(tempfile.mkdtemp(prefix="looplab-pg-"))
    server = Server(folder)
    try:
        yield server.start()
    finally:
        server.stop()
        running = (server.data / "postmaster.pid").exists()
        shutil.rmtree(folder, ignore_errors=True)
        assert not running, f"the PostgreSQL server in {folder} is still running"


def grade(cli, subs: Path, out: Path, source: Path, db: str) -> subprocess.CompletedProcess:
    """``python -m autograder grade`` into the gradebook at ``db`` (``cli``: the suite's ``autograder_cli``)."""
    return cli("grade", subs, "--out", out, "--source", source, "--db", db, "--timeout-cell", 30, timeout=400)


def counts(url: str) -> dict[str, int]:
    import psycopg

    with psycopg.connect(url) as conn:
        return {table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                for table in ("student", "submitted_assignment", "submitted_notebook", "grade")}


def scores(url: str) -> dict[str, float]:
    from nbgrader.api import Gradebook

    from autograder.course.nbgrader_setup import database_url

    with Gradebook(database_url(url)) as gb:
        return {s.id: gb.find_submission("loop_lab", s.id).score for s in gb.students}


@pytest.mark.slow
def test_grades_go_to_postgresql_and_a_regrade_updates_them(postgres, tmp_path, autograder_cli):
    source = toy.write_source(tmp_path / "source")  # add: a visible test (1 point) and a hidden one (2 points)
    for student, body in {"ann": toy.CORRECT, "bob": toy.STUB, "cy": toy.ONE_MISTAKE}.items():
        toy.write_student(tmp_path / "subs", student, body)
    proc = grade(autograder_cli, tmp_path / "subs", tmp_path / "out", source, postgres)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not (tmp_path / "out" / "gradebook.db").exists()  # it went where --db said
    assert scores(postgres) == {"ann": 3.0, "bob": 0.0, "cy": 1.0}  # cy: the visible test only
    before = counts(postgres)
    assert before == {"student": 3, "submitted_assignment": 3, "submitted_notebook": 3, "grade": 9}

    # bob hands in a fix late; only bob is graded again, into the same gradebook
    toy.write_student(tmp_path / "late", "bob", toy.CORRECT)
    proc = grade(autograder_cli, tmp_path / "late", tmp_path / "out-late", source, postgres)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert scores(postgres) == {"ann": 3.0, "bob": 3.0, "cy": 1.0}  # updated
    assert counts(postgres) == before  # not duplicated
    assert (tmp_path / "out-late" / "grades.csv").read_text().splitlines()[1:] == ["bob,00_toy,3,5"]
