"""shockwave.Job: a training job scheduled by a Shockwave coordinator."""

from __future__ import annotations

import ctypes
import inspect
import json
import os
import threading
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple, TypeVar

from . import _lib
from .errors import (
    ForkedProcessError,
    InvalidArgument,
    JobClosed,
    JobEnded,
    Preempted,
    RankLost,
    ShockwaveError,
)

T = TypeVar("T")
Hook = Callable[..., Any]

# Set in a child forked after this module loaded; such a child never enters
# the library (the C layer refuses too, but this saves the call).
_forked = False


def _after_fork_in_child() -> None:
    global _forked, _open_lock
    _forked = True
    _open_lock = threading.Lock()  # another thread may have held it at the fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

# Serialises shockwave_open with the read of its error (handle 0 is shared).
_open_lock = threading.Lock()

# How long one blocking library call waits before Python regains control
# (so that Ctrl-C and thread switches are prompt).
_WAIT_SLICE_MS = 200

_FORK_MESSAGE = (
    "shockwave: job {id} was opened by process {parent}; this is process {me}, forked after the "
    "library loaded, and the Go runtime does not survive fork(). Use the job only in the process "
    "that opened it (DataLoader workers must not touch it), or open a job in a spawned process."
)


class Job:
    """A training job registered with a Shockwave coordinator.

    Creating a Job registers it (blocking until the coordinator answers) and
    starts reporting progress in the background. Use it as a context manager:
    leaving the ``with`` block normally reports the job finished; leaving it
    with an exception (``Preempted`` included) only disconnects, so a restarted
    process resumes the job::

        with shockwave.Job(model="mlp", batch_size=64, dataset_size=60000,
                           epochs=10, job_id="mlp-1",
                           on_suspend=save, on_resume=load) as job:
            for epoch in range(10):
                for x, y in job.iterate(loader):
                    train_step(x, y)

    Keyword arguments (see bindings/shockwave.h, ``shockwave_open``):

    model: model family, e.g. "ResNet-18" (required).
    batch_size: initial batch size (required).
    dataset_size: samples per epoch (required).
    epochs, samples, total_steps: the job's length; exactly one.
    job_id: the job id (default $SHOCKWAVE_JOB_ID, else derived from name).
        A restarted process uses the same id to resume.
    name: a label for people; the id derives from it when job_id is absent.
    url: the coordinator's NATS URL (default $SHOCKWAVE_NATS_URL, else
        nats://127.0.0.1:4222).
    token, creds, prefix: authentication and subject prefix.
    tls_ca: CA file (PEM) that signed the coordinator's TLS certificate
        (default $SHOCKWAVE_TLS_CA).
    tls_cert, tls_key: the job's client certificate and key (PEM), for a
        server that requires client certificates; both or neither (default
        $SHOCKWAVE_TLS_CERT and $SHOCKWAVE_TLS_KEY).
    workers: GPUs per round (default 1).
    adaptation: "static", "gns" or "accordion".
    schedule: planned batch size per epoch (a list of ints), or a dict with
        "batch_sizes" and "epoch_seconds".
    priority, throughput, isolated_seconds: scheduling hints.
    resume: the dict of :attr:`state` saved with a checkpoint.
    exit_mode: True for launchers that restart processes: a suspension
        raises :class:`Preempted` instead of waiting (default
        $SHOCKWAVE_EXIT_MODE == "1").
    on_suspend: called when the job loses its GPUs (save a checkpoint, free
        GPU memory): with the lease (a dict) if it takes an argument, else
        with none. The lease is the SUSPEND lease on rank 0 and the lease the
        rank ran under on the other ranks.
    on_resume: called when a RUN lease ends a suspension (move the model to
        the granted device, restore the checkpoint): with the RUN lease (its
        "devices" name the grant per node) if it takes an argument.
    rank, world_size: this process's rank of a multi-process job (default
        $RANK and $WORLD_SIZE, as torchrun sets them). Rank 0 registers and
        reports; the other ranks attach to the same job_id. Every rank stops
        at the same step and resumes at the same step (docs/multirank.md).
    local_rank: the rank's index on its node (default $LOCAL_RANK).
    rank_timeout, rank_join_timeout: seconds a rank may be silent before the
        others raise :class:`RankLost` (default 10), and to join (default 120).
    node, visible_devices: a resident process's node and the local devices it
        can use (default $SHOCKWAVE_NODE outside EXIT mode).
    sample_interval: seconds between progress reports (default a quarter round).
    register_timeout: seconds to retry an unreachable coordinator (default 30).
    agent_socket: path of the node agent's job socket (default
        $SHOCKWAVE_AGENT_SOCKET): a single-process job that the agent did not
        start then registers, reports and receives its leases through the
        agent, resident on its node, instead of opening a NATS connection;
        when the socket is unreachable or the agent refuses, NATS as usual.
    library: path of libshockwave.so (overrides the search; first load only).
    """

    def __init__(
        self,
        *,
        model: str,
        batch_size: int,
        dataset_size: int,
        epochs: Optional[int] = None,
        samples: Optional[int] = None,
        total_steps: Optional[int] = None,
        job_id: Optional[str] = None,
        name: Optional[str] = None,
        url: Optional[str] = None,
        token: Optional[str] = None,
        creds: Optional[str] = None,
        tls_ca: Optional[str] = None,
        tls_cert: Optional[str] = None,
        tls_key: Optional[str] = None,
        prefix: Optional[str] = None,
        workers: Optional[int] = None,
        adaptation: Optional[str] = None,
        schedule: Optional[Any] = None,
        priority: Optional[float] = None,
        throughput: Optional[float] = None,
        isolated_seconds: Optional[float] = None,
        resume: Optional[Dict[str, Any]] = None,
        exit_mode: Optional[bool] = None,
        on_suspend: Optional[Hook] = None,
        on_resume: Optional[Hook] = None,
        sample_interval: Optional[float] = None,
        register_timeout: Optional[float] = None,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        local_rank: Optional[int] = None,
        rank_timeout: Optional[float] = None,
        rank_join_timeout: Optional[float] = None,
        node: Optional[str] = None,
        visible_devices: Optional[List[int]] = None,
        agent_socket: Optional[str] = None,
        library: Optional[str] = None,
    ) -> None:
        self._handle = 0
        self._cb: Optional[_lib.Control] = None
        if on_suspend is not None and not callable(on_suspend):
            raise InvalidArgument("shockwave: on_suspend must be callable")
        if on_resume is not None and not callable(on_resume):
            raise InvalidArgument("shockwave: on_resume must be callable")
        self.on_suspend: Optional[Hook] = on_suspend
        self.on_resume: Optional[Hook] = on_resume
        if isinstance(schedule, (list, tuple)):
            schedule = {"batch_sizes": list(schedule)}
        config = {
            "model": model,
            "batch_size": batch_size,
            "dataset_size": dataset_size,
            "epochs": epochs,
            "samples": samples,
            "total_steps": total_steps,
            "job": job_id,
            "name": name,
            "url": url,
            "token": token,
            "creds": creds,
            "tls_ca": tls_ca,
            "tls_cert": tls_cert,
            "tls_key": tls_key,
            "prefix": prefix,
            "workers": workers,
            "adaptation": adaptation,
            "schedule": schedule,
            "priority": priority,
            "throughput": throughput,
            "isolated_seconds": isolated_seconds,
            "resume": resume,
            "exit_mode": exit_mode,
            "sample_interval": sample_interval,
            "register_timeout": register_timeout,
            "rank": rank,
            "world_size": world_size,
            "local_rank": local_rank,
            "rank_timeout": rank_timeout,
            "rank_join_timeout": rank_join_timeout,
            "node": node,
            "visible_devices": visible_devices,
            "agent_socket": agent_socket,
        }
        config = {k: v for k, v in config.items() if v is not None}
        try:
            blob = json.dumps(config, allow_nan=False).encode()
        except (TypeError, ValueError) as e:
            raise InvalidArgument(f"shockwave: Job arguments are not JSON values: {e}") from e
        if _forked:
            raise ForkedProcessError(
                "shockwave: this process was forked after the library loaded; open jobs in the parent "
                "or in a spawned process"
            )
        lib = _lib.load(library)
        self._lib = lib
        handle = ctypes.c_int64(0)
        with _open_lock:
            st = lib.shockwave_open(blob, ctypes.byref(handle))
            if st != _lib.OK:
                raise _lib.error(st, 0)
        self._handle = handle.value
        self._pid = os.getpid()
        ptr = ctypes.c_void_p(0)
        st = lib.shockwave_control_block(self._handle, ctypes.byref(ptr))
        if st != _lib.OK:
            err = _lib.error(st, self._handle)
            lib.shockwave_close(self._handle)
            raise err
        cb = _lib.Control.from_address(ptr.value)
        if cb.magic != _lib.CONTROL_MAGIC or cb.version != _lib.CONTROL_VERSION:
            lib.shockwave_close(self._handle)
            raise ShockwaveError(f"shockwave: control block has magic {cb.magic:#x} version {cb.version}")
        self._cb = cb
        self._rank, self._world = int(cb.rank), int(cb.world)
        if local_rank is None:
            local_rank = int(os.environ.get("LOCAL_RANK", "0") or 0)
        self._local_rank = local_rank
        self._node = node or (os.environ.get("SHOCKWAVE_NODE", "") if not exit_mode else "")
        self._id = config.get("job") or ""
        self._mu = threading.Lock()  # guards _active and the hooks' bookkeeping
        self._active = 0
        self._closed = False
        self._finished = False
        try:
            self._id = self.lease.get("job") or self._id
        except ShockwaveError:
            pass

    # ---- context manager -------------------------------------------------

    def __enter__(self) -> "Job":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._closed or _forked or os.getpid() != self._pid:
            return
        try:
            if exc_type is None and not self._finished:
                self.finish()
        finally:
            self.close()

    def __reduce__(self):
        raise TypeError(
            "a shockwave.Job cannot be pickled or sent to another process: it lives in the process that "
            "opened it"
        )

    def __del__(self) -> None:
        # A job dropped without close(): release the handle (not in a child).
        try:
            if self._handle and not self._closed and not _forked and os.getpid() == self._pid:
                self._closed = True
                self._lib.shockwave_close(self._handle)
        except Exception:
            pass

    # ---- iteration -------------------------------------------------------

    def iterate(self, iterable: Iterable[T], *, epoch: bool = True) -> Iterator[T]:
        """Yields the batches of iterable while the job holds a RUN lease.

        Before each batch the lease state is read from shared memory (no call
        into the library); the library is entered only when the state is not
        RUN. Then, in the default mode, ``on_suspend`` runs, the generator
        blocks until the coordinator grants a RUN lease again, ``on_resume``
        runs and iteration continues; in EXIT mode ``on_suspend`` runs and
        :class:`Preempted` is raised. Before the job's first lease the
        generator just waits. :class:`JobEnded` is raised when the coordinator
        ends the job.

        Each batch counts as one step when the loop asks for the next one.
        When iterable is exhausted, the pass counts as one epoch (``epoch=False``
        for iterables that are not one pass over the data set). Several
        iterations over one job may run at once (from several threads); the
        steps of all count.
        """
        self._check()
        cb = self._cb
        with self._mu:
            self._active += 1
            cb.active = 1
        try:
            if self._world > 1:
                # A multi-process job also crosses into the library when the
                # step count reaches the gate (the next check of the ranks'
                # agreement on where to stop): a second shared-memory read.
                for batch in iterable:
                    if cb.lease or cb.steps >= cb.gate:
                        self._boundary()
                    yield batch
                    cb.steps += 1
            else:
                for batch in iterable:
                    if cb.lease:
                        self._boundary()
                    yield batch
                    cb.steps += 1
            if epoch:
                self._call(self._lib.shockwave_epoch)
        finally:
            with self._mu:
                self._active -= 1
                if self._active == 0 and self._cb is not None:
                    cb.active = 0

    def wait_for_lease(self) -> None:
        """Blocks until the job may train, running the hooks as iterate does.

        Returns at once while a RUN lease holds. Use it before expensive setup
        that should happen only on granted GPUs.
        """
        self._check()
        cb = self._cb
        if cb.lease or (self._world > 1 and cb.steps >= cb.gate):
            self._boundary()

    def _boundary(self) -> None:
        """Handles a lease state other than RUN at an iteration boundary."""
        self._check()
        st = self._lib.shockwave_boundary(self._handle)
        if st == _lib.OK:
            return
        if st < 0:
            raise _lib.error(st, self._handle)
        if st == _lib.ENDED:
            raise JobEnded(self._ended_message(), st)
        if st in (_lib.SUSPEND, _lib.PREEMPTED):
            self._run_hook(self.on_suspend, self.lease)
            if st == _lib.PREEMPTED:
                raise Preempted(
                    f"shockwave: job {self._id} was preempted (EXIT mode): exit now; "
                    "the restarted process resumes from its checkpoint",
                    st,
                )
        self._wait_run()

    def _wait_run(self) -> None:
        cb = self._cb
        cb.active = 0
        try:
            while True:
                self._check()
                st = self._lib.shockwave_wait_run(self._handle, _WAIT_SLICE_MS)
                if st == _lib.TIMEOUT:
                    continue
                if st < 0:
                    raise _lib.error(st, self._handle)
                if st == _lib.ENDED:
                    raise JobEnded(self._ended_message(), st)
                if st == _lib.RESUME:
                    self._run_hook(self.on_resume, self.grant)
                return
        finally:
            with self._mu:
                if self._active:
                    cb.active = 1

    def _run_hook(self, hook: Optional[Hook], lease: Dict[str, Any]) -> None:
        if hook is None:
            return
        if _takes_an_argument(hook):
            hook(lease)
        else:
            hook()

    def _ended_message(self) -> str:
        reason = ""
        try:
            reason = self.lease.get("reason", "")
        except ShockwaveError:
            pass
        msg = f"shockwave: the coordinator ended job {self._id}"
        return msg + (f": {reason}" if reason else "")

    # ---- reports ---------------------------------------------------------

    def set_batch_size(self, batch_size: int) -> None:
        """Adopts a new batch size (Accordion, GNS); later steps count at it.

        The caller changes its DataLoader's batch size; this tells the
        coordinator, which rescales the job's remaining work.
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int):
            raise InvalidArgument(f"shockwave: set_batch_size: want an int, got {type(batch_size).__name__}")
        self._call(self._lib.shockwave_set_batch_size, batch_size)

    def end_epoch(self) -> None:
        """Reports an epoch end (iterate does it when its iterable is exhausted)."""
        self._call(self._lib.shockwave_epoch)

    def finish(self) -> None:
        """Reports that the job completed its work (idempotent).

        Returns once the coordinator has the done report (the SDK asks it,
        and sends again what it lacks), waiting 10 s at most; otherwise it
        raises the delivery error.
        """
        self._call(self._lib.shockwave_finish)
        self._finished = True

    def close(self) -> None:
        """Flushes pending reports (a few seconds at most) and disconnects.

        The coordinator keeps the job unless :meth:`finish` was called: a
        process that opens the same job id again resumes it. Idempotent.
        """
        if self._closed or not self._handle:
            return
        self._check()
        self._closed = True
        cb, self._cb = self._cb, None
        st = self._lib.shockwave_close(self._handle)
        if st < 0 and st != _lib.ERR_HANDLE:
            raise _lib.error(st, self._handle)

    # ---- state -----------------------------------------------------------

    @property
    def id(self) -> str:
        """The job id."""
        return self._id

    @property
    def batch_size(self) -> int:
        """The batch size the job reports."""
        self._check()
        return int(self._cb.batch_size)

    @property
    def steps(self) -> int:
        """Iterations counted since the job was opened in this process."""
        self._check()
        return int(self._cb.steps)

    @property
    def running(self) -> bool:
        """True while a RUN lease holds (one shared-memory read)."""
        self._check()
        return self._cb.lease == _lib.LEASE_RUN

    @property
    def lease(self) -> Dict[str, Any]:
        """The latest lease as a dict (protocol.Lease; empty before the first)."""
        return json.loads(self._text(self._lib.shockwave_lease))

    @property
    def grant(self) -> Dict[str, Any]:
        """The RUN lease this process trains under (empty while it holds none)."""
        return json.loads(self._text(self._lib.shockwave_grant))

    @property
    def rank(self) -> int:
        """This process's rank (0 for a single-process job)."""
        return self._rank

    @property
    def world_size(self) -> int:
        """The number of processes of the job."""
        return self._world

    @property
    def local_rank(self) -> int:
        """This rank's index among the job's ranks on its node."""
        return self._local_rank

    @property
    def devices(self) -> List[Tuple[str, int]]:
        """The current grant as (node, local device index) pairs, in rank order.

        A coordinator that names no nodes grants cluster-wide GPU ids only:
        they come back on a node named "". Empty while the job holds no RUN
        lease.
        """
        return lease_devices(self.grant)

    @property
    def local_devices(self) -> List[int]:
        """The granted device indices on this process's node.

        The node is ``node`` / $SHOCKWAVE_NODE when set, else the node of this
        rank's own device (the rank-th of :attr:`devices`).
        """
        devs = self.devices
        node = self._node
        if not node and devs:
            node = devs[min(self._rank, len(devs) - 1)][0]
        return [i for (n, i) in devs if n == node]

    def torch_device(self):
        """This rank's own device as a ``torch.device``.

        ``cuda:k`` for the local_rank-th granted device of this node, where k
        is its position in $CUDA_VISIBLE_DEVICES when that lists indices (a
        launcher such as the node agent restricts the process to its grant),
        else the device index itself; ``cpu`` when CUDA is unavailable or the
        job holds no grant.
        """
        import torch  # only callers that want a torch device need torch

        local = self.local_devices
        if not torch.cuda.is_available() or not local:
            return torch.device("cpu")
        idx = local[min(self._local_rank, len(local) - 1)]
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        entries = [e.strip() for e in visible.split(",") if e.strip()]
        if entries:
            if str(idx) in entries:
                return torch.device("cuda", entries.index(str(idx)))
            return torch.device("cuda", min(self._local_rank, len(entries) - 1))
        return torch.device("cuda", idx)

    @property
    def state(self) -> Dict[str, Any]:
        """The job's progress, to save with a checkpoint and pass as ``resume``."""
        return json.loads(self._text(self._lib.shockwave_state))

    # ---- plumbing --------------------------------------------------------

    def _check(self) -> None:
        if _forked or os.getpid() != self._pid:
            raise ForkedProcessError(
                _FORK_MESSAGE.format(id=self._id or "?", parent=self._pid, me=os.getpid()), _lib.ERR_FORKED
            )
        if self._closed:
            raise JobClosed(f"shockwave: job {self._id} is closed", _lib.ERR_CLOSED)

    def _call(self, fn, *args) -> int:
        self._check()
        st = fn(self._handle, *args)
        if st < 0:
            raise _lib.error(st, self._handle)
        return st

    def _text(self, fn) -> str:
        self._check()
        return _lib.text(fn, self._handle)

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("running" if self._cb and self._cb.lease == 0 else "waiting")
        return f"<shockwave.Job {self._id!r} {state}>"


def lease_devices(lease: Dict[str, Any]) -> List[Tuple[str, int]]:
    """A RUN lease's grant as (node, local device index) pairs."""
    if not lease or lease.get("action") != "RUN":
        return []
    devices = lease.get("devices")
    if devices:
        return [(d["node"], int(i)) for d in devices for i in d["devices"]]
    return [("", int(w)) for w in lease.get("workers") or []]


def _takes_an_argument(fn: Callable[..., Any]) -> bool:
    """Whether a hook accepts one positional argument (the lease)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    for p in sig.parameters.values():
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL):
            return True
    return False


def load_library(path: Optional[str] = None) -> str:
    """Loads libshockwave.so now (else the first Job loads it); returns its path.

    Raises :class:`~shockwave.errors.LibraryNotFound` with the places tried.
    """
    if _forked:
        raise ForkedProcessError("shockwave: cannot load the library in a forked child")
    _lib.load(path)
    return _lib.library_path() or ""
