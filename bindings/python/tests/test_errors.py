"""Bad arguments, unreachable coordinators and a missing library raise clear errors."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

from tests.harness import LIBRARY, PYTHON_DIR, Coordinator, free_port

import shockwave


class TestBadArguments(unittest.TestCase):
    coord: Coordinator

    @classmethod
    def setUpClass(cls) -> None:
        cls.coord = Coordinator(gpus=2)
        cls.coord.start()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.coord.stop()

    def open(self, **kw) -> shockwave.Job:
        args = dict(model="mlp", batch_size=32, dataset_size=3200, epochs=2, url=self.coord.url,
                    job_id="bad-args", register_timeout=5)
        args.update(kw)
        return shockwave.Job(**{k: v for k, v in args.items() if v is not None})

    def assertInvalid(self, want: str, **kw) -> None:
        with self.assertRaises(shockwave.InvalidArgument) as cm:
            self.open(**kw)
        self.assertIn(want, str(cm.exception))
        self.assertIsInstance(cm.exception, ValueError)

    def test_missing_model(self):
        self.assertInvalid("model", model="")

    def test_batch_size_out_of_range_names_the_key(self):
        self.assertInvalid("batch_size", batch_size=0)

    def test_two_lengths(self):
        self.assertInvalid("exactly one", total_steps=100)

    def test_unknown_adaptation(self):
        self.assertInvalid("adaptation", adaptation="sometimes")

    def test_bad_job_id(self):
        self.assertInvalid("job", job_id="has space")

    def test_wrong_json_type(self):
        self.assertInvalid("batch_size", batch_size="big")

    def test_not_json(self):
        self.assertInvalid("JSON", priority=object())

    def test_bad_sample_interval(self):
        self.assertInvalid("sample_interval", sample_interval=-1)

    def test_hooks_must_be_callable(self):
        self.assertInvalid("on_suspend", on_suspend=3)

    def test_gang_wider_than_the_cluster_is_refused(self):
        with self.assertRaises(shockwave.RegistrationRefused) as cm:
            self.open(workers=64)
        self.assertIn("refused", str(cm.exception))

    def test_unreachable_coordinator(self):
        start = time.monotonic()
        with self.assertRaises(shockwave.ConnectError) as cm:
            self.open(url=f"nats://127.0.0.1:{free_port()}", register_timeout=0.5)
        self.assertLess(time.monotonic() - start, 10)
        self.assertIn("127.0.0.1", str(cm.exception))

    def test_bad_calls_on_an_open_job(self):
        with self.open(job_id="bad-calls") as job:
            for bad in (0, -3, 10**12):
                with self.assertRaises(shockwave.InvalidArgument) as cm:
                    job.set_batch_size(bad)
                self.assertIn("batch size", str(cm.exception))
            for bad in ("64", 64.0, True):
                with self.assertRaises(shockwave.InvalidArgument):
                    job.set_batch_size(bad)
            job.set_batch_size(64)  # still usable


def run_python(code: str, env: dict, cwd: str = PYTHON_DIR) -> subprocess.CompletedProcess:
    """Runs code in a fresh interpreter (the library loads once per process)."""
    full = dict(os.environ)
    full.pop("SHOCKWAVE_LIBRARY", None)
    full.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=full,
                          capture_output=True, text=True, timeout=60)


class TestLibraryDiscovery(unittest.TestCase):
    def test_environment_variable_naming_a_missing_file(self):
        out = run_python("""
            import shockwave
            try:
                shockwave.Job(model="m", batch_size=1, dataset_size=1, epochs=1, job_id="x")
            except shockwave.LibraryNotFound as e:
                print("LibraryNotFound:", e)
        """, {"SHOCKWAVE_LIBRARY": "/nonexistent/libshockwave.so"})
        self.assertIn("LibraryNotFound:", out.stdout, out.stderr)
        self.assertIn("SHOCKWAVE_LIBRARY", out.stdout)
        self.assertIn("/nonexistent/libshockwave.so", out.stdout)

    def test_no_library_anywhere_says_how_to_build_it(self):
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp, True)
        pkg = os.path.join(tmp, "a", "b")
        shutil.copytree(os.path.join(PYTHON_DIR, "shockwave"), os.path.join(pkg, "shockwave"),
                        ignore=shutil.ignore_patterns("*.so", "__pycache__"))
        out = run_python("""
            import shockwave
            try:
                shockwave.load_library()
            except OSError as e:
                print(type(e).__name__ + ":", e)
        """, {}, cwd=pkg)
        self.assertIn("LibraryNotFound:", out.stdout, out.stderr)
        self.assertIn("make lib", out.stdout)
        self.assertIn("Tried:", out.stdout)

    def test_a_file_that_is_not_a_library(self):
        with tempfile.NamedTemporaryFile(suffix=".so") as f:
            f.write(b"not an ELF file")
            f.flush()
            out = run_python("""
                import shockwave
                try:
                    shockwave.load_library()
                except shockwave.LibraryNotFound as e:
                    print("LibraryNotFound:", e)
            """, {"SHOCKWAVE_LIBRARY": f.name})
        self.assertIn("cannot load", out.stdout, out.stderr)

    def test_found_through_the_environment_and_the_build_output(self):
        for env in ({"SHOCKWAVE_LIBRARY": LIBRARY}, {}):
            out = run_python("import shockwave; print(shockwave.load_library())", env)
            self.assertEqual(out.stdout.strip(), LIBRARY, out.stderr)


if __name__ == "__main__":
    unittest.main()
