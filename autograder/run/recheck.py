"""The hidden tests, judged outside the kernel: the preprocessor after :class:`.execute.SandboxedExecute`.

Under the grader a hidden test cell only notes that it must be judged. Once the notebook has run, this asks the
zygote for a recheck (:mod:`autograder.hidden.recheck`: a fresh sandboxed fork that re-runs the student's cells on
pristine imports and judges each hidden test in a process no student code ran in), per the plan of
:mod:`autograder.hidden.plan` (the graded cells with hidden checks, read from the gradebook, never from the
submission). A failure there of a test that passed inside the kernel is appended to the test cell as an error, and
every test's verdict (the judge's, as data) is kept in the task's context for its score.
"""

from __future__ import annotations

import dataclasses
import time

from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets import Integer

from autograder import channel
from autograder.channel import RecheckReply, RecheckRequest, RecheckSpec
from autograder.course.cells import gradebook_notebook
from autograder.hidden import plan as recheck_plan
from autograder.sandbox.context import current as _context

from .execute import _error, _memory_short, _task_limit


class HiddenRecheck(NbGraderPreprocessor):
    """Judge the notebook's hidden tests in a recheck forked from the zygote (see the module docstring)."""

    cell_timeout = Integer(60, help="seconds per re-run cell, as in the kernel").tag(config=True)
    notebook_timeout = Integer(300, help="seconds for the whole recheck").tag(config=True)

    def preprocess(self, nb, resources):
        ctx = _context()
        the_plan = recheck_plan.plan(nb.cells, _gradebook_sources(resources), ctx.timed_out, ctx.stopped_at)
        if the_plan is not None:
            started = time.monotonic()
            reply = self._ask_zygote(ctx, the_plan)
            ctx.timings["recheck_s"] = round(time.monotonic() - started, 2)
            if reply.oom_killed and ctx.memory_short:
                raise _memory_short(ctx, "the hidden tests' re-run")
            self._keep_verdicts(nb, ctx, the_plan, reply)
        return nb, resources

    def _ask_zygote(self, ctx, the_plan) -> RecheckReply:
        """The recheck's reply: one verdict line per hidden test, in its own folders."""
        work = ctx.task_dir / "recheck"
        for sub in ("cwd", "home", "tmp"):
            (work / sub).mkdir(parents=True, exist_ok=True)
        spec_path = work / "spec.json"
        spec_path.write_bytes(channel.encode(RecheckSpec(cells=the_plan.cells, cell_timeout=self.cell_timeout)))
        env = dict(ctx.kernel_env, HOME=str(work / "home"), TMPDIR=str(work / "tmp"), MPLBACKEND="Agg")
        own = [str(work / "cwd"), str(work / "home"), str(work / "tmp")]
        policy = dataclasses.replace(ctx.policy, write_dirs=own, own_paths=[*own, str(spec_path)],
                                     read_files=[*ctx.policy.read_files, str(spec_path)])
        return ctx.zygote.request(RecheckRequest(
            spec=str(spec_path), cwd=str(work / "cwd"), env=env, policy=policy, log=str(work / "recheck.log"),
            timeout=self.notebook_timeout, threads=ctx.threads,
        ), RecheckReply, timeout=self.notebook_timeout + 30)

    def _keep_verdicts(self, nb, ctx, the_plan, reply: RecheckReply) -> None:
        """Each test's verdict into the task's context; a failure the kernel did not show, under its cell."""
        why = (f"did not finish within {self.notebook_timeout} s" if reply.status == "timeout" else
               f"ran out of memory (a notebook may hold {_task_limit(ctx)} MB here)" if reply.oom_killed
               else "stopped before it finished (the re-run of the notebook's cells exited or crashed)")
        for index, outcome in the_plan.outcomes(reply.lines, why):
            kept = ctx.verdicts.get(outcome.grade_id)
            if kept is None or kept.passed:  # a cell's verdict: its first failing check's, else its last one's
                ctx.verdicts[outcome.grade_id] = outcome.verdict
            if not outcome.verdict.passed and index not in the_plan.failed_in_kernel:
                nb.cells[index].outputs.append(_error("AssertionError", outcome.verdict.message))


def _gradebook_sources(resources) -> dict[str, str]:
    """grade_id -> source of every source cell of this notebook, from the gradebook (never from the submission)."""
    with gradebook_notebook(resources) as notebook:
        return {} if notebook is None else {cell.name: cell.source for cell in notebook.source_cells}
