#!/usr/bin/env python3
"""A PyTorch training job scheduled by Shockwave.

A small MLP learns a random teacher network's labels on generated data, so
it runs on a CPU in seconds. It shows the three things a Shockwave job does:

* it trains through ``job.iterate(loader)``, a DataLoader with two worker
  processes (forked after libshockwave.so loaded: they never touch the job);
* it switches its batch size Accordion-style: a small batch while the
  gradient norm changes fast (a critical regime), a large one otherwise,
  and reports each switch with ``job.set_batch_size``;
* it checkpoints in ``on_suspend`` and then releases the device memory (the
  model and optimizer are dropped and ``torch.cuda.empty_cache()`` returns
  the cached blocks), and in ``on_resume`` rebuilds them on the device the
  RUN lease grants (``job.torch_device()``) from the checkpoint (or, in
  EXIT mode, exits on ``shockwave.Preempted`` and resumes from the
  checkpoint when started again with the same job id). The hooks receive
  the lease.

Run a coordinator (``shockwave coordinator --gpus 1 --round 2s``) and then::

    PYTHONPATH=bindings/python python3 examples/pytorch/train.py \\
        --url nats://127.0.0.1:4222 --job-id mlp-1 --checkpoint /tmp/mlp-1.pt
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import shockwave

FEATURES, CLASSES, SAMPLES = 32, 10, 4096
SMALL_BATCH, LARGE_BATCH = 32, 128
CRITICAL_CHANGE = 0.5  # Accordion's eta: relative gradient-norm change marking a critical regime


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def make_data(seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    teacher = torch.randn(FEATURES, CLASSES, generator=g)
    y = (x @ teacher).argmax(dim=1)
    return TensorDataset(x, y)


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, CLASSES))


def loader_for(data: TensorDataset, batch_size: int, workers: int) -> DataLoader:
    return DataLoader(data, batch_size=batch_size, shuffle=True, num_workers=workers,
                      persistent_workers=False)


def grad_norm(model: nn.Module) -> float:
    return float(torch.sqrt(sum((p.grad.detach() ** 2).sum() for p in model.parameters() if p.grad is not None)))


class Trainer:
    """The training state and its checkpoint."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.device = torch.device("cpu")
        self.model: nn.Module | None = None
        self.opt: torch.optim.Optimizer | None = None
        self.build(self.device)
        self.epoch = 0
        self.batch_size = SMALL_BATCH
        self.prev_norm = None  # gradient norm at the previous epoch's end
        self.job_state = None  # the Shockwave job's progress at the checkpoint
        self.job: shockwave.Job | None = None

    def save(self) -> None:
        self.job_state = self.job.state if self.job else self.job_state
        tmp = self.path + ".tmp"
        torch.save({"model": self.model.state_dict(), "opt": self.opt.state_dict(), "epoch": self.epoch,
                    "batch_size": self.batch_size, "prev_norm": self.prev_norm, "job": self.job_state}, tmp)
        os.replace(tmp, self.path)

    def build(self, device: torch.device) -> None:
        """Creates the model and optimizer on device, from the checkpoint if there is one."""
        self.device = device
        self.model = make_model().to(device)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9)
        self.load()

    def release(self) -> None:
        """Drops every tensor of the model and optimizer and returns the GPU's cached memory."""
        self.model = self.opt = None
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def load(self) -> bool:
        if not os.path.exists(self.path):
            return False
        ck = torch.load(self.path, map_location=self.device)
        self.model.load_state_dict(ck["model"])
        self.opt.load_state_dict(ck["opt"])
        self.epoch, self.batch_size = ck["epoch"], ck["batch_size"]
        self.prev_norm, self.job_state = ck["prev_norm"], ck["job"]
        return True

    # Shockwave hooks: called at an iteration boundary, never concurrently
    # with a training step.
    def on_suspend(self, lease: dict) -> None:
        self.save()
        self.release()
        log(f"suspended at epoch {self.epoch}: checkpoint saved to {self.path}, device memory released")

    def on_resume(self, lease: dict) -> None:
        device = self.job.torch_device()
        self.build(device)
        log(f"resumed from checkpoint at epoch {self.epoch} (batch size {self.batch_size}) on {device}, "
            f"grant {self.job.devices}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default=os.environ.get("SHOCKWAVE_NATS_URL", "nats://127.0.0.1:4222"))
    # Under `shockwave agent` the identity, checkpoint directory and EXIT
    # mode come from the environment the agent sets.
    ckpt_dir = os.environ.get("SHOCKWAVE_CHECKPOINT_DIR")
    ap.add_argument("--job-id", default=os.environ.get("SHOCKWAVE_JOB_ID", "pytorch-mlp"))
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--checkpoint", default=os.path.join(ckpt_dir, "pytorch-mlp.pt") if ckpt_dir else "pytorch-mlp.pt")
    ap.add_argument("--workers", type=int, default=2, help="DataLoader worker processes")
    ap.add_argument("--exit-mode", action="store_true", default=os.environ.get("SHOCKWAVE_EXIT_MODE") == "1",
                    help="exit on preemption (a launcher restarts the job)")
    ap.add_argument("--step-delay", type=float, default=0.0, help="extra seconds per step (slows the demo down)")
    args = ap.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(1)
    data = make_data()
    tr = Trainer(args.checkpoint)
    restarted = tr.load()
    if restarted:
        log(f"restarting from {args.checkpoint} at epoch {tr.epoch}")
    loss_fn = nn.CrossEntropyLoss()

    try:
        with shockwave.Job(model="pytorch-mlp", job_id=args.job_id, url=args.url, batch_size=SMALL_BATCH,
                           dataset_size=SAMPLES, epochs=args.epochs, adaptation="accordion",
                           resume=tr.job_state, exit_mode=args.exit_mode,
                           on_suspend=tr.on_suspend, on_resume=tr.on_resume) as job:
            tr.job = job
            if tr.batch_size != SMALL_BATCH:
                job.set_batch_size(tr.batch_size)
            log(f"registered job {job.id}; waiting for a lease")
            job.wait_for_lease()
            if job.torch_device() != tr.device:
                tr.build(job.torch_device())
            log(f"training on {tr.device} (grant {job.devices})")
            while tr.epoch < args.epochs:
                loader = loader_for(data, tr.batch_size, args.workers)
                total, norms, n = 0.0, 0.0, 0
                for x, y in job.iterate(loader):
                    x, y = x.to(tr.device), y.to(tr.device)
                    tr.opt.zero_grad()
                    loss = loss_fn(tr.model(x), y)
                    loss.backward()
                    norms += grad_norm(tr.model)
                    tr.opt.step()
                    total, n = total + float(loss), n + 1
                    if args.step_delay:
                        time.sleep(args.step_delay)
                tr.epoch += 1
                # Accordion: compare the epoch's mean gradient norm with the
                # previous epoch's, scaled to the small batch (gradient noise
                # shrinks as 1/sqrt(batch size)).
                norm = norms / max(n, 1) * (tr.batch_size / SMALL_BATCH) ** 0.5
                critical = tr.prev_norm is None or abs(tr.prev_norm - norm) / tr.prev_norm >= CRITICAL_CHANGE
                tr.prev_norm = norm
                want = SMALL_BATCH if critical else LARGE_BATCH
                log(f"epoch {tr.epoch}/{args.epochs} loss {total / max(n, 1):.4f} batch {tr.batch_size} "
                    f"grad-norm {norm:.3f}{' (critical)' if critical else ''}")
                if want != tr.batch_size:
                    tr.batch_size = want
                    job.set_batch_size(want)
                    log(f"batch size -> {want}")
            x_all, y_all = data.tensors[0].to(tr.device), data.tensors[1].to(tr.device)
            acc = (tr.model(x_all).argmax(1) == y_all).float().mean()
            log(f"done: {tr.epoch} epochs, training accuracy {float(acc):.3f}, steps {job.state['steps_done']}")
    except shockwave.Preempted as e:
        log(f"preempted: {e}")
        return 0
    except shockwave.JobEnded as e:
        log(f"ended by the coordinator: {e}")
        return 2
    if os.path.exists(args.checkpoint):
        os.remove(args.checkpoint)
    return 0


if __name__ == "__main__":
    sys.exit(main())
