"""Builds the shockwave wheel with the standard library only.

This is the package's PEP 517 build backend (``pyproject.toml`` names it,
with ``backend-path = ["."]``), so ``pip install ./bindings/python`` needs no
setuptools and no network, and ``make wheel`` runs it as a script::

    python3 bindings/python/shockwave_build.py [--library PATH] [--out DIR]

The wheel is a platform wheel, ``shockwave-<version>-py3-none-<platform>``:
the package is pure Python, but it carries ``libshockwave.so`` (built by
``make lib`` for this machine) inside the package directory, where the
package looks first after ``$SHOCKWAVE_LIBRARY``. The library is taken from
``--library``, else ``$SHOCKWAVE_LIBRARY``, else ``bindings/libshockwave.so``
next to this directory; without one the build stops and says to run
``make lib``. Nothing is written outside the output directory: no build/,
no *.egg-info.

The format follows the binary distribution format specification
(packaging.python.org, "Binary distribution format"): a zip with the
package files, then ``<name>-<version>.dist-info/`` holding METADATA,
WHEEL and RECORD (each file's urlsafe-base64 SHA-256 digest and size).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import re
import sys
import sysconfig
import zipfile
from typing import Dict, List, Optional, Tuple

NAME = "shockwave"
HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_DIR = os.path.join(HERE, NAME)
LIBRARY_NAME = "libshockwave.so"
# Fixed timestamp for every zip entry: the same inputs give the same bytes.
ZIP_TIME = (2020, 1, 1, 0, 0, 0)


class BuildError(Exception):
    """The wheel cannot be built; the message says why."""


def project() -> Dict[str, str]:
    """Name, version, summary and Python requirement from pyproject.toml.

    A small reader of the [project] table's string keys, since tomllib is
    not in every Python this package supports (3.8+).
    """
    path = os.path.join(HERE, "pyproject.toml")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
    if not m:
        raise BuildError(f"{path}: no [project] table")
    out = {}
    for key in ("name", "version", "description", "requires-python"):
        km = re.search(r'^%s\s*=\s*"([^"]*)"\s*$' % re.escape(key), m.group(1), re.M)
        if not km:
            raise BuildError(f"{path}: [project] has no {key}")
        out[key] = km.group(1)
    if not re.fullmatch(r"[0-9]+(\.[0-9]+)*", out["version"]):
        raise BuildError(f"{path}: version {out['version']!r} is not a plain release number")
    with open(os.path.join(PACKAGE_DIR, "__init__.py"), encoding="utf-8") as f:
        vm = re.search(r'^__version__ = "([^"]*)"', f.read(), re.M)
    if not vm or vm.group(1) != out["version"]:
        raise BuildError(f"{path}: version {out['version']} differs from shockwave.__version__ "
                         f"({vm.group(1) if vm else 'missing'})")
    return out


def platform_tag() -> str:
    """The wheel platform tag of this interpreter (e.g. linux_x86_64)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", sysconfig.get_platform())


def find_library(given: Optional[str] = None) -> str:
    """The libshockwave.so to bundle; raises BuildError naming what was tried."""
    tried = []
    for label, p in (("--library", given), ("$SHOCKWAVE_LIBRARY", os.environ.get("SHOCKWAVE_LIBRARY")),
                     ("make lib's output", os.path.join(os.path.dirname(HERE), LIBRARY_NAME))):
        if not p:
            continue
        if os.path.isfile(p):
            with open(p, "rb") as f:
                if f.read(4) != b"\x7fELF":
                    raise BuildError(f"{label} names {p}, which is not an ELF shared library")
            return p
        if label != "make lib's output":
            raise BuildError(f"{label} names {p}, which does not exist")
        tried.append(p)
    raise BuildError(f"{LIBRARY_NAME} not found at {', '.join(tried)}: run `make lib` first")


def package_files() -> List[Tuple[str, str]]:
    """(archive name, source path) of the package's own files, sorted."""
    out = []
    for name in sorted(os.listdir(PACKAGE_DIR)):
        if name.endswith(".py") or name == "py.typed":
            out.append((f"{NAME}/{name}", os.path.join(PACKAGE_DIR, name)))
    if not out:
        raise BuildError(f"{PACKAGE_DIR}: no package files")
    return out


def metadata(p: Dict[str, str]) -> str:
    return (
        "Metadata-Version: 2.1\n"
        f"Name: {p['name']}\n"
        f"Version: {p['version']}\n"
        f"Summary: {p['description']}\n"
        f"Requires-Python: {p['requires-python']}\n"
        "Classifier: Programming Language :: Python :: 3\n"
        "Classifier: Operating System :: POSIX :: Linux\n"
        "Classifier: Typing :: Typed\n"
    )


def wheel_file(tag: str) -> str:
    return f"Wheel-Version: 1.0\nGenerator: shockwave_build\nRoot-Is-Purelib: false\nTag: {tag}\n"


def record_line(arcname: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def build(out_dir: str, library: Optional[str] = None) -> str:
    """Writes the wheel into out_dir and returns its file name."""
    p = project()
    lib = find_library(library)
    tag = f"py3-none-{platform_tag()}"
    dist = f"{p['name']}-{p['version']}"
    wheel_name = f"{dist}-{tag}.whl"
    entries: List[Tuple[str, bytes, int]] = []
    for arc, src in package_files():
        with open(src, "rb") as f:
            entries.append((arc, f.read(), 0o644))
    with open(lib, "rb") as f:
        entries.append((f"{NAME}/{LIBRARY_NAME}", f.read(), 0o755))
    info = f"{dist}.dist-info"
    entries.append((f"{info}/METADATA", metadata(p).encode(), 0o644))
    entries.append((f"{info}/WHEEL", wheel_file(tag).encode(), 0o644))
    record = [record_line(a, d) for a, d, _ in entries] + [f"{info}/RECORD,,"]
    entries.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode(), 0o644))
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, wheel_name)
    tmp = path + ".part"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data, mode in entries:
            zi = zipfile.ZipInfo(arc, ZIP_TIME)
            zi.external_attr = (0o100000 | mode) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    os.replace(tmp, path)
    return wheel_name


# PEP 517 hooks. Only wheels: an sdist would need the Go sources.

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    library = (config_settings or {}).get("library")
    try:
        return build(wheel_directory, library)
    except BuildError as e:
        raise SystemExit(f"shockwave_build: {e}") from None


def get_requires_for_build_wheel(config_settings=None):
    return []


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description="Build the shockwave wheel (stdlib only, offline).")
    ap.add_argument("--library", help="libshockwave.so to bundle (default: $SHOCKWAVE_LIBRARY or bindings/libshockwave.so)")
    ap.add_argument("--out", default="dist", help="output directory (default: dist)")
    args = ap.parse_args(argv)
    try:
        name = build(args.out, args.library)
    except BuildError as e:
        print(f"shockwave_build: {e}", file=sys.stderr)
        return 1
    print(os.path.join(args.out, name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
