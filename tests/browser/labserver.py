"""A Jupyter server for one test: loopback, a random free port, token auth, and a HOME and Jupyter folders of its own.

The server is the venv's own ``jupyter`` (``jupyter lab``, the command the handout README gives students), so the
JupyterLab and nbgrader extensions the venv installed are the ones the browser sees. Its kernel is this venv's Python,
written as a kernelspec into the temporary data folder. :meth:`LabServer.stop` shuts the kernels and the server down
through the REST API, then kills whatever it started that is still alive: nothing is left running.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

VENV_BIN = Path(sys.executable).parent
KERNEL_SPEC = {
    "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
    "display_name": "Python 3 (ipykernel)",
    "language": "python",
    "metadata": {"supported_encryption": ["curve"]},  # lets the server hand the kernel CurveZMQ keys
}
# JupyterLab's first-run "get notified about Jupyter news?" toast: it would sit over the outputs in every screenshot
LAB_SETTINGS = {"@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def jupyter_env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a server with its own HOME, config, data and runtime folders (nothing of ours leaks in)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "IPYTHON", "NBGRADER"))}
    env.update(HOME=str(home), JUPYTER_CONFIG_DIR=str(home / ".jupyter"),
               JUPYTER_DATA_DIR=str(home / ".local/share/jupyter"), JUPYTER_RUNTIME_DIR=str(home / "runtime"),
               IPYTHONDIR=str(home / ".ipython"), PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
               PYTHONUNBUFFERED="1", **(extra or {}))
    return env


def prepare_home(home: Path) -> None:
    kernel = home / ".local/share/jupyter/kernels/python3"
    kernel.mkdir(parents=True, exist_ok=True)
    (kernel / "kernel.json").write_text(json.dumps(KERNEL_SPEC, indent=1))
    for plugin, values in LAB_SETTINGS.items():
        path = home / ".jupyter/lab/user-settings" / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


@dataclass
class LabServer:
    proc: subprocess.Popen
    port: int
    token: str
    log_path: Path

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        """``path`` (e.g. ``lab/tree/notebooks/01_baseline.ipynb``) with the token, as a browser opens it."""
        return f"{self.base}/{path.lstrip('/')}{'&' if '?' in path else '?'}token={self.token}"

    def api(self, method: str, path: str, body: dict | None = None, timeout: float = 10):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.base}/{path.lstrip('/')}", data=data, method=method,
                                         headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read().decode()
        return json.loads(text) if text.strip() else None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        """Kernels, then the server, through the API; anything of ours still alive after that is killed."""
        started = descendants(self.proc.pid)
        if self.proc.poll() is None:
            try:
                for kernel in self.api("GET", "api/kernels"):
                    self.api("DELETE", f"api/kernels/{kernel['id']}", timeout=20)
                self.api("POST", "api/shutdown")
            except (OSError, urllib.error.URLError):
                pass  # the server is already gone or unresponsive: the kill below covers it
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        for pid, start in {**started, **descendants(self.proc.pid)}.items():
            if process_start(pid) == start:  # still the process we started, not a new one with its pid
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def start_lab(cwd: Path, home: Path, *, args: tuple[str, ...] = (), env: dict[str, str] | None = None,
              timeout: float = 90) -> LabServer:
    """``jupyter lab *args`` run in ``cwd`` (e.g. ``args=("notebooks/",)``, the README's command); returns once its
    API answers."""
    prepare_home(home)
    port, token = free_port(), secrets.token_hex(16)
    log_path = home / "jupyter-server.log"
    command = [str(VENV_BIN / "jupyter"), "lab", *args, "--no-browser", "--ServerApp.ip=127.0.0.1",
               f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
               "--ServerApp.jpserver_extensions={'jupyter_lsp': False}"]  # ~1 CPU-s of node and npm per start
    # jupyter-lsp looks for language servers at every start; no test uses one
    if os.geteuid() == 0:
        command.append("--allow-root")  # this machine runs the tests as root; a student's laptop does not
    with open(log_path, "w") as log:
        proc = subprocess.Popen(command, cwd=cwd, env=jupyter_env(home, env), stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    server = LabServer(proc, port, token, log_path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with {proc.returncode}:\n{server.log()[-3000:]}")
        try:
            server.api("GET", "api/status", timeout=2)
            return server
        except (OSError, urllib.error.URLError):
            time.sleep(0.3)
    server.stop()
    raise TimeoutError(f"jupyter lab did not answer within {timeout:.0f} s:\n{server.log()[-3000:]}")


def _stat(pid: int | str) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state, ppid, ...), or None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_start(pid: int) -> str | None:
    fields = _stat(pid)
    return fields[19] if fields else None  # starttime: tells a process from a later one given the same pid


def descendants(pid: int) -> dict[int, str]:
    """pid -> start time of every live process below ``pid`` (kernels, nbgrader's validation kernel)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        fields = _stat(stat.parent.name)
        if fields and fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = {}, [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            start = process_start(child)
            if start and child not in found:
                found[child] = start
                todo.append(child)
    return found
