"""The documented header (bindings/shockwave.h) agrees with the library and
with the ctypes declarations of the Python package."""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import tempfile
import unittest

from tests.harness import BINDINGS_DIR, LIBRARY

from shockwave import _lib

HEADER = os.path.join(BINDINGS_DIR, "shockwave.h")


class TestCHeader(unittest.TestCase):
    def test_a_c_program_builds_against_the_header_and_passes(self):
        cc = shutil.which("gcc") or shutil.which("cc")
        if cc is None:
            self.skipTest("no C compiler (gcc or cc) on PATH")
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp, True)
        exe = os.path.join(tmp, "abi_check")
        src = os.path.join(BINDINGS_DIR, "testdata", "abi_check.c")
        subprocess.run([cc, "-Wall", "-Werror", "-std=c11", "-D_DEFAULT_SOURCE", "-I", BINDINGS_DIR, src,
                        "-o", exe, "-L", BINDINGS_DIR, "-lshockwave", "-Wl,-rpath," + BINDINGS_DIR],
                       check=True)
        out = subprocess.run([exe], capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        layout = dict(line.split() for line in out.stdout.splitlines() if line.count(" ") == 1)
        self.assertEqual(int(layout["sizeof"]), ctypes.sizeof(_lib.Control))
        for name in ("magic", "version", "lease", "batch_size", "lease_seq", "steps", "active", "gate", "rank", "world"):
            self.assertEqual(int(layout[name]), getattr(_lib.Control, name).offset, name)

    def test_python_constants_match_the_header(self):
        with open(HEADER) as f:
            text = f.read()
        defines = {m[0]: int(m[1], 0) for m in re.findall(r"#define SHOCKWAVE_(\w+) (-?(?:0x)?[0-9A-Fa-f]+)u?", text)}
        want = {
            "ABI_VERSION": _lib.ABI_VERSION, "OK": _lib.OK, "SUSPEND": _lib.SUSPEND, "RESUME": _lib.RESUME,
            "TIMEOUT": _lib.TIMEOUT, "ENDED": _lib.ENDED, "PREEMPTED": _lib.PREEMPTED, "WAIT": _lib.WAIT,
            "ERR_INVALID": _lib.ERR_INVALID, "ERR_HANDLE": _lib.ERR_HANDLE, "ERR_FORKED": _lib.ERR_FORKED,
            "ERR_CONNECT": _lib.ERR_CONNECT, "ERR_REFUSED": _lib.ERR_REFUSED, "ERR_CLOSED": _lib.ERR_CLOSED,
            "ERR_INTERNAL": _lib.ERR_INTERNAL, "ERR_RANK_LOST": _lib.ERR_RANK_LOST, "LEASE_RUN": _lib.LEASE_RUN, "LEASE_PENDING": _lib.LEASE_PENDING,
            "LEASE_SUSPEND": _lib.LEASE_SUSPEND, "LEASE_EXIT": _lib.LEASE_EXIT, "LEASE_CLOSED": _lib.LEASE_CLOSED,
            "CONTROL_MAGIC": _lib.CONTROL_MAGIC,
        }
        for name, value in want.items():
            self.assertEqual(defines.get(name), value, name)

    def test_every_declared_function_is_exported(self):
        with open(HEADER) as f:
            declared = set(re.findall(r"^int (shockwave_\w+)\(", f.read(), re.M))
        self.assertGreaterEqual(len(declared), 12)
        lib = ctypes.CDLL(LIBRARY)
        for name in sorted(declared):
            self.assertTrue(hasattr(lib, name), name)


if __name__ == "__main__":
    unittest.main()
