"""The wheel: built offline, installed into a fresh venv with pip, it finds
its own libshockwave.so with no environment variable and trains the PyTorch
example (that last test is skipped without torch).

The venv is created with ``--system-site-packages`` so that Debian's
python3-torch is visible in it, the way a user of Debian's torch would.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import zipfile

from tests.harness import LIBRARY, PYTHON_DIR, REPO_ROOT, Coordinator

sys.path.insert(0, PYTHON_DIR)
import shockwave_build  # noqa: E402

HAVE_TORCH = importlib.util.find_spec("torch") is not None
HAVE_ENSUREPIP = importlib.util.find_spec("ensurepip") is not None


def clean_env() -> dict:
    """The environment minus everything that could point at the source tree."""
    env = dict(os.environ)
    for k in ("PYTHONPATH", "SHOCKWAVE_LIBRARY", "PYTHONHOME"):
        env.pop(k, None)
    return env


def run(args, cwd: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=timeout)


class TestWheelFile(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="shockwave-wheel-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def test_wheel_is_a_platform_wheel_carrying_the_library_with_a_true_record(self):
        name = shockwave_build.build(self.dir, LIBRARY)
        version = shockwave_build.project()["version"]
        self.assertEqual(name, f"shockwave-{version}-py3-none-{shockwave_build.platform_tag()}.whl")
        with zipfile.ZipFile(os.path.join(self.dir, name)) as z:
            names = z.namelist()
            self.assertIn("shockwave/libshockwave.so", names)
            self.assertIn("shockwave/__init__.py", names)
            info = f"shockwave-{version}.dist-info"
            self.assertIn("Root-Is-Purelib: false", z.read(f"{info}/WHEEL").decode())
            with open(LIBRARY, "rb") as f:
                self.assertEqual(z.read("shockwave/libshockwave.so"), f.read())
            record = z.read(f"{info}/RECORD").decode().splitlines()
            self.assertEqual(sorted(r.split(",")[0] for r in record), sorted(names))
            for line in record:
                path, digest, size = line.split(",")
                if path.endswith("RECORD"):
                    continue
                data = z.read(path)
                want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                self.assertEqual((digest, int(size)), ("sha256=" + want, len(data)), path)

    def test_same_inputs_give_the_same_wheel_bytes(self):
        a, b = os.path.join(self.dir, "a"), os.path.join(self.dir, "b")
        na, nb = shockwave_build.build(a, LIBRARY), shockwave_build.build(b, LIBRARY)
        with open(os.path.join(a, na), "rb") as fa, open(os.path.join(b, nb), "rb") as fb:
            self.assertEqual(fa.read(), fb.read())

    def test_build_refuses_a_missing_or_foreign_library_and_writes_nothing(self):
        with self.assertRaisesRegex(shockwave_build.BuildError, "does not exist"):
            shockwave_build.build(self.dir, os.path.join(self.dir, "nope.so"))
        fake = os.path.join(self.dir, "fake.so")
        with open(fake, "w") as f:
            f.write("not a library")
        with self.assertRaisesRegex(shockwave_build.BuildError, "not an ELF"):
            shockwave_build.build(self.dir, fake)
        self.assertEqual(os.listdir(self.dir), ["fake.so"])


@unittest.skipUnless(HAVE_ENSUREPIP, f"{sys.executable} has no ensurepip, so no venv with pip can be made "
                                     "(Debian: apt-get install python3-venv)")
class TestInstalledWheel(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.dir = tempfile.mkdtemp(prefix="shockwave-venv-")
        cls.wheel = os.path.join(cls.dir, shockwave_build.build(cls.dir, LIBRARY))
        cls.venv = os.path.join(cls.dir, "venv")
        out = run([sys.executable, "-m", "venv", "--system-site-packages", cls.venv], cls.dir)
        if out.returncode != 0:
            shutil.rmtree(cls.dir, True)
            raise RuntimeError("python -m venv failed:\n" + out.stderr)
        cls.python = os.path.join(cls.venv, "bin", "python")
        out = run([cls.python, "-m", "pip", "install", "--no-index", "--no-cache-dir", cls.wheel], cls.dir)
        if out.returncode != 0:
            shutil.rmtree(cls.dir, True)
            raise RuntimeError("pip install of the wheel failed offline:\n" + out.stdout + out.stderr)

    @classmethod
    def tearDownClass(cls) -> None:
        shutil.rmtree(cls.dir, True)

    def test_installed_package_loads_its_bundled_library_without_environment(self):
        out = run([self.python, "-c", "import shockwave, shockwave._lib as l; l.load(); "
                   "print(shockwave.__file__); print(l.library_path())"], self.dir)
        self.assertEqual(out.returncode, 0, out.stderr)
        pkg, lib = out.stdout.split()
        self.assertTrue(pkg.startswith(self.venv), f"imported {pkg}, not the venv's copy")
        self.assertEqual(lib, os.path.join(os.path.dirname(pkg), "libshockwave.so"))

    def test_pip_installs_the_source_tree_offline_and_leaves_no_build_output(self):
        venv = os.path.join(self.dir, "venv-src")
        out = run([sys.executable, "-m", "venv", venv], self.dir)
        self.assertEqual(out.returncode, 0, out.stderr)
        before = set(os.listdir(PYTHON_DIR))
        out = run([os.path.join(venv, "bin", "python"), "-m", "pip", "install", "--no-index", "--no-cache-dir",
                   PYTHON_DIR], self.dir)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        left = {n for n in set(os.listdir(PYTHON_DIR)) - before if n != "__pycache__"}
        self.assertEqual(left, set(), "pip left build output in the source tree")
        self.assertFalse([n for n in os.listdir(PYTHON_DIR) if n.endswith(".egg-info") or n == "build"])
        out = run([os.path.join(venv, "bin", "python"), "-c",
                   "import shockwave._lib as l; l.load(); print(l.library_path())"], self.dir)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertTrue(out.stdout.strip().startswith(venv), out.stdout)

    @unittest.skipUnless(HAVE_TORCH, f"torch is not installed for {sys.executable}: the PyTorch example is not "
                                     "trained from the wheel (Debian: apt-get install python3-torch)")
    def test_pytorch_example_trains_with_the_installed_wheel(self):
        ckpt = os.path.join(self.dir, "ckpt.pt")
        with Coordinator(gpus=1, round_s=1.0) as coord:
            out = run([self.python, os.path.join(REPO_ROOT, "examples", "pytorch", "train.py"), "--url", coord.url,
                       "--job-id", "wheel-1", "--epochs", "3", "--checkpoint", ckpt], self.dir, timeout=180)
            self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
            self.assertIn("registered job wheel-1", out.stdout + out.stderr)
            self.assertIn("done: 3 epochs", out.stdout + out.stderr)
            job = coord.status("wheel-1")["jobs"][0]
            self.assertEqual((job["state"], job["epoch"]), ("completed", 3), job)


if __name__ == "__main__":
    unittest.main()
