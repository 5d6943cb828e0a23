"""Exceptions of the shockwave package.

Every failure of the library surfaces as a :class:`ShockwaveError` (or a
subclass) whose message is the library's own, so it names the job and the
cause. Subclasses also derive from the matching built-in exception where one
fits, so ``except ValueError`` catches a bad argument.
"""

from __future__ import annotations

from typing import Optional

__all__ = [
    "ShockwaveError",
    "InvalidArgument",
    "LibraryNotFound",
    "ConnectError",
    "RegistrationRefused",
    "JobClosed",
    "ForkedProcessError",
    "Preempted",
    "JobEnded",
    "RankLost",
]


class ShockwaveError(Exception):
    """Base class of every error of this package.

    ``status`` is the library's status code (see ``bindings/shockwave.h``),
    or None when the error arose in Python.
    """

    status: Optional[int]

    def __init__(self, message: str, status: Optional[int] = None) -> None:
        super().__init__(message)
        self.status = status


class InvalidArgument(ShockwaveError, ValueError):
    """A bad argument: an unknown option, a value out of range."""


class LibraryNotFound(ShockwaveError, OSError):
    """libshockwave.so could not be found or loaded."""


class ConnectError(ShockwaveError, ConnectionError):
    """The coordinator could not be reached in time."""


class RegistrationRefused(ShockwaveError):
    """The coordinator refused the job (conflicting parameters, too wide...)."""


class JobClosed(ShockwaveError):
    """The job was finished or closed; the call is not allowed any more."""


class ForkedProcessError(ShockwaveError):
    """A job method was called in a process forked after the library loaded.

    The Go runtime inside the library does not survive ``fork()``, so a child
    process (a DataLoader worker, a ``multiprocessing`` child with the fork
    start method) must not use a job of its parent; it gets this error
    instead of a hang. Open a new job in a freshly spawned process instead.
    """


class Preempted(ShockwaveError):
    """EXIT mode: the job lost its GPUs.

    Raised by :meth:`shockwave.Job.iterate` after the ``on_suspend`` hook has
    run (save the checkpoint there). The process should exit; the launcher
    restarts it later, and it resumes from the checkpoint by opening the same
    job id again.
    """


class JobEnded(ShockwaveError):
    """The coordinator ended the job (an EXIT lease): stop for good."""


class RankLost(ShockwaveError):
    """A rank of a multi-process job was lost (it went silent, closed or
    restarted alone), so the ranks can no longer agree where to stop.

    Every surviving rank gets it at the agreed step, or at once while waiting.
    Exit non-zero: the launcher (the node agent, torchrun with restarts)
    restarts every rank, and the job resumes from its checkpoint.
    """
