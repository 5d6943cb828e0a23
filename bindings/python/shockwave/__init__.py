"""Shockwave for Python training jobs.

This package loads ``libshockwave.so`` (the Go SDK built as a C library, see
``bindings/shockwave.h``) through ctypes; it needs nothing but the standard
library. A job registers with a running coordinator, wraps its data loader,
and trains while the coordinator's leases allow::

    import shockwave

    with shockwave.Job(model="resnet18", batch_size=64, dataset_size=50000,
                       epochs=90, job_id="resnet18-a",
                       on_suspend=save_checkpoint,
                       on_resume=load_checkpoint) as job:
        for epoch in range(90):
            for x, y in job.iterate(loader):
                step(x, y)

The per-step path never calls into the library: lease state and step
counters live in a small shared memory block that Python reads and writes
directly, and a goroutine of the library turns the counters into progress
reports. A process forked after the library loads (DataLoader workers) keeps
working in the parent; a child that touches a job gets
:class:`ForkedProcessError`.

The library is found through ``$SHOCKWAVE_LIBRARY``, the package directory,
or the build output of ``make lib`` (see :func:`load_library`).
"""

from ._job import Job, load_library
from .errors import (
    ConnectError,
    ForkedProcessError,
    InvalidArgument,
    JobClosed,
    JobEnded,
    LibraryNotFound,
    Preempted,
    RankLost,
    RegistrationRefused,
    ShockwaveError,
)

__all__ = [
    "Job",
    "load_library",
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

__version__ = "0.1.0"
