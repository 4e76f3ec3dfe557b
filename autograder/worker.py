"""One grading process: takes (student, notebook) tasks and autogrades each with nbgrader in a private course folder.

Started by :mod:`autograder.grade`, one per ``-j``. Protocol: the first line on stdin is the run's configuration, then
one task per line; one JSON line per task comes back on the original stdout (everything else goes to stderr, which
the parent keeps as a log).

Each task gets its own course folder with a copy of the instructor's gradebook (so workers never share a SQLite file
and a student's notebook never sees the real gradebook), runs ``nbgrader autograde`` with the plug-ins of
:mod:`autograder.execute`, reads the scores back, writes the HTML feedback, and kills whatever the student's code left
running.
"""

from __future__ import annotations

import json
import logging
import os
import re
import select
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

from . import execute, sandbox
from .course import ASSIGNMENT, nbgrader_config, prepare_tools, run_converter, sqlite_url
from .handout import REPO_ROOT, reference_dir, student_labutils_files


class ZygoteError(RuntimeError):
    """The zygote did not answer (it died or hung)."""


class Zygote:
    """Client of :mod:`autograder.zygote`: forks kernels and rechecks on request.

    With ``socket_path`` it connects to the run's shared zygote, which forks a private one for this worker; without,
    it starts a private zygote process (slower: its own imports).
    """

    def __init__(self, socket_path: str | None = None, log_path: Path | None = None, env: dict | None = None,
                 startup_timeout: float = 300):
        started = time.monotonic()
        self.proc = self.sock = None
        if socket_path:
            import socket

            while True:
                try:
                    self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    self.sock.connect(socket_path)
                    break
                except OSError:
                    self.sock.close()
                    if time.monotonic() - started > startup_timeout:
                        raise ZygoteError(f"no zygote at {socket_path} after {startup_timeout} s") from None
                    time.sleep(0.2)
            self.rfile, self.wfile = self.sock.makefile("rb"), self.sock.makefile("wb")
            self.ready = {"ready": True}
        else:
            self.log = open(log_path, "ab")
            self.proc = subprocess.Popen(
                [sys.executable, "-c", "from autograder.zygote import main; main()"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, env=env, start_new_session=True,
            )
            self.rfile, self.wfile = self.proc.stdout, self.proc.stdin
            self.ready = self._read(startup_timeout)
        self.startup_s = time.monotonic() - started
        self.closed = False

    def _read(self, timeout: float | None) -> dict:
        ready, _, _ = select.select([self.rfile.fileno()], [], [], timeout)
        if not ready:
            raise ZygoteError(f"no answer from the zygote within {timeout} s")
        line = self.rfile.readline()
        if not line:
            self.closed = True
            raise ZygoteError("the zygote exited")
        return json.loads(line)

    def request(self, req: dict, timeout: float | None = 60) -> dict:
        try:
            self.wfile.write((json.dumps(req) + "\n").encode())
            self.wfile.flush()
        except OSError as exc:
            self.closed = True
            raise ZygoteError(f"the zygote is gone: {exc}") from None
        return self._read(timeout)

    def alive(self) -> bool:
        return not self.closed and (self.proc is None or self.proc.poll() is None)

    def close(self) -> None:
        try:
            if self.alive():
                self.request({"op": "exit"}, timeout=10)
        except (ZygoteError, OSError):
            pass
        if self.proc is not None:
            if self.proc.poll() is None:
                sandbox.kill_descendants(self.proc.pid)
                self.proc.kill()
            self.proc.wait()
            self.log.close()
        if self.sock is not None:
            self.sock.close()


def base_policy(cfg: dict) -> dict:
    """The sandbox rules every kernel and recheck of this run shares; each adds its own folders."""
    return sandbox.Policy(
        read_dirs=[*sandbox.system_read_dirs(), *cfg["data_dirs"]],
        read_files=[str(p) for p in student_labutils_files()]
        + [str(REPO_ROOT / "autograder" / "__init__.py"), str(REPO_ROOT / "autograder" / "hidden.py")],
        # labutils/ may be listed (a fresh `python` started by the notebook must find its modules); the reference
        # package stays unreadable, and in forks of the zygote it is not even found (zygote.ReferenceBlocker)
        list_dirs=[str(d) for d in [REPO_ROOT / "labutils", *(REPO_ROOT / "labutils").rglob("*")]
                   if d.is_dir() and "__pycache__" not in d.parts and not d.is_relative_to(reference_dir())],
        write_files=["/dev/null"],
        write_dirs=["/dev/shm"],
        memory_mb=cfg.get("memory_mb"),
        cpu_seconds=int(cfg["notebook_timeout"] * 2 + 60),
    ).__dict__


def kernel_env(home: Path, tmp: Path, cfg: dict) -> dict:
    """The environment student code sees: its own HOME and TMPDIR, grading mode, the data, nothing else."""
    env = {
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "PATH": os.pathsep.join([os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin"]),
        "LANG": "C.UTF-8",
        "LAB_MODE": "grade",
        "NBGRADER_EXECUTION": "autograde",
        "LOOPLAB_HIDDEN_TESTS": "external",
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",
        "LAB_CACHE_DIR": cfg["cache_dir"],
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
    }
    if os.environ.get("LAB_DATA_DIR"):
        env["LAB_DATA_DIR"] = os.environ["LAB_DATA_DIR"]
    return env


class _ErrorLog(logging.Handler):
    def __init__(self):
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def _autograde(course: Path, student: str, cfg: dict) -> None:
    from nbconvert.preprocessors import ClearMetadataPreprocessor
    from nbgrader.converters import Autograde
    from nbgrader.preprocessors import (AssignLatePenalties, CheckCellMetadata, ClearOutput, DeduplicateIds,
                                        IgnorePattern, LimitOutput, OverwriteKernelspec, SaveAutoGrades)

    c = nbgrader_config(course, student=student)
    c.Autograde.sanitize_preprocessors = [
        execute.NormalizeMetadata, ClearOutput, DeduplicateIds, OverwriteKernelspec, execute.RestoreCells, CheckCellMetadata,
    ]
    c.Autograde.autograde_preprocessors = [
        execute.SandboxedExecute, IgnorePattern, ClearMetadataPreprocessor, LimitOutput, SaveAutoGrades,
        AssignLatePenalties, CheckCellMetadata,
    ]
    c.SandboxedExecute.timeout = int(cfg["cell_timeout"])
    c.SandboxedExecute.notebook_timeout = int(cfg["notebook_timeout"])
    c.SandboxedExecute.startup_timeout = 120
    run_converter(Autograde, c)


def _feedback(course: Path, student: str) -> None:
    from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
    from nbgrader.converters import GenerateFeedback
    from nbgrader.preprocessors import GetGrades

    c = nbgrader_config(course, student=student)
    c.GenerateFeedback.preprocessors = [execute.ScrubHiddenTests, GetGrades, CSSHTMLHeaderPreprocessor]
    run_converter(GenerateFeedback, c)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def failure_message(outputs: list) -> str:
    """A test cell's errors as a student should read them: the check's message, or the failing line if it has none."""
    errors = [o for o in outputs if o.get("output_type") == "error"]
    if any(o.get("ename") == "CellTimeoutError" for o in errors):
        errors = [o for o in errors if o.get("ename") != "KeyboardInterrupt"]  # the interrupt is how it stopped
    parts = []
    for o in errors:
        text = str(o.get("evalue") or "").strip()
        if not text:
            lines = [_ANSI.sub("", l) for l in o.get("traceback", [])]
            failing = [l for chunk in lines for l in chunk.splitlines() if l.lstrip().startswith("---->")]
            line = re.sub(r"^\s*\d+\s*", "", failing[-1].split("---->", 1)[1]) if failing else ""
            text = f"failed at: {line.strip()}" if line.strip() else "(no message)"
        parts.append(f"{o.get('ename')}: {text}")
    return "\n".join(parts)


def _read_grades(course: Path, student: str, notebook: str) -> list[dict]:
    """Every test of the notebook in cell order: name, points, max_points, passed, message (from the outputs)."""
    import nbformat
    from nbgrader.api import Gradebook

    autograded = course / "autograded" / student / ASSIGNMENT / f"{notebook}.ipynb"
    messages: dict[str, str] = {}
    if autograded.exists():
        nb = nbformat.read(autograded, as_version=4)
        for cell in nb.cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
            if grade_id and cell.cell_type == "code":
                messages[grade_id] = failure_message(cell.get("outputs", []))
    with Gradebook(sqlite_url(course / "gradebook.db")) as gb:
        source_nb = gb.find_notebook(notebook, ASSIGNMENT)
        order = [c.name for c in source_nb.source_cells]
        written = {c.name for c in source_nb.solution_cells}  # graded and answered by the student: graded by hand
        submission = gb.find_submission_notebook(notebook, ASSIGNMENT, student)
        tests = []
        for grade in submission.grades:
            points = float(grade.score or 0.0)
            tests.append({
                "name": grade.name,
                "kind": "manual" if grade.name in written else "auto",
                "points": points,
                "max_points": float(grade.max_score),
                "passed": points >= float(grade.max_score) and not grade.needs_manual_grade,
                "auto_score": grade.auto_score,
                "needs_manual_grade": bool(grade.needs_manual_grade),
                "message": messages.get(grade.name, ""),
            })
    tests.sort(key=lambda t: order.index(t["name"]) if t["name"] in order else len(order))
    return tests


def grade_task(task: dict, cfg: dict, zygote: Zygote) -> dict:
    """Autograde one student's notebook; returns its scores, messages, notes and timings."""
    started = time.monotonic()
    student, notebook = task["student"], task["notebook"]
    task_dir = Path(cfg["work_dir"]) / "tasks" / task["id"]
    shutil.rmtree(task_dir, ignore_errors=True)
    course = task_dir / "course"
    submitted = course / "submitted" / student / ASSIGNMENT
    submitted.mkdir(parents=True)
    (course / "source" / ASSIGNMENT).mkdir(parents=True)
    shutil.copyfile(task["path"], submitted / f"{notebook}.ipynb")
    for extra in task.get("extra_files", []):
        target = submitted / extra["name"]
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(extra["path"], target)
    shutil.copyfile(cfg["template_db"], course / "gradebook.db")
    home, tmp = task_dir / "home", task_dir / "tmp"
    home.mkdir()
    tmp.mkdir()
    policy = base_policy(cfg)
    policy["write_dirs"] = [*policy["write_dirs"], str(home), str(tmp)]
    ctx = execute.TaskContext(zygote=zygote, task_dir=task_dir, kernel_env=kernel_env(home, tmp, cfg), policy=policy,
                              threads=int(cfg.get("threads", 1)), notebook_timeout=int(cfg["notebook_timeout"]))
    execute.CONTEXT = ctx
    errors = _ErrorLog()
    logging.getLogger().addHandler(errors)
    result = {"id": task["id"], "student": student, "notebook": notebook, "status": "graded", "notes": ctx.notes}
    try:
        t0 = time.monotonic()
        _autograde(course, student, cfg)
        ctx.timings["autograde_s"] = round(time.monotonic() - t0, 2)
        result["tests"] = _read_grades(course, student, notebook)
        try:
            t0 = time.monotonic()
            _feedback(course, student)
            ctx.timings["feedback_s"] = round(time.monotonic() - t0, 2)
            html = course / "feedback" / student / ASSIGNMENT / f"{notebook}.html"
            result["feedback"] = str(html) if html.exists() else None
        except Exception as exc:  # feedback is a courtesy; the grade stands without it
            result["notes"].append(f"feedback could not be written: {type(exc).__name__}: {exc}")
        result["autograded"] = str(course / "autograded" / student / ASSIGNMENT / f"{notebook}.ipynb")
    except Exception as exc:
        result["status"] = "error"
        detail = errors.messages[-1] if errors.messages else ""
        result["error"] = ctx.fatal or (f"{type(exc).__name__}: {exc}"
                                        + (f" ({detail.splitlines()[-1]})" if detail else ""))
        result["traceback"] = traceback.format_exc() + "\n".join(errors.messages[-5:])
    finally:
        logging.getLogger().removeHandler(errors)
        execute.CONTEXT = None
        try:
            killed = zygote.request({"op": "killall"}, timeout=30).get("killed", 0)
            if killed:
                result["notes"].append(f"{killed} process(es) left running by the notebook were stopped")
        except ZygoteError as exc:
            result["notes"].append(f"grader: {exc}")
    result["timings"] = dict(ctx.timings, total_s=round(time.monotonic() - started, 2))
    result["rechecks"] = ctx.rechecks
    return result


def start_zygote(cfg: dict) -> Zygote:
    if cfg.get("zygote_socket"):
        try:
            return Zygote(socket_path=cfg["zygote_socket"], startup_timeout=60)
        except ZygoteError as exc:
            print(f"worker: shared zygote unavailable ({exc}); starting a private one", file=sys.stderr)
    work = Path(cfg["work_dir"])
    home = work / f"zygote-home-{os.getpid()}"
    home.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, HOME=str(home), MPLCONFIGDIR=str(home / "mpl"),
               MPLBACKEND="module://matplotlib_inline.backend_inline", LAB_MODE="grade")
    return Zygote(log_path=work / f"zygote-{os.getpid()}.log", env=env)


def main() -> None:
    results = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")
    import nbgrader.converters  # noqa: F401  (import while the parent is still preparing: the cfg comes later)
    import nbgrader.preprocessors  # noqa: F401

    line = sys.stdin.readline()
    if not line:
        return  # the parent had nothing for us
    cfg = json.loads(line)
    prepare_tools()
    os.environ["JUPYTER_RUNTIME_DIR"] = str(Path(cfg["work_dir"]) / f"runtime-{os.getpid()}")
    zygote = start_zygote(cfg)
    results.write(json.dumps({"ready": True, "zygote_s": round(zygote.startup_s, 2)}) + "\n")
    for line in sys.stdin:
        task = json.loads(line)
        if not zygote.alive():
            zygote.close()
            zygote = start_zygote(cfg)
        try:
            result = grade_task(task, cfg, zygote)
        except Exception as exc:
            result = {"id": task.get("id"), "student": task.get("student"), "notebook": task.get("notebook"),
                      "status": "error", "error": f"{type(exc).__name__}: {exc}", "notes": [],
                      "traceback": traceback.format_exc()}
        results.write(json.dumps(result) + "\n")
    zygote.close()


if __name__ == "__main__":
    main()
