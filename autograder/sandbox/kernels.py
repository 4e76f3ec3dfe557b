"""Kernels forked from the zygote: jupyter_client's launch replaced by a request to :mod:`autograder.sandbox.zygote`.

nbclient drives these kernels exactly like ordinary ones (ZMQ channels, interrupts, shutdown); only the launch differs.
The zygote forks an ipykernel that already has torch, labutils and the data loaded, and the fork confines itself
(:mod:`autograder.sandbox.policy`) to the task's folder before it runs a cell. The task's context (zygote, folders, limits)
comes from :mod:`autograder.sandbox.context`.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import time
import uuid

from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning.local_provisioner import LocalProvisioner

from autograder.sandbox import context
from autograder.channel import KernelRequest, KernelStarted
from autograder.sandbox.client import ZygoteError

KERNEL_START_TRIES = 3
KERNEL_START_S = 60  # a fork answers in milliseconds; this is a machine so loaded that it is worth asking again


class ForkedKernelProcess:
    """Popen-like handle on a kernel the zygote forked (not our child: we poll with signal 0, the zygote reaps)."""

    stdin = stdout = stderr = None

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                self.returncode = -signal.SIGKILL
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"kernel {self.pid} still running")
            time.sleep(0.05)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)  # the kernel leads its own session: this reaches what it started too
        except OSError:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class ZygoteProvisioner(LocalProvisioner):
    """Launches the kernel by asking the zygote to fork one, confined to the task's folder."""

    async def launch_kernel(self, cmd: list[str], **kwargs) -> dict:
        ctx = context.current()
        argv = cmd[cmd.index("-f"):] if "-f" in cmd else cmd[1:]
        conn_file = argv[argv.index("-f") + 1] if "-f" in argv else None
        cwd = str(kwargs.get("cwd") or ctx.task_dir)
        policy = dataclasses.replace(
            ctx.policy,
            bind_ports=[int(self.connection_info[k]) for k in
                        ("shell_port", "iopub_port", "stdin_port", "hb_port", "control_port")],
            read_files=[*ctx.policy.read_files, *([conn_file] if conn_file else [])],
            write_dirs=[*ctx.policy.write_dirs, cwd],
            own_paths=[*ctx.policy.own_paths, cwd, *([conn_file] if conn_file else [])],
        )
        request = KernelRequest(argv=argv, cwd=cwd, env=ctx.kernel_env, policy=policy,
                                log=str(ctx.task_dir / "kernel.log"), threads=ctx.threads)
        pid = self._start(ctx, request)
        ctx.kernel_pids.append(pid)
        self.process = ForkedKernelProcess(pid)
        self.pid = self.pgid = pid
        self.cwd = cwd
        return self.connection_info


    @staticmethod
    def _start(ctx, request: KernelRequest) -> int:
        """The forked kernel's pid. A request the zygote did not answer in time is asked again (its late reply is
        dropped by number, and the kernel it may have started dies with the task's KillAll): a slow start on a
        loaded machine must not cost the student the notebook."""
        for attempt in range(1, KERNEL_START_TRIES + 1):
            try:
                return ctx.zygote.request(request, KernelStarted, timeout=KERNEL_START_S).pid
            except ZygoteError as exc:
                if attempt == KERNEL_START_TRIES or not ctx.zygote.alive():
                    raise
                print(f"kernel start, try {attempt} of {KERNEL_START_TRIES}: {exc}; trying again", file=sys.stderr)


def connection_file(kernel_id: str) -> str:
    """Where a kernel's connection file (its ports and HMAC key) goes: jupyter's runtime folder, which the workers
    set inside the run's scratch folder (``runtime-<pid>``), so that a run killed before it could remove the file
    leaves it only there, where the next run removes the dead run's whole folder."""
    from jupyter_core.paths import jupyter_runtime_dir

    return os.path.join(jupyter_runtime_dir(), f"kernel-{kernel_id}.json")


class ZygoteKernelManager(AsyncKernelManager):
    async def _async_pre_start_kernel(self, **kw):
        self.kernel_id = self.kernel_id or str(uuid.uuid4())
        if not self.connection_file:  # else jupyter_client mkstemps tmp*.json in TMPDIR: a killed run left them there
            self.connection_file = connection_file(self.kernel_id)
        if self.provisioner is None:
            self.provisioner = ZygoteProvisioner(kernel_id=self.kernel_id, kernel_spec=self.kernel_spec, parent=self)
        return await super()._async_pre_start_kernel(**kw)
