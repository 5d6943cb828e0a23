"""Test helpers: a real coordinator in a child process, and paths.

The coordinator is the project's own binary (``shockwave coordinator``, with
its embedded NATS server), taken from ``$SHOCKWAVE_BIN`` (``make test-python``
sets it to ``bin/shockwave``) or else built once per test run with
``go build`` into a temporary directory.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import List, Optional

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINDINGS_DIR = os.path.dirname(PYTHON_DIR)
REPO_ROOT = os.path.dirname(BINDINGS_DIR)
LIBRARY = os.path.join(BINDINGS_DIR, "libshockwave.so")

if PYTHON_DIR not in sys.path:
    sys.path.insert(0, PYTHON_DIR)

_built: Optional[str] = None
_build_lock = threading.Lock()


def shockwave_binary() -> str:
    """The shockwave binary: $SHOCKWAVE_BIN, else built once with go build."""
    global _built
    env = os.environ.get("SHOCKWAVE_BIN")
    if env:
        if not os.access(env, os.X_OK):
            raise RuntimeError(f"$SHOCKWAVE_BIN={env} is not an executable file")
        return env
    with _build_lock:
        if _built is None:
            out = tempfile.mkdtemp(prefix="shockwave-bin-")
            atexit.register(shutil.rmtree, out, True)
            path = os.path.join(out, "shockwave")
            go = shutil.which("go") or "/usr/local/go/bin/go"
            subprocess.run([go, "build", "-o", path, "./cmd/shockwave"], cwd=REPO_ROOT, check=True)
            _built = path
        return _built


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Coordinator:
    """A coordinator with embedded NATS on a free port, for one test.

    Use as a context manager; ``url`` is its NATS URL, ``log`` its log lines.
    On failure the test prints ``tail()`` to explain what the coordinator saw.
    """

    def __init__(self, gpus: int = 1, round_s: float = 1.0, policy: str = "shockwave",
                 extra: Optional[List[str]] = None) -> None:
        self.gpus, self.round_s, self.policy = gpus, round_s, policy
        self.extra = extra or []
        self.log: List[str] = []
        self.proc: Optional[subprocess.Popen] = None
        self.dir = ""
        self.url = ""

    def __enter__(self) -> "Coordinator":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self, timeout: float = 30.0) -> None:
        binary = shockwave_binary()
        self.dir = tempfile.mkdtemp(prefix="shockwave-coord-")
        for attempt in range(3):
            port = free_port()
            self.url = f"nats://127.0.0.1:{port}"
            args = [binary, "coordinator", "--gpus", str(self.gpus), "--round", f"{self.round_s}s",
                    "--policy", self.policy, "--listen", f"127.0.0.1:{port}",
                    "--data-dir", os.path.join(self.dir, f"data{attempt}"), "--log-level", "debug"] + self.extra
            self.log = []
            self.data_dir = os.path.join(self.dir, f"data{attempt}")
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            ready = threading.Event()
            self._drainer = threading.Thread(target=self._drain, args=(self.proc, ready), daemon=True)
            self._drainer.start()
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self.proc.poll() is None and not ready.is_set():
                ready.wait(0.05)
            if ready.is_set():
                return
            self.stop(remove=False)
            if not any("address already in use" in line for line in self.log):
                break
        raise RuntimeError("coordinator did not start:\n" + self.tail())

    def coordinator_secret(self) -> str:
        """The coordinator's own NATS token (none and token mode): the rights
        a test needs to act as the coordinator, e.g. to publish leases."""
        with open(os.path.join(self.data_dir, "auth", "coordinator.secret")) as f:
            return f.read().strip()

    def _drain(self, proc: subprocess.Popen, ready: threading.Event) -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            self.log.append(line.rstrip("\n"))
            if "serving" in line:
                ready.set()

    def stop(self, remove: bool = True) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None and self.proc.stderr is not None:
            self._drainer.join(5)
            self.proc.stderr.close()
        if remove and self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.log[-n:])

    def status(self, job: Optional[str] = None) -> dict:
        """The coordinator's status reply (`shockwave status --format json`)."""
        args = [shockwave_binary(), "status", "--nats-url", self.url, "--format", "json"]
        if job:
            args += ["--job", job]
        out = subprocess.run(args, capture_output=True, text=True, timeout=30)
        if out.returncode != 0:
            raise RuntimeError(f"shockwave status failed: {out.stderr}")
        return json.loads(out.stdout)

    def events(self, message: str) -> List[dict]:
        """Log records whose message is message."""
        out = []
        for line in list(self.log):
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("message") == message:
                out.append(rec)
        return out


def wait_until(cond, timeout: float, step: float = 0.02) -> bool:
    """Polls cond until it is true or timeout seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return bool(cond())
