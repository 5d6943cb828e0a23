package main

import (
	"flag"

	"github.com/shockwave-sched/shockwave/sim/workload"
)

// noiseFlags are simulate's stochastic-workload flags (package workload,
// Noise). Their zero values keep the deterministic model.
type noiseFlags struct {
	n    workload.Noise
	seed uint64
}

func (nf *noiseFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&nf.n.ScheduleJitter, "schedule-jitter", 0, "shift each batch-size switch of each job by a seeded draw within ±`E` epochs")
	fs.Float64Var(&nf.n.ThroughputNoise, "throughput-noise", 0, "σ of a per-job log-normal speed factor (`S`; 0.1 is about ±10 %)")
	fs.Float64Var(&nf.n.RoundNoise, "round-noise", 0, "σ of a per-round log-normal speed factor (`S`)")
	fs.Float64Var(&nf.n.CancelRate, "cancel-rate", 0, "probability `R` that a job ends early at a random point: half cancelled by their owner, half crashing until the coordinator ends them")
	fs.Uint64Var(&nf.seed, "noise-seed", 1, "seed of the workload's draws")
}

// noise validates the flags and returns the workload's noise.
func (nf *noiseFlags) noise() (workload.Noise, error) {
	n := nf.n
	n.Seed = nf.seed
	if err := n.Validate(); err != nil {
		return n, usageError{err}
	}
	return n, nil
}
