"""Loading libshockwave.so and declaring its C interface (bindings/shockwave.h).

The library is looked up, in order, at

1. ``$SHOCKWAVE_LIBRARY`` (a path to the .so file),
2. the package directory (``shockwave/libshockwave.so``, for installed copies),
3. the build output of ``make lib`` (``bindings/libshockwave.so``, two levels
   above this package in a source checkout).

Nothing else is searched: a missing library raises
:class:`~shockwave.errors.LibraryNotFound` naming every place tried.
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import List, Optional

from .errors import (
    ConnectError,
    ForkedProcessError,
    InvalidArgument,
    JobClosed,
    LibraryNotFound,
    RankLost,
    RegistrationRefused,
    ShockwaveError,
)

ENV_LIBRARY = "SHOCKWAVE_LIBRARY"
LIBRARY_NAME = "libshockwave.so"
ABI_VERSION = 2

# Statuses (shockwave.h).
OK = 0
SUSPEND = 1
RESUME = 2
TIMEOUT = 3
ENDED = 4
PREEMPTED = 5
WAIT = 6

ERR_INVALID = -1
ERR_HANDLE = -2
ERR_FORKED = -3
ERR_CONNECT = -4
ERR_REFUSED = -5
ERR_CLOSED = -6
ERR_INTERNAL = -7
ERR_RANK_LOST = -8

# Lease states of the control block.
LEASE_RUN = 0
LEASE_PENDING = 1
LEASE_SUSPEND = 2
LEASE_EXIT = 3
LEASE_CLOSED = 4

CONTROL_MAGIC = 0x42435753
CONTROL_VERSION = 2

_ERRORS = {
    ERR_INVALID: InvalidArgument,
    ERR_HANDLE: JobClosed,
    ERR_FORKED: ForkedProcessError,
    ERR_CONNECT: ConnectError,
    ERR_REFUSED: RegistrationRefused,
    ERR_CLOSED: JobClosed,
    ERR_RANK_LOST: RankLost,
}


class Control(ctypes.Structure):
    """The per-job control block (``shockwave_control`` in shockwave.h)."""

    _fields_ = [
        ("magic", ctypes.c_uint32),
        ("version", ctypes.c_uint32),
        ("lease", ctypes.c_int32),
        ("batch_size", ctypes.c_int32),
        ("lease_seq", ctypes.c_uint64),
        ("steps", ctypes.c_uint64),
        ("active", ctypes.c_int32),
        ("reserved0", ctypes.c_int32),
        ("gate", ctypes.c_uint64),
        ("rank", ctypes.c_int32),
        ("world", ctypes.c_int32),
        ("reserved", ctypes.c_uint64 * 2),
    ]


def candidates() -> List[str]:
    """The paths tried, in order, to find the library."""
    out = []
    env = os.environ.get(ENV_LIBRARY)
    if env:
        out.append(env)
    here = os.path.dirname(os.path.abspath(__file__))
    out.append(os.path.join(here, LIBRARY_NAME))
    out.append(os.path.normpath(os.path.join(here, "..", "..", LIBRARY_NAME)))
    return out


_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
_lib_path: Optional[str] = None


def load(path: Optional[str] = None) -> ctypes.CDLL:
    """Loads the library once per process and returns it.

    ``path`` overrides the search; it is honoured only by the first call
    that actually loads the library.
    """
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = [path] if path else candidates()
        env_set = bool(os.environ.get(ENV_LIBRARY)) and not path
        errors = []
        for i, p in enumerate(tried):
            if not os.path.exists(p):
                if i == 0 and (path or env_set):
                    who = "the path given" if path else "$" + ENV_LIBRARY
                    raise LibraryNotFound(f"shockwave: {who} names {p}, which does not exist")
                errors.append(f"{p}: no such file")
                continue
            try:
                lib = ctypes.CDLL(p)
            except OSError as e:
                raise LibraryNotFound(f"shockwave: cannot load {p}: {e}") from e
            _declare(lib, p)
            _lib, _lib_path = lib, p
            return lib
        raise LibraryNotFound(
            "shockwave: libshockwave.so not found. Install the wheel (`make wheel` in the "
            "shockwave source tree, then pip install dist/shockwave-*.whl), build the library "
            "with `make lib`, or set $" + ENV_LIBRARY + " to its path. Tried: "
            + "; ".join(errors)
        )


def library_path() -> Optional[str]:
    """The path of the loaded library, or None before it loads."""
    return _lib_path


def _declare(lib: ctypes.CDLL, path: str) -> None:
    """Declares the prototypes and checks the ABI version."""
    i64, i32, sz = ctypes.c_int64, ctypes.c_int, ctypes.c_size_t
    cp, buf = ctypes.c_char_p, ctypes.c_char_p
    protos = {
        "shockwave_abi_version": [],
        "shockwave_open": [cp, ctypes.POINTER(i64)],
        "shockwave_control_block": [i64, ctypes.POINTER(ctypes.c_void_p)],
        "shockwave_boundary": [i64],
        "shockwave_wait_run": [i64, i64],
        "shockwave_epoch": [i64],
        "shockwave_set_batch_size": [i64, i64],
        "shockwave_lease": [i64, buf, sz, ctypes.POINTER(sz)],
        "shockwave_state": [i64, buf, sz, ctypes.POINTER(sz)],
        "shockwave_grant": [i64, buf, sz, ctypes.POINTER(sz)],
        "shockwave_finish": [i64],
        "shockwave_close": [i64],
        "shockwave_last_error": [i64, buf, sz, ctypes.POINTER(sz)],
    }
    for name, args in protos.items():
        try:
            fn = getattr(lib, name)
        except AttributeError as e:
            raise LibraryNotFound(f"shockwave: {path} lacks {name}: not a libshockwave.so of this version") from e
        fn.argtypes = args
        fn.restype = i32
    got = lib.shockwave_abi_version()
    if got != ABI_VERSION:
        raise LibraryNotFound(
            f"shockwave: {path} speaks ABI version {got}, this package needs {ABI_VERSION}; rebuild with `make lib`"
        )


def text(fn, handle: int) -> str:
    """Calls one of the snprintf-style text functions and returns its text."""
    cap = 256
    while True:
        out = ctypes.create_string_buffer(cap)
        n = ctypes.c_size_t(0)
        st = fn(handle, out, cap, ctypes.byref(n))
        if st < 0:
            raise error(st, handle)
        if n.value < cap:
            return out.value.decode("utf-8", "replace")
        cap = n.value + 1


def last_error(handle: int) -> str:
    """The library's message for the most recent error on handle."""
    lib = load()
    cap = 512
    while True:
        out = ctypes.create_string_buffer(cap)
        n = ctypes.c_size_t(0)
        if lib.shockwave_last_error(handle, out, cap, ctypes.byref(n)) != OK:
            return ""
        if n.value < cap:
            return out.value.decode("utf-8", "replace")
        cap = n.value + 1


def error(status: int, handle: int, message: Optional[str] = None) -> ShockwaveError:
    """The exception for a negative status, with the library's message."""
    if message is None:
        message = last_error(handle) or f"shockwave: error status {status}"
    return _ERRORS.get(status, ShockwaveError)(message, status)
