// Package sim is the trace-driven simulator. It replays a workload (a trace
// of jobs with their batch-size adaptation, package sim/workload) through the
// real coordinator.Core on a virtual clock, sending Core exactly the events a
// job's SDK would send (register, progress with batch size and measured
// throughput, batch-size changes, done) and executing the leases Core returns.
// Simulation is a driver, never a mode inside the policy or the Core.
//
// The round mechanics follow spec §3: a round lasts until the last micro-task
// dispatched in it finishes (at most Δ), there is no backfilling within a
// round, a job that restarts pays a 20 s penalty (§3.3 step 2.2), and
// batch-size changes lag one scheduled round (§2.5).
//
// Two behaviours of the original are bugs; they are reproduced only with
// Config.Compat (the fidelity tests turn it on):
//   - §3.5: after a batch-size growth rounds completed epochs up, a job can
//     have done more steps than it needs. The original tests completion before
//     the rescale, so the job stays active, fails five times and wastes its
//     GPUs for five rounds. By default the job completes when the rescale
//     leaves it no remaining steps, as a real training job would.
//   - §3.3 step 6: the original stops when no job is active even if more jobs
//     will arrive. By default the simulator jumps to the next arrival.
//
// Config.Noise makes the workload stochastic (package workload, Noise): the
// default is the original's deterministic model. Config.RecordProfiles
// exports what each job really did per epoch (Result.Profiles), readable
// back as a trace. With Config.Forecasts, each sampled forecast point
// carries its slices (first of its recipe, peer finished, change ahead).
package sim
