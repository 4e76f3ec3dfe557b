"""The nbgrader course the autograder works in: its one assignment, its configuration, the tools it needs.

Every part of the autograder (the release, grading, a worker's private course folder, the instructor's course in
OUT) builds its nbgrader ``Config`` here, so a setting is written once: :func:`nbgrader_config` for the traitlets,
:func:`prepare_tools` once per process before nbgrader touches a gradebook.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..layout import ASSIGNMENT

# nbgrader's own default for Gradebook(db_url): every gradebook opened without a course id then agrees. It must name
# a row of the course table: PostgreSQL enforces the assignment's foreign key (SQLite let the empty id through).
COURSE_ID = "default_course"


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


def database_url(db_url: str) -> str:
    """``db_url`` with a driver SQLAlchemy can load here: a bare ``postgresql://`` means psycopg2 to SQLAlchemy, and
    this course installs psycopg (3), so it becomes ``postgresql+psycopg://`` when only that one is present."""
    import importlib.util

    if db_url.startswith("postgresql://") and importlib.util.find_spec("psycopg2") is None \
            and importlib.util.find_spec("psycopg") is not None:
        return "postgresql+psycopg://" + db_url[len("postgresql://"):]
    return db_url


def nbgrader_config(root: Path, db_url: str | None = None, student: str | None = None):
    """A traitlets ``Config`` for the course at ``root``: its assignment, its gradebook (default
    ``root/gradebook.db``) and, when given, the one student a converter should work on. Callers add their
    converter's own settings (preprocessors, ``force``) to the object returned."""
    from traitlets.config import Config

    c = Config()
    c.CourseDirectory.root = str(root)
    c.CourseDirectory.course_id = COURSE_ID
    c.CourseDirectory.db_url = db_url or sqlite_url(Path(root) / "gradebook.db")
    c.CourseDirectory.assignment_id = ASSIGNMENT
    if student is not None:
        c.CourseDirectory.student_id = student
    return c


def run_converter(converter_class, config) -> None:
    """Run an nbgrader converter (GenerateAssignment, Autograde, GenerateFeedback) with ``config``."""
    from nbgrader.coursedir import CourseDirectory

    converter_class(coursedir=CourseDirectory(config=config), config=config).start()


def ensure_tools_on_path() -> None:
    """nbgrader runs the ``alembic`` command for its database: make this interpreter's bin folder findable."""
    bin_dir = os.path.dirname(sys.executable)
    if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = os.pathsep.join([bin_dir, os.environ.get("PATH", "")])


def fast_alembic_version() -> None:
    """nbgrader stamps every new gradebook by running the ``alembic heads`` command (~8 s); ask alembic in-process."""
    import nbgrader
    import nbgrader.api
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    if getattr(nbgrader.api.get_alembic_version, "looplab", False):
        return
    cfg = Config()
    cfg.set_main_option("script_location", os.path.join(os.path.dirname(nbgrader.__file__), "alembic"))
    head = ScriptDirectory.from_config(cfg).get_current_head()

    def get_alembic_version() -> str:
        return head

    get_alembic_version.looplab = True
    nbgrader.api.get_alembic_version = get_alembic_version


def prepare_tools() -> None:
    """Once per grading process (the parent, a worker), before nbgrader opens a gradebook."""
    ensure_tools_on_path()
    fast_alembic_version()
