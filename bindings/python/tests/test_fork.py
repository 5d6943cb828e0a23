"""A process forked after the library loaded: the parent keeps working, the
child gets a clear error and never hangs."""

from __future__ import annotations

import ctypes
import multiprocessing
import pickle
import os
import time
import unittest

from tests.harness import Coordinator

import shockwave
from shockwave import _lib

CHILD_TIMEOUT = 20.0


def wait_child(pid: int, timeout: float) -> int:
    """Waits for pid; kills it and fails if it outlives timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    raise AssertionError(f"forked child {pid} hung for {timeout} s")


# The job a multiprocessing child inherits through fork (a Job cannot be
# pickled).
_inherited = None


def touch_job() -> str:
    """Runs in a multiprocessing child: uses the parent's job."""
    try:
        _inherited.set_batch_size(8)
    except shockwave.ForkedProcessError as e:
        return "ForkedProcessError: " + str(e)
    return "no error"


def square(x: int) -> int:
    return x * x


class TestFork(unittest.TestCase):
    coord: Coordinator

    @classmethod
    def setUpClass(cls) -> None:
        cls.coord = Coordinator()
        cls.coord.start()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.coord.stop()

    def open(self, job_id: str) -> shockwave.Job:
        return shockwave.Job(model="mlp", batch_size=32, dataset_size=3200, total_steps=10**6,
                             job_id=job_id, url=self.coord.url)

    def test_child_gets_a_clear_error_and_the_parent_keeps_working(self):
        with self.open("fork-1") as job:
            for _ in job.iterate(range(20)):
                pass
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: report through the pipe, never return
                code = 1
                try:
                    os.close(r)
                    msgs = []
                    for call in (lambda: job.set_batch_size(8), lambda: job.state,
                                 lambda: list(job.iterate(range(3))), job.close):
                        try:
                            call()
                            msgs.append("no error")
                        except shockwave.ForkedProcessError as e:
                            msgs.append(str(e))
                    # The C layer refuses too, without entering Go.
                    lib = _lib.load()
                    st = lib.shockwave_boundary(job._handle)
                    msgs.append(f"status {st}: {_lib.last_error(job._handle)}")
                    os.write(w, "\n".join(msgs).encode())
                    code = 0
                finally:
                    os._exit(code)
            os.close(w)
            self.assertEqual(wait_child(pid, CHILD_TIMEOUT), 0)
            with os.fdopen(r) as f:
                msgs = f.read().split("\n")
            self.assertEqual(len(msgs), 5, msgs)
            for m in msgs[:4]:
                self.assertIn("fork", m)
                self.assertIn("fork-1", m)
            self.assertTrue(msgs[4].startswith(f"status {_lib.ERR_FORKED}:"), msgs[4])
            self.assertIn("forked", msgs[4])
            # The parent is unaffected.
            job.set_batch_size(64)
            for _ in job.iterate(range(20)):
                pass
            self.assertEqual(job.state["steps_done"], 40)

    def test_multiprocessing_fork_children(self):
        global _inherited
        ctx = multiprocessing.get_context("fork")
        with self.open("fork-2") as job:
            job.wait_for_lease()
            _inherited = job
            with ctx.Pool(2) as pool:
                # Workers that do not touch the job (DataLoader workers) work...
                got = list(job.iterate(pool.imap(square, range(30))))
                self.assertEqual(got, [x * x for x in range(30)])
                # ...and one that does gets an error, not a hang.
                res = pool.apply_async(touch_job)
                msg = res.get(CHILD_TIMEOUT)
            self.assertTrue(msg.startswith("ForkedProcessError:"), msg)
            with self.assertRaises(TypeError):
                pickle.dumps(job)
            job.set_batch_size(16)
            self.assertEqual(job.state["steps_done"], 30)

    def test_opening_a_job_in_a_forked_child_fails_fast(self):
        shockwave.load_library()
        pid = os.fork()
        if pid == 0:
            code = 3
            try:
                shockwave.Job(model="m", batch_size=1, dataset_size=1, epochs=1, job_id="child",
                              url=self.coord.url)
                code = 1
            except shockwave.ForkedProcessError:
                code = 0
            finally:
                os._exit(code)
        self.assertEqual(wait_child(pid, CHILD_TIMEOUT), 0)

    def test_raw_c_calls_in_a_child_return_the_fork_status(self):
        lib = _lib.load()
        pid = os.fork()
        if pid == 0:
            code = 3
            try:
                h = ctypes.c_int64(0)
                st = lib.shockwave_open(b'{"model": "m"}', ctypes.byref(h))
                code = 0 if st == _lib.ERR_FORKED and "forked" in _lib.last_error(0) else 1
            finally:
                os._exit(code)
        self.assertEqual(wait_child(pid, CHILD_TIMEOUT), 0)


if __name__ == "__main__":
    unittest.main()
