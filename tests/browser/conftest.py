"""Browser tests (marker ``browser``): JupyterLab and nbgrader's formgrader in headless Chromium, driven by Playwright.

They need Debian's Chromium (``apt-get install -y chromium``; ``make test`` installs it when run as root) and the
``playwright`` package from requirements.txt. Playwright's own browser download is never used: the tests point it at
the system binary. Without either, each browser test is skipped with one line that says how to enable it.

Every test gets a fresh Chromium profile and its own Jupyter server (loopback, a random free port, a token, a
temporary HOME), both stopped when it ends.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .labserver import LabServer, start_lab

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
ENABLE = ("browser tests need Chromium and playwright: `apt-get install -y chromium` (as root) and "
          "`pip install -r requirements.txt`, or `make test`, which does both")
VIEWPORT = {"width": 1366, "height": 900}


def pytest_configure(config):
    config.addinivalue_line("markers", "browser: drives JupyterLab or formgrader in headless Chromium (Playwright); "
                            "skipped when Chromium or playwright is missing")


def missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return ENABLE
    return None if CHROMIUM else ENABLE


def pytest_collection_modifyitems(config, items):
    reason = missing()
    if reason:
        for item in items:
            if item.get_closest_marker("browser"):
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="module")
def playwright_chromium():
    """Playwright, per module: its sync API keeps an asyncio loop running in this thread until it stops, and an xdist
    worker runs other modules after this one (``asyncio.run`` there failed with "cannot be called from a running
    event loop")."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        yield p.chromium


@pytest.fixture
def page(playwright_chromium, tmp_path):
    """A page in a fresh headless Chromium (its own profile folder), closed after the test."""
    context = playwright_chromium.launch_persistent_context(
        tmp_path / "chromium-profile", executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
        viewport=VIEWPORT)
    context.set_default_timeout(60_000)
    try:
        yield context.pages[0] if context.pages else context.new_page()
    finally:
        context.close()


@pytest.fixture
def jupyter(tmp_path):
    """``jupyter(cwd, *args, env=...)`` starts ``jupyter lab *args`` in ``cwd``; every server is stopped after the
    test, its kernels first."""
    servers: list[LabServer] = []

    def start(cwd, *args: str, env: dict[str, str] | None = None) -> LabServer:
        server = start_lab(cwd, tmp_path / f"home{len(servers)}", args=args, env=env)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def built_handout(tmp_path_factory):
    """The student handout, built with the CLI and unzipped, once per session: tests use a copy (:func:`handout`)."""
    from .student import unpacked_handout

    return unpacked_handout(tmp_path_factory.mktemp("handout"))


@pytest.fixture
def handout(built_handout, tmp_path):
    """A student's own unzipped copy of the handout, free to change (save notebooks, create a venv)."""
    return Path(shutil.copytree(built_handout, tmp_path / built_handout.name))


@pytest.fixture(scope="session")
def graded_class(tiny_class):
    """The tiny class (alice correct, bob with a zero_grad bug, dan the stubs, mallory the attacker) graded once by
    ``python -m autograder grade`` (tests/conftest.py): tests that change the course change a copy of it."""
    return tiny_class
