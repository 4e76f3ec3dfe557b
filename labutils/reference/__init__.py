"""The instructor's side of labutils: the answers the lab asks students to write, and the tools that run them.

- ``loop``: the reference training loop (every step of the lab in the canonical order);
- ``checkpoint``: atomic, verified, complete checkpoints and the fallback to the newest valid one (lab 6's answer);
- ``optim``: AdamW with parameter groups without decay (lab 8's answer), OneCycle and warmup + cosine schedules;
- ``resume``: the crash-and-resume harness (reference run, crashing run, resumed run, tensor-by-tensor comparison);
- ``pipeline``: the notebooks' stages run with the reference loop (``python -m labutils reference``);
- ``sequence``: ``make lab``, the solution notebooks executed in full mode;
- ``cli``: ``python -m labutils``.

The student handout (``python -m autograder handout``) leaves this folder out as a whole, and a student's code cannot
import it while it is graded. What the rest of labutils ships on purpose is listed in the README ("What the handout
holds").
"""
