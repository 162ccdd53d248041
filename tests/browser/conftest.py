"""Fixtures for the learner's-view tests: a throwaway JupyterLab server and headless Chromium.

The server serves a *copy* of the notebooks (JupyterLab autosaves; the committed notebooks must stay
clean), listens on 127.0.0.1 on a free port with a random token, loads the project's JupyterLab
settings as ``make lab`` does (``jupyter/jupyter_server_config.py``), and has JupyterLab's news and
update checks and the PyPI extension manager turned off, so it never reaches the network.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from labkit import ROOT, notebooks_dir

# Debian's chromium (make test-browser installs it); PAGED_LAB_CHROMIUM points elsewhere.
CHROMIUM = os.environ.get("PAGED_LAB_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LabServer:
    url: str  # http://127.0.0.1:PORT
    token: str
    root_dir: Path  # the throwaway copy of the notebooks the server serves
    process: subprocess.Popen
    log: Path

    def notebook_url(self, name: str) -> str:
        return f"{self.url}/lab/tree/{name}?token={self.token}&reset"

    def api(self, path: str):
        req = urllib.request.Request(f"{self.url}{path}", headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())


def _write_config(home: Path, port: int, token: str, root_dir: Path) -> dict[str, str]:
    """Config and settings dirs that only this server reads; returns the env that points at them."""
    config_dir, settings_dir = home / "config", home / "lab" / "user-settings"
    config = {
        "ServerApp": {
            "ip": "127.0.0.1",
            "port": port,
            "port_retries": 0,
            "open_browser": False,
            "root_dir": str(root_dir),
            "terminals_enabled": False,
            "allow_root": hasattr(os, "geteuid") and os.geteuid() == 0,  # CI runs as root in a container
        },
        "IdentityProvider": {"token": token},
        "LabApp": {
            "news_url": None,
            "check_for_updates_class": "jupyterlab.handlers.announcements.NeverCheckForUpdate",
            "extension_manager": "readonly",
            "expose_app_in_browser": True,  # window.jupyterapp: run commands, read kernel status
            "user_settings_dir": str(settings_dir),
            "workspaces_dir": str(home / "lab" / "workspaces"),
        },
    }
    config_dir.mkdir(parents=True)
    (config_dir / "jupyter_server_config.json").write_text(json.dumps(config, indent=1))
    # The front end asks too: say no to news and update notifications before it can.
    notify = settings_dir / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    notify.parent.mkdir(parents=True)
    notify.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    # Keep every cell in the DOM (no virtual scrolling), so the test sees every output.
    tracker = settings_dir / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    tracker.parent.mkdir(parents=True)
    # recordTiming: each cell's kernel-side start/end lands in its metadata, for the time budget.
    tracker.write_text(json.dumps({"windowingMode": "none", "recordTiming": True}))
    return {
        # this project's JupyterLab settings, as `make lab` gives them (hidden files, no news, clean saves)
        "JUPYTER_CONFIG_PATH": str(ROOT / "jupyter"),
        "JUPYTER_CONFIG_DIR": str(config_dir),
        "JUPYTER_DATA_DIR": str(home / "data"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(settings_dir),
        "JUPYTERLAB_WORKSPACES_DIR": str(home / "lab" / "workspaces"),
    }


@pytest.fixture(scope="session")
def lab_server(tmp_path_factory) -> LabServer:
    home = tmp_path_factory.mktemp("jupyter-home")
    root_dir = tmp_path_factory.mktemp("served") / "notebooks"
    shutil.copytree(notebooks_dir(), root_dir, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    port, token = _free_port(), secrets.token_hex(16)
    env = {**os.environ, **_write_config(home, port, token, root_dir)}
    log = home / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "jupyterlab", "--no-browser"],
            env=env,
            cwd=root_dir,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = LabServer(f"http://127.0.0.1:{port}", token, root_dir, process, log)
    deadline = time.monotonic() + 90
    while True:
        if process.poll() is not None:
            pytest.fail(f"JupyterLab exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            server.api("/api/status")
            break
        except OSError:
            if time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"JupyterLab did not answer on {server.url} within 90 s:\n"
                            f"{log.read_text()[-3000:]}")
            time.sleep(0.5)
    yield server
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"no Chromium at {CHROMIUM}: run `make test-browser` (it installs Debian's chromium) "
            "or set PAGED_LAB_CHROMIUM to a Chromium binary"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        # launch() gives every run a fresh, throwaway profile (user-data-dir).
        chromium = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser, request):
    context = browser.new_context(viewport={"width": 1440, "height": 900})  # the width issue 28 was read at
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.problems = []  # uncaught page errors, for the test to report
    page.on("pageerror", lambda exc: page.problems.append(str(exc)))
    yield page
    context.close()


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    """Where screenshots and the measured budget go (``$PAGED_LAB_BROWSER_OUT``, default site/browser)."""
    out = Path(os.environ.get("PAGED_LAB_BROWSER_OUT", ROOT / "site" / "browser"))
    out.mkdir(parents=True, exist_ok=True)
    return out
