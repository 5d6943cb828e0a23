#!/usr/bin/env python3
"""A data-parallel (DDP) PyTorch job scheduled by Shockwave: one process per device.

Every rank links the Shockwave SDK. torchrun (or the node agent) sets RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT; rank 0 registers the
job and reports its progress, the other ranks attach to the same job id, and
the job is one scheduling unit of WORLD_SIZE GPUs. When the coordinator
suspends the job, every rank stops at the same step (no rank is left
waiting in an all-reduce), runs ``on_suspend`` (rank 0 saves the checkpoint;
every rank drops its model, optimizer and DDP wrapper and empties the CUDA
cache), and waits; on the next RUN lease every rank resumes at the same
step on the device the lease grants it (``job.torch_device()``), reloading
the checkpoint there. The process group stays up across a suspension (gloo
on CPU, NCCL on GPU); the model memory is what is released.

Run a coordinator (``shockwave coordinator --gpus 2 --round 2s``), then::

    PYTHONPATH=bindings/python torchrun --nproc_per_node 2 examples/pytorch/train_ddp.py \\
        --url nats://127.0.0.1:4222 --job-id ddp-1 --checkpoint /tmp/ddp-1.pt

At the end every rank prints ``final <sha256 of the parameters>``: runs with
the same seed print the same digest however often they were suspended.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import itertools
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import shockwave

FEATURES, CLASSES = 32, 10


def say(line: str) -> None:
    """Writes one whole line at once: the ranks share the job's output file,
    and print() writes the text and its newline apart when output is
    unbuffered, so two ranks' lines could interleave."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def log(rank: int, msg: str) -> None:
    say(f"[{time.strftime('%H:%M:%S')}] rank {rank}: {msg}")


def make_data(samples: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, FEATURES, generator=g)
    teacher = torch.randn(FEATURES, CLASSES, generator=g)
    return TensorDataset(x, (x @ teacher).argmax(dim=1))


def make_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)  # every rank builds the same initial weights
    return nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, CLASSES))


def digest(model: nn.Module) -> str:
    h = hashlib.sha256()
    for name, t in model.state_dict().items():
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


class Trainer:
    """One rank's training state: built on the granted device, dropped on suspension."""

    def __init__(self, args: argparse.Namespace, rank: int) -> None:
        self.args, self.rank = args, rank
        self.model: nn.Module | None = None
        self.ddp: DDP | None = None
        self.opt: torch.optim.Optimizer | None = None
        self.device = torch.device("cpu")
        self.epoch = 0
        self.job: shockwave.Job | None = None
        self.job_state = None

    def checkpoint(self) -> dict | None:
        if not os.path.exists(self.args.checkpoint):
            return None
        return torch.load(self.args.checkpoint, map_location="cpu")

    def build(self, device: torch.device) -> None:
        """Creates the model and optimizer on device from the checkpoint (or the seed)."""
        self.device = device
        model = make_model(self.args.seed).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        ck = self.checkpoint()
        if ck is not None:
            model.load_state_dict(ck["model"])
            opt.load_state_dict(ck["opt"])  # moves the momentum buffers to the parameters' device
            self.epoch, self.job_state = ck["epoch"], ck["job"]
        self.model, self.opt = model, opt
        # Wrapping broadcasts rank 0's parameters: every rank builds here,
        # at the same step, so the collective lines up. DDP normally
        # re-orders its gradient buckets after a wrapper's first iteration;
        # a new wrapper after every resumption would then sum the gradients
        # of more than two ranks in another order than an uninterrupted run
        # (same values, other rounding). find_unused_parameters keeps the
        # initial bucket order for good, so the result stays bit-identical.
        self.ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None,
                       find_unused_parameters=True)

    def save(self) -> None:
        tmp = self.args.checkpoint + ".tmp"
        torch.save({"model": self.model.state_dict(), "opt": self.opt.state_dict(), "epoch": self.epoch,
                    "job": self.job.state}, tmp)
        os.replace(tmp, self.args.checkpoint)

    def drop(self) -> None:
        """Releases the device memory: no tensor of the model stays on the GPU."""
        self.ddp = self.model = self.opt = None
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    # Shockwave hooks: every rank calls them at the same step boundary.
    def on_suspend(self, lease: dict) -> None:
        step = self.job.state["steps_done"]
        if self.rank == 0:
            self.save()
        self.drop()
        log(self.rank, f"suspended at step {step} ({lease.get('reason') or lease.get('action')})")

    def on_resume(self, lease: dict) -> None:
        device = self.job.torch_device()
        self.build(device)
        log(self.rank, f"resumed at step {self.job.state['steps_done']} on {device} (grant {self.job.devices})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default=os.environ.get("SHOCKWAVE_NATS_URL", "nats://127.0.0.1:4222"))
    ap.add_argument("--job-id", default=os.environ.get("SHOCKWAVE_JOB_ID", "pytorch-ddp"))
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--samples", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=32, help="per-rank batch size")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--checkpoint", default="pytorch-ddp.pt")
    ap.add_argument("--exit-mode", action="store_true", help="exit on preemption (a launcher restarts every rank)")
    ap.add_argument("--step-delay", type=float, default=0.0, help="extra seconds per step")
    ap.add_argument("--rank-timeout", type=float, default=None, help="seconds before a silent rank counts as lost")
    args = ap.parse_args()

    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    torch.set_num_threads(1)
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend)
    data = make_data(args.samples, args.seed)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=args.seed, drop_last=True)
    loader = DataLoader(data, batch_size=args.batch, sampler=sampler)
    loss_fn = nn.CrossEntropyLoss()
    tr = Trainer(args, rank)
    ck = tr.checkpoint()
    if ck is not None:
        tr.epoch, tr.job_state = ck["epoch"], ck["job"]
        log(rank, f"restarting from {args.checkpoint} at epoch {tr.epoch}")
    code = 0
    try:
        with shockwave.Job(model="pytorch-ddp-mlp", job_id=args.job_id, url=args.url,
                           batch_size=args.batch * world, dataset_size=len(sampler) * world, epochs=args.epochs,
                           workers=world, resume=tr.job_state if rank == 0 else None, exit_mode=args.exit_mode,
                           rank_timeout=args.rank_timeout, on_suspend=tr.on_suspend, on_resume=tr.on_resume) as job:
            tr.job = job
            log(rank, f"joined job {job.id} as rank {job.rank} of {job.world_size}; waiting for a lease")
            job.wait_for_lease()
            device = job.torch_device()
            if device.type == "cuda":
                torch.cuda.set_device(device)
            tr.build(device)
            log(rank, f"training on {device} (grant {job.devices}) from step {job.state['steps_done']}")
            # A restart resumes mid-epoch: skip the batches of the epoch already done.
            skip = (tr.job_state or {}).get("samples_in_epoch", 0) // (args.batch * world)
            while tr.epoch < args.epochs:
                sampler.set_epoch(tr.epoch)
                for x, y in job.iterate(itertools.islice(loader, skip, None)):
                    x, y = x.to(tr.device), y.to(tr.device)
                    tr.opt.zero_grad()
                    loss_fn(tr.ddp(x), y).backward()
                    tr.opt.step()
                    if args.step_delay:
                        time.sleep(args.step_delay)
                skip = 0
                tr.epoch += 1
            log(rank, f"done: {tr.epoch} epochs, steps {job.state['steps_done']}")
            say(f"final {rank} {digest(tr.model)}")
    except shockwave.Preempted as e:
        log(rank, f"preempted: {e}")
    except shockwave.RankLost as e:
        log(rank, f"rank lost: {e}")
        code = 3
    except shockwave.JobEnded as e:
        log(rank, f"ended by the coordinator: {e}")
        code = 2
    finally:
        if code == 0:
            dist.destroy_process_group()
    if code == 0 and rank == 0 and tr.epoch >= args.epochs and os.path.exists(args.checkpoint):
        os.remove(args.checkpoint)
    return code


if __name__ == "__main__":
    sys.exit(main())
