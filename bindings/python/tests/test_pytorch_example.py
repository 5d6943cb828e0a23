"""examples/pytorch/train.py end to end against a real coordinator.

Skipped, with a message, when this interpreter has no torch (Debian:
apt-get install python3-torch; `make test-python` uses /usr/bin/python3).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from tests.harness import PYTHON_DIR, REPO_ROOT, Coordinator

SCRIPT = os.path.join(REPO_ROOT, "examples", "pytorch", "train.py")
HAVE_TORCH = importlib.util.find_spec("torch") is not None


@unittest.skipUnless(HAVE_TORCH, f"torch is not installed for {sys.executable}: the PyTorch example is not run "
                                 "(Debian: apt-get install python3-torch)")
class TestPyTorchExample(unittest.TestCase):
    def setUp(self) -> None:
        self.coord = Coordinator(gpus=1, round_s=1.0)
        self.coord.start()
        self.addCleanup(self.coord.stop)
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir, True)

    def train(self, job_id: str, *extra: str, pause_after: str = "") -> tuple:
        """Runs the example; pauses the coordinator for 3 s (SIGSTOP) once
        pause_after appears, so that the job's lease expires and it suspends."""
        env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
        args = [sys.executable, SCRIPT, "--url", self.coord.url, "--job-id", job_id, "--epochs", "6",
                "--step-delay", "0.01", "--checkpoint", os.path.join(self.dir, job_id + ".pt"), *extra]
        p = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        killer = threading.Timer(120, p.kill)
        killer.start()
        lines, paused = [], False
        try:
            assert p.stdout is not None
            for line in p.stdout:
                lines.append(line.rstrip())
                if pause_after and not paused and pause_after in line:
                    paused = True
                    os.kill(self.coord.proc.pid, signal.SIGSTOP)
                    time.sleep(3)
                    os.kill(self.coord.proc.pid, signal.SIGCONT)
            rc = p.wait()
        finally:
            killer.cancel()
            if p.stdout is not None:
                p.stdout.close()
        return rc, "\n".join(lines)

    def test_trains_switches_batch_size_and_resumes_from_its_checkpoint(self):
        rc, out = self.train("torch-1", pause_after="epoch 1/")
        self.assertEqual(rc, 0, out)
        for want in ("registered job torch-1", "batch size -> 128", "suspended at epoch",
                     "resumed from checkpoint", "done: 6 epochs"):
            self.assertIn(want, out)
        job = self.coord.status("torch-1")["jobs"][0]
        self.assertEqual((job["state"], job["epoch"]), ("completed", 6), job)

    def test_exit_mode_exits_on_preemption_and_a_restart_resumes(self):
        rc, out = self.train("torch-2", "--exit-mode", pause_after="epoch 1/")
        self.assertEqual(rc, 0, out)
        self.assertIn("preempted", out)
        self.assertIn("suspended at epoch", out)
        rc, out2 = self.train("torch-2", "--exit-mode")
        self.assertEqual(rc, 0, out2)
        self.assertIn("restarting from", out2)
        self.assertIn("done: 6 epochs", out2)
        job = self.coord.status("torch-2")["jobs"][0]
        self.assertEqual((job["state"], job["epoch"]), ("completed", 6), job)


if __name__ == "__main__":
    unittest.main()
