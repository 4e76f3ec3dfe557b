"""``python -m labutils``: train, crash-resume, lab (the notebooks), reference (the CLI pipeline) and data.

Every ``train`` flag is generated from :class:`~labutils.config.LabConfig`, so the CLI, the config printed at the
start of a run and the config stored in each checkpoint can never disagree.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from ..config import LabConfig
from .sequence import CELL_TIMEOUT_S

_CONVERTERS = {"int": int, "float": float, "str": str}


def _add_config_flags(parser: argparse.ArgumentParser) -> None:
    for f in dataclasses.fields(LabConfig):
        flag = "--" + f.name.replace("_", "-")
        kind = f.type.replace(" | None", "")
        help_text = f"{f.metadata.get('help', '')} (default: {f.default!r})"
        if kind == "bool":
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=f.default, help=help_text)
        else:
            parser.add_argument(flag, type=_optional(_CONVERTERS[kind]), default=f.default, help=help_text,
                                metavar=kind.upper())


def _optional(convert):
    """Accept ``none`` for the optional knobs (``--max-norm none`` turns clipping off)."""

    def parse(text: str):
        return None if text.lower() == "none" else convert(text)

    parse.__name__ = convert.__name__  # argparse names the type in its error messages
    return parse


def _config_from(args: argparse.Namespace) -> LabConfig:
    return LabConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(LabConfig)})


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m labutils", description="Loop Lab reference training loop")
    commands = parser.add_subparsers(dest="command", required=True)

    train = commands.add_parser("train", help="train SmallCNN on FashionMNIST with the reference loop")
    _add_config_flags(train)

    crash = commands.add_parser("crash-resume", help="crash a run with os._exit(1), resume it, compare with a "
                                                     "run that never stopped")
    crash.add_argument("--out", required=True, help="folder for logs, checkpoints and resume_curve.png")
    crash.add_argument("--subset", type=int, default=None, help="training images to use (default: all)")
    crash.add_argument("--epochs", type=int, default=None, help="default: lab 7's")
    crash.add_argument("--crash-at-step", type=int, default=None,
                       help="default: the middle of the last epoch, between two checkpoints")
    crash.add_argument("--save-every", type=int, default=None, help="default: about 4 checkpoints per epoch")
    crash.add_argument("--seed", type=int, default=0)

    lab = commands.add_parser("lab", help="execute the solution notebooks in order and collect their plots and "
                                          "numbers into --out (what `make lab` runs)")
    lab.add_argument("--out", default="artifacts")
    lab.add_argument("--mode", choices=("full", "smoke"), default="full", help="smoke: a subset and one short epoch")
    lab.add_argument("--cell-timeout", type=float, default=CELL_TIMEOUT_S, metavar="SECONDS",
                     help=f"stop a notebook whose cell runs longer (default {CELL_TIMEOUT_S} s; 0: no limit)")
    lab.add_argument("notebooks", nargs="*", help="notebook ids to run (default: all, in order)")

    reference = commands.add_parser("reference", help="run the reference loop stage by stage (baseline -> ... -> "
                                                      "crash/resume) through the CLI into --out")
    reference.add_argument("--out", default="artifacts/reference")
    reference.add_argument("--subset", type=int, default=None, help="smoke run on N training images")
    reference.add_argument("--epochs", type=int, default=None, help="epochs per stage (default: each notebook's own)")

    commands.add_parser("data", help="make sure FashionMNIST is present (and say where it came from)")
    return parser


def _run_train(args) -> int:
    from .loop import fit, summarize

    cfg = _config_from(args)
    print("effective config:\n" + cfg.describe(), flush=True)
    result = fit(cfg)
    print("summary:\n" + summarize(result))
    return 0


def _run_crash_resume(args) -> int:
    from .resume import crash_and_resume, crash_plan

    try:
        cfg, crash_at = crash_plan(args.subset, args.epochs, args.seed, args.save_every, args.crash_at_step)
    except ValueError as exc:
        sys.exit(f"--crash-at-step: {exc}")
    print("effective config:\n" + cfg.describe(), flush=True)
    report = crash_and_resume(cfg, args.out, crash_at)
    print(f"crashed after step {report.crash_step}, resumed from the checkpoint at step {report.resume_step}")
    print(f"merged log: {report.merged_log}\nresume curve: {report.curve}")
    resumed_right = report.resume_step == report.expected_resume_step
    if not resumed_right:
        print(f"error: expected to resume from step {report.expected_resume_step}, the last checkpoint before the "
              "crash")
    for where in report.differences:
        print(f"differs: {where}")
    print(f"bit-identical: {str(report.bit_identical).lower()}")
    return 0 if report.bit_identical and resumed_right else 1


def _run_lab(args) -> int:
    from .sequence import run_sequence

    try:
        run_sequence(args.out, mode=args.mode, notebooks=args.notebooks, cell_timeout=args.cell_timeout or None)
    except RuntimeError as exc:  # a notebook failed: say which, point at the executed copy
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _run_reference(args) -> int:
    from .pipeline import run_pipeline

    run_pipeline(args.out, subset=args.subset, epochs=args.epochs)
    return 0


def _run_data(args) -> int:
    from ..data import DataMissingError, ensure_data, origin

    try:
        ensure_data()
        print(origin())
    except DataMissingError as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handlers = {"train": _run_train, "crash-resume": _run_crash_resume, "lab": _run_lab, "reference": _run_reference,
                "data": _run_data}
    try:
        return handlers[args.command](args)
    except ValueError as exc:  # bad config values: one clear line, not a traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2
