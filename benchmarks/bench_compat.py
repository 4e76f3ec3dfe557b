"""The lab on another torch (the oldest supported, or any release on the registry) against the pinned set; and
Colab, simulated.

    .venv/bin/python benchmarks/bench_compat.py [--torch 2.15.0] [--work ~/.cache/loop_lab/compat] [--skip-notebooks]
                                                [--skip-colab]

Not part of ``make test``: it downloads torch wheels from the package registry (about 3 GB per torch and Python
version; they are kept in ``WORK/wheels`` for the next run). ``--torch`` defaults to the floor of pyproject.toml's
``dependencies``, where it is written once; the Python is the newest supported, the last minor version below
``requires-python``'s upper bound, found with pyenv. Every pip command in its virtualenvs holds torch at that version
with a constraint of its own, in place of a pip configuration's (a machine-wide cap would refuse a new release).

1. **The torch you already have.** A virtualenv of that Python with that torch alone installed first (and
   ``--torchvision``, when given), then the handout's README's commands for that way, as written: pip must keep torch
   and add a torchvision that goes with it, and every import of every notebook must then resolve. Then ``pip install -e .`` of the course (torch kept
   again) and what runs the notebooks (nbclient, ipykernel, nbgrader for the hidden-test cells) at the course's pins.
2. **The check corpus** (``tests/mutants``, ``tests/stubs``) there and on the pinned torch (this interpreter): every
   variant's failed checks in order and every stub's earned properties, compared.
3. **Notebooks 00-08 in smoke mode** there and here (``python -m labutils lab --mode smoke``): each one's wall time,
   and the warnings in its outputs.
4. **Colab, simulated** (``--skip-colab`` to leave out): a Python 3.12 virtualenv with that torch and the torchvision
   step 1 found installed first, the handout's "On Colab" commands as its README writes them (``!`` as a shell,
   ``%pip`` as that Python's pip, ``%env`` as a variable), then notebook 00 (a solved copy: the solution without its
   hidden tests) run by nbclient in memory, from another working folder, with ``LAB_DATA_DIR`` pointing at the four
   ``.gz`` files and a fresh ``LAB_CACHE_DIR``: no notebook path, no Debian path.

``--python 3.10`` runs the same on another Python (the oldest supported, say). Prints a markdown table and writes it
to ``WORK/result-pyX.Y-torchV.md``. Exits 1 when a verdict differs or a step fails; when nothing does, the release
may join ``labutils/versions.py``'s ``CHECKED``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYENV_ROOT = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
COLAB_PYTHON = "3.12"  # Colab's Python in 2026
NOTEBOOK_RUNNER = ("numpy", "matplotlib", "tqdm", "ipywidgets", "packaging", "nbgrader", "nbclient", "nbformat",
                   "nbconvert", "ipykernel", "accelerate")  # the course's pins of these, for the notebooks


# --- what the range is ------------------------------------------------------------------------------------------------


def project() -> dict:
    import tomllib  # here: the --verdicts half also runs on Python 3.10, which has none

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def floor(name: str) -> str:
    """The ``>=`` version of ``name`` in pyproject's dependencies (``torch>=2.6,<2.15`` -> ``2.6``)."""
    for dep in project()["dependencies"]:
        match = re.fullmatch(rf"{name}\s*>=\s*([\d.]+)(,.*)?", dep)
        if match:
            return match.group(1)
    sys.exit(f"pyproject.toml gives no floor for {name}")


def newest_python() -> str:
    """``>=3.10,<3.14`` -> ``3.13``."""
    match = re.search(r"<\s*3\.(\d+)", project()["requires-python"])
    if not match:
        sys.exit("pyproject.toml's requires-python has no upper bound: the newest supported Python is unknown")
    return f"3.{int(match.group(1)) - 1}"


def pyenv_python(minor: str) -> Path:
    found = sorted(PYENV_ROOT.glob(f"versions/{minor}.*/bin/python{minor}"))
    if not found:
        sys.exit(f"no Python {minor} under {PYENV_ROOT}/versions: pyenv install {minor}")
    return found[-1]


def pins() -> dict[str, str]:
    lines = [line.strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    return dict(line.split("==") for line in lines if line and not line.startswith("#"))


def exact(version: str) -> str:
    """``2.6`` -> ``2.6.0``: the first release of a floor."""
    return version if version.count(".") >= 2 else version + ".0"


# --- virtualenvs ----------------------------------------------------------------------------------------------------


def run(cmd, log: Path, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    with log.open("a") as f:
        f.write(f"$ {' '.join(map(str, cmd))}\n{proc.stdout}{proc.stderr}\n")
    if proc.returncode:
        sys.exit(f"failed ({proc.returncode}): {' '.join(map(str, cmd))}\n{proc.stderr[-3000:]}\nlog: {log}")
    return proc


def size_mb(path: Path) -> int:
    return int(subprocess.run(["du", "-sm", str(path)], capture_output=True, text=True).stdout.split()[0])


def pip_env(work: Path, torch_v: str, env: dict | None = None) -> dict:
    """The environment of every pip command in a virtualenv of this benchmark: a constraint that holds torch at the
    version under test, in place of a pip configuration's own (a machine-wide cap such as /etc/xdg/pip's)."""
    constraints = work / f"constraints-torch{torch_v}.txt"
    constraints.write_text(f"torch=={torch_v}\n")
    return {**(env or os.environ), "PIP_CONSTRAINT": str(constraints)}


def torch_venv(work: Path, minor: str, torch_v: str, vision_v: str | None, log: Path) -> tuple[Path, dict]:
    """A virtualenv with torch (and torchvision, when given) installed first (wheels downloaded once into
    WORK/wheels)."""
    venv = work / (f"py{minor}-torch{torch_v}" + ("" if vision_v is None else f"-vision{vision_v}"))
    py = venv / "bin" / "python"
    info = {"python": minor, "torch": torch_v}
    wheels = work / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    wanted = [f"torch=={torch_v}", *([f"torchvision=={vision_v}"] if vision_v else [])]
    env = pip_env(work, torch_v)
    started = time.perf_counter()
    if not (venv / ".torch-installed").exists():
        shutil.rmtree(venv, ignore_errors=True)
        run([pyenv_python(minor), "-m", "venv", venv], log)
        run([py, "-m", "pip", "download", "-q", "-d", wheels, *wanted], log, env=env)
        run([py, "-m", "pip", "install", "-q", "--find-links", wheels, *wanted], log, env=env)
        (venv / ".torch-installed").write_text(json.dumps({"torch_install_s": round(time.perf_counter() - started),
                                                           "torch_venv_mb": size_mb(venv)}))
    info.update(json.loads((venv / ".torch-installed").read_text() or "{}"))  # measured when torch went in
    return venv, info


def version_of(py: Path, name: str) -> str | None:
    proc = subprocess.run([py, "-c", f"import importlib.metadata as m; print(m.version({name!r}))"],
                          capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else None


def torch_version(py: Path) -> str:
    return version_of(py, "torch")


def own_torch_way(work: Path, venv: Path, log: Path, info: dict) -> None:
    """The handout README's "torch you already have" commands, as written, in the handout's folder with ``venv``'s
    Python first on PATH: torch must stay, and every notebook's imports must then resolve (handout.RESOLVE_IMPORTS)."""
    sys.path.insert(0, str(ROOT))
    from autograder.course import handout

    py = venv / "bin" / "python"
    before = torch_version(py)
    folder = Path(tempfile.mkdtemp(prefix="own-torch-", dir=work))
    handout.build_handout(folder / "loop-lab.zip")
    with zipfile.ZipFile(folder / "loop-lab.zip") as zf:
        zf.extractall(folder)
    unpacked = folder / handout.HANDOUT_DIR
    readme = (unpacked / "README.md").read_text().split(f"## {handout.SETUP_OWN}", 1)[1].split("\n## ", 1)[0]
    commands = [re.sub(r"\s+#.*$", "", line.strip()) for line in readme.splitlines() if line.startswith("    ")]
    env = pip_env(work, before, {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}",
                                 "VIRTUAL_ENV": str(venv)})
    started = time.perf_counter()
    installed = []
    for command in commands:  # the way itself, then adding Jupyter (a fresh environment has none)
        proc = run(["bash", "-c", command], log, cwd=unpacked, env=env)
        installed += [line.removeprefix("Successfully installed ") for line in proc.stdout.splitlines()
                      if line.startswith("Successfully installed")]
    info["own_torch_install_s"] = round(time.perf_counter() - started)
    info["own_torch_kept_torch"] = torch_version(py) == before
    info["torchvision"] = version_of(py, "torchvision")
    info["own_torch_installed"] = " ".join(installed)
    if not info["own_torch_kept_torch"]:
        sys.exit(f"the handout's way for your own torch replaced torch {before}: {installed}")
    proc = subprocess.run([py, "-c", handout.RESOLVE_IMPORTS, json.dumps(handout.imports())],
                          cwd=unpacked / "notebooks", env=env, capture_output=True, text=True)
    with log.open("a") as f:
        f.write(proc.stdout + proc.stderr)
    info["own_torch_imports"] = ("all resolve" if proc.returncode == 0
                                 else f"FAILED: {proc.stdout[-800:]}{proc.stderr[-400:]}")
    info["own_torch_nbconvert"] = nbconvert_00(unpacked / "notebooks", {**env, "LAB_MODE": "smoke"}, log)
    shutil.rmtree(folder, ignore_errors=True)


def nbconvert_00(folder: Path, env: dict, log: Path) -> str:
    """Notebook 00, solved, run by ``jupyter nbconvert --execute`` as a student's own check would run it: "clean",
    or the errors and the warnings in its outputs and on the terminal."""
    import nbformat

    sys.path.insert(0, str(ROOT / "tests"))
    from test_notebooks import unintended_warnings

    nbformat.write(solved(ROOT / "solutions" / "loop_lab" / "00_data_tour.ipynb"), folder / "solved_00.ipynb")
    started = time.perf_counter()
    proc = subprocess.run(["jupyter", "nbconvert", "--to", "notebook", "--execute", "solved_00.ipynb", "--output",
                           "executed_00.ipynb"], cwd=folder, env=env, capture_output=True, text=True)
    seconds = round(time.perf_counter() - started)
    with log.open("a") as f:
        f.write(proc.stdout + proc.stderr)
    if proc.returncode:
        return f"FAILED: {proc.stderr[-600:]}"
    out = nbformat.read(folder / "executed_00.ipynb", as_version=4)
    errors = [o.get("ename") for c in out.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    terminal = [line for line in proc.stderr.splitlines() if "WARNING" in line or "Warning" in line]
    problems = errors + unintended_warnings(out) + terminal
    return f"clean, {seconds} s" if not problems else f"FAILED: {problems}"


def install_course(work: Path, venv: Path, log: Path, info: dict) -> None:
    """``pip install -e .`` on the torch already there (it must stay), then the notebook runner at the course's pins."""
    py = venv / "bin" / "python"
    before = torch_version(py)
    env = pip_env(work, before)
    proc = run([py, "-m", "pip", "install", "-e", ROOT], log, env=env)
    installed = " ".join(line for line in proc.stdout.splitlines() if line.startswith("Successfully installed"))
    if torch_version(py) != before or re.search(r"\btorch-", installed):
        sys.exit(f"pip install . replaced torch {before}: {installed}")
    info["pip_install_kept_torch"] = True
    wanted = [f"{name}=={version}" for name, version in pins().items() if name in NOTEBOOK_RUNNER]
    pinned = subprocess.run([py, "-m", "pip", "install", "-q", *wanted], capture_output=True, text=True, env=env)
    with log.open("a") as f:
        f.write(pinned.stdout + pinned.stderr)
    info["runner"] = "the course's pins"
    if pinned.returncode:  # numpy 2.4 and matplotlib 3.11 need Python 3.11: the newest this Python has instead
        run([py, "-m", "pip", "install", "-q", *NOTEBOOK_RUNNER], log, env=env)
        info["runner"] = "unpinned: the course's pins need a newer Python"
    info["venv_mb"] = size_mb(venv)


# --- the check corpus -----------------------------------------------------------------------------------------------


def verdicts() -> dict:
    """Every mutant's and correct variant's failed checks in order, every stub's earned properties."""
    sys.path.insert(0, str(ROOT / "tests"))
    import mutants
    import stubs
    import torch

    from labutils.checks import properties

    out = {"torch": torch.__version__, "python": sys.version.split()[0], "variants": {}, "stubs": {}}
    started = time.perf_counter()
    for variant in mutants.VARIANTS:
        report = mutants.run_check(variant)
        out["variants"][variant.name] = {"passed": report.passed, "failures": [f.check for f in report.failures]}
    for stub in [*stubs.DO_NOTHING, *stubs.PARTIAL]:
        report = stubs.run_check(stub)
        out["stubs"][stub.name] = sorted(p for p, verdict in properties.verdicts(stub.exercise, report).items()
                                         if verdict.passed)
    out["seconds"] = round(time.perf_counter() - started, 1)
    return out


def corpus(py: Path, out: Path, log: Path) -> dict:
    run([py, __file__, "--verdicts", out], log, cwd=ROOT)
    return json.loads(out.read_text())


def differences(a: dict, b: dict) -> list[str]:
    diff = []
    for kind in ("variants", "stubs"):
        for name in sorted(set(a[kind]) | set(b[kind])):
            if a[kind].get(name) != b[kind].get(name):
                diff.append(f"{name}: {a[kind].get(name)} vs {b[kind].get(name)}")
    return diff


# --- notebooks ------------------------------------------------------------------------------------------------------


def notebooks(venv: Path, out: Path, log: Path) -> dict:
    """Each solution notebook in smoke mode, one ``python -m labutils lab`` each (a failure hides no other one), and
    the warnings in its outputs."""
    import nbformat

    sys.path.insert(0, str(ROOT / "tests"))
    from test_notebooks import unintended_warnings

    py = venv / "bin" / "python"
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "VIRTUAL_ENV": str(venv)}
    env.pop("LAB_ARTIFACTS", None)
    result = {"ok": True, "seconds": 0, "rows": [], "tail": ""}
    for path in sorted((ROOT / "solutions" / "loop_lab").glob("*.ipynb")):
        started = time.perf_counter()
        proc = subprocess.run([py, "-m", "labutils", "lab", "--mode", "smoke", "--out", out / path.stem, path.stem],
                              cwd=ROOT, env=env, capture_output=True, text=True)
        with log.open("a") as f:
            f.write(proc.stdout + proc.stderr)
        result["seconds"] += round(time.perf_counter() - started)
        summary = out / path.stem / "summary.json"
        if proc.returncode or not summary.exists():
            result["ok"] = False
            result["rows"].append({"notebook": path.stem, "wall_seconds": time.perf_counter() - started,
                                   "failed": True})
            result["tail"] += f"{path.stem}: {(proc.stdout + proc.stderr)[-600:]}\n"
        else:
            result["rows"] += json.loads(summary.read_text())["notebooks"]
        executed = out / path.stem / "notebooks" / path.name
        if executed.exists():  # a warning one torch prints and the other does not (a deprecation) counts too
            result["rows"][-1]["warnings"] = unintended_warnings(nbformat.read(executed, as_version=4))
            result["ok"] = result["ok"] and not result["rows"][-1]["warnings"]
    return result


# --- Colab ----------------------------------------------------------------------------------------------------------


def solved(notebook: Path):
    """The solution notebook as a student who solved it has it: the hidden tests' blocks removed."""
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    for cell in nb.cells:
        cell.source = re.sub(r"[ \t]*### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS[ \t]*\n?", "", cell.source,
                             flags=re.S)
    return nb


def colab(work: Path, log: Path, torch_v: str, vision_v: str) -> dict:
    sys.path.insert(0, str(ROOT))
    from autograder.course import handout
    from labutils import data, data_files

    venv, info = torch_venv(work, COLAB_PYTHON, torch_v, vision_v, log)
    py = venv / "bin" / "python"
    content = Path(tempfile.mkdtemp(prefix="colab-content-"))  # Colab's /content: the runtime's working folder
    handout.build_handout(content / "loop-lab.zip")
    uploaded = content / "fashion-mnist"  # the student uploaded the four .gz files here
    uploaded.mkdir()
    for name in data_files.RAW_FILES:
        shutil.copyfile(data.find_raw_dir() / name, uploaded / name)
    env = pip_env(work, torch_v, {**os.environ, "PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(content / "root"),
                                  "LAB_DATA_DIR": str(uploaded),
                                  "LAB_CACHE_DIR": str(content / "root" / ".cache" / "loop_lab")})
    for key in ("LAB_ARTIFACTS", "LAB_MODE", "NBGRADER_EXECUTION", "PYTHONPATH"):
        env.pop(key, None)
    before = torch_version(py)
    started = time.perf_counter()
    with zipfile.ZipFile(content / "loop-lab.zip") as zf:
        text = zf.read(f"{handout.HANDOUT_DIR}/README.md").decode()
    section = text.split(f"## {handout.COLAB}", 1)[1].split("\n## ", 1)[0]
    commands = [re.sub(r"\s+#.*$", "", line.strip()) for line in section.splitlines() if line.startswith("    ")]
    for command in commands:
        if command.startswith("!"):
            run(["bash", "-c", command[1:]], log, cwd=content, env=env)
        elif command.startswith("%pip "):
            run([py, "-m", "pip", *command.split()[1:]], log, cwd=content, env=env)
        elif command.startswith("%env "):
            key, value = command.split(None, 1)[1].split("=", 1)
            env[key] = value
        else:
            sys.exit(f"a Colab command this simulation does not know: {command}")
    info["colab_install_s"] = round(time.perf_counter() - started)
    info["colab_kept_torch"] = torch_version(py) == before
    runner = content / "run_notebook.py"  # nbclient from that venv: it needs nbclient, which Colab has
    run([py, "-m", "pip", "install", "-q", f"nbclient=={pins()['nbclient']}", f"ipykernel=={pins()['ipykernel']}"],
        log, env=env)
    nb = solved(ROOT / "solutions" / "loop_lab" / "00_data_tour.ipynb")
    import nbformat

    (content / "work").mkdir()
    nbformat.write(nb, content / "work" / "in.ipynb")
    runner.write_text(RUN_NOTEBOOK)
    started = time.perf_counter()
    proc = subprocess.run([py, runner, content / "work" / "in.ipynb", content / "work" / "out.ipynb"], cwd=content,
                          env=env, capture_output=True, text=True)
    info["colab_nb00_s"] = round(time.perf_counter() - started)
    with log.open("a") as f:
        f.write(proc.stdout + proc.stderr)
    out = nbformat.read(content / "work" / "out.ipynb", as_version=4) if proc.returncode == 0 else None
    sys.path.insert(0, str(ROOT / "tests"))
    from test_notebooks import unintended_warnings

    errors = [o.get("ename") for c in (out.cells if out else []) for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    info["colab_nb00"] = ("clean" if out is not None and not errors and not unintended_warnings(out)
                          else f"failed: {errors or proc.stderr[-500:]} {unintended_warnings(out) if out else ''}")
    info["colab_staged_from_lab_data_dir"] = (content / "root/.cache/loop_lab/FashionMNIST/raw").is_dir()
    shutil.rmtree(content, ignore_errors=True)
    return info


# The notebook runs in memory: the kernel's working folder is /content's stand-in, never the notebook's own folder.
RUN_NOTEBOOK = """\
import os, sys
import nbformat
from nbclient import NotebookClient
nb = nbformat.read(sys.argv[1], as_version=4)
os.remove(sys.argv[1])  # Colab has no notebook file on disk
NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True,
               resources={"metadata": {"path": os.getcwd()}}).execute()
nbformat.write(nb, sys.argv[2])
"""


# --- the report -----------------------------------------------------------------------------------------------------


def _cell(row: dict) -> str:
    state = "FAILED" if row.get("failed") else f"{len(row['warnings'])} warnings" if row.get("warnings") else "clean"
    return f"{state}, {row['wall_seconds']:.0f} s"


def table(other: dict, pinned: dict, diff: list[str], nbs: dict, colab_info: dict | None) -> str:
    lines = [f"| | torch {other['torch']} | pinned |", "|---|---|---|",
             f"| Python | {other['python']} | {pinned['python']} |",
             f"| torch / torchvision | {other['torch']} / {other['torchvision']} | {pinned['torch']} / "
             f"{pinned['torchvision']} |",
             f"| the handout's way for your own torch (and Jupyter), on {other['before_own_torch']} | kept torch: "
             f"{other['own_torch_kept_torch']}; installed {other['own_torch_installed']} ({other['own_torch_install_s']}"
             f" s); every notebook import: {other['own_torch_imports']}; notebook 00 under `jupyter nbconvert "
             f"--execute`: {other['own_torch_nbconvert']} | |",
             f"| `pip install -e .` of the course on that torch | kept torch: {other.get('pip_install_kept_torch')} "
             f"| |",
             f"| virtualenv (torch alone / all) | {other['torch_venv_mb']} MB / {other['venv_mb']} MB | |",
             f"| check corpus: verdicts | {other['corpus']['seconds']} s | {pinned['corpus']['seconds']} s |",
             f"| | {'all ' + str(other['n']) + ' equal' if not diff else str(len(diff)) + ' differ: ' + '; '.join(diff)}"
             " | |"]
    if nbs:
        o, p = nbs["other"], nbs.get("pinned")
        lines.append(f"| notebooks 00-08, smoke | {'clean' if o['ok'] else 'FAILED'}, {o['seconds']} s | "
                     + (f"{'clean' if p['ok'] else 'FAILED'}, {p['seconds']} s |" if p else "|"))
        for tail in (o["tail"], (p or {}).get("tail")):
            if tail:
                lines.append(f"| | {tail[-600:]!r} | |")
        by_id = {r.get("notebook"): r for r in (p or {}).get("rows", [])}
        for row in o["rows"]:
            mine = by_id.get(row.get("notebook"), {})
            lines.append(f"| {row['notebook']} | {_cell(row)} | {_cell(mine) if mine else ''} |")
    if colab_info:
        lines += ["", "| Colab simulation | |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in colab_info.items()]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--torch", help="a torch release on the registry (default: pyproject.toml's floor)")
    parser.add_argument("--torchvision", help="install this torchvision with torch first (default: none, so that the "
                        "handout's way adds the one pip finds for that torch)")
    parser.add_argument("--work", type=Path, default=Path.home() / ".cache" / "loop_lab" / "compat")
    parser.add_argument("--python", help="a Python minor version other than the newest supported (e.g. 3.10)")
    parser.add_argument("--skip-notebooks", action="store_true")
    parser.add_argument("--skip-colab", action="store_true")
    parser.add_argument("--verdicts", type=Path, help=argparse.SUPPRESS)  # the corpus in this interpreter, as JSON
    args = parser.parse_args(argv)
    if args.verdicts:
        args.verdicts.write_text(json.dumps(verdicts(), indent=1))
        return 0
    work = args.work.expanduser()
    work.mkdir(parents=True, exist_ok=True)
    minor = args.python or newest_python()
    torch_v = args.torch or exact(floor("torch"))
    vision_v = args.torchvision
    log = work / f"bench_compat-py{minor}-torch{torch_v}.log"
    log.write_text("")
    print(f"torch {torch_v}{f', torchvision {vision_v}' if vision_v else ''} on Python {minor} (log: {log})",
          flush=True)
    venv, other = torch_venv(work, minor, torch_v, vision_v, log)
    other["before_own_torch"] = "torch and torchvision" if vision_v else "torch alone"
    own_torch_way(work, venv, log, other)
    install_course(work, venv, log, other)
    print(f"installed: {other}", flush=True)
    other["corpus"] = corpus(venv / "bin" / "python", work / f"verdicts-py{minor}-torch{torch_v}.json", log)
    pinned = {"python": sys.version.split()[0], "torch": pins()["torch"], "torchvision": pins()["torchvision"]}
    here = f"py{sys.version_info.major}.{sys.version_info.minor}-torch{pinned['torch']}"
    pinned["corpus"] = corpus(Path(sys.executable), work / f"verdicts-{here}.json", log)
    other["n"] = len(other["corpus"]["variants"]) + len(other["corpus"]["stubs"])
    diff = differences(other["corpus"], pinned["corpus"])
    print(f"corpus: {other['n']} verdicts, {len(diff)} differ", flush=True)
    nbs = {}
    if not args.skip_notebooks:
        nbs["other"] = notebooks(venv, work / f"lab-torch{torch_v}", log)
        print(f"notebooks on torch {torch_v}: {nbs['other']['ok']} {nbs['other']['seconds']} s", flush=True)
        nbs["pinned"] = notebooks(Path(sys.prefix), work / "lab-pinned", log)
        print(f"notebooks on the pinned: {nbs['pinned']['ok']} {nbs['pinned']['seconds']} s", flush=True)
    colab_info = None if args.skip_colab else colab(work, log, torch_v, other["torchvision"])
    result = table(other, pinned, diff, nbs, colab_info)
    (work / f"result-py{minor}-torch{torch_v}.md").write_text(result)
    print(result)
    failed = (diff or any(not n["ok"] for n in nbs.values()) or other["own_torch_imports"] != "all resolve"
              or not other["own_torch_nbconvert"].startswith("clean")
              or (colab_info and (colab_info["colab_nb00"] != "clean" or not colab_info["colab_kept_torch"])))
    if not failed:
        print(f"torch {torch_v} with torchvision {other['torchvision']} agrees with the pin: it may join "
              "labutils/versions.py's CHECKED")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
