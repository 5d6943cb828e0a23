// Package pollux is the world of the Pollux (OSDI'21) cluster simulator,
// re-implemented from the authors' artifact as described in
// shared/spec/POLLUX.md: the six application models built from the measured
// traces (throughput by placement and per-GPU batch size, statistical
// efficiency from the gradient noise scale, completion after max_epochs),
// the AdaptDL agent's performance model and goodput optimisation, the
// workload CSV, the 16×4-GPU cluster loop with its 60 s interval and 30 s
// re-allocation delay, and the policies that run there: pollux (the
// cluster-level genetic algorithm, seeded), optimus (Optimus+Oracle+
// TunedJobs), tiresias (Tiresias+TunedJobs), and an adapter that runs the
// project's own policies (shockwave, gavel, themis, …) on the same world,
// with jobs at their trace width or, in the agent batch mode, at elastic
// widths chosen from the speedups the jobs' agents report
// (shockwave_elastic.go).
//
// Everything is deterministic given the workload, the policy and the seed.
package pollux
