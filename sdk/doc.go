// Package sdk is the job side of Shockwave: a training loop registers with
// the coordinator, streams its progress (steps, epochs, batch size,
// measured throughput) as events over NATS, and honors the coordinator's
// leases at iteration boundaries.
//
// It imports the protocol package and nats.go only, never the NATS server
// or the coordinator.
//
// # The iterator
//
//	job, err := sdk.Register(ctx,
//		sdk.WithURL("nats://127.0.0.1:4222"),
//		sdk.WithJobID("resnet18-a"), sdk.WithModel("ResNet-18"),
//		sdk.WithBatchSize(32), sdk.WithDatasetSize(50_000), sdk.WithEpochs(90),
//		sdk.WithOnSuspend(saveCheckpointAndFreeGPU),
//		sdk.WithOnResume(loadOntoGrantedGPUs))
//	if err != nil { … }
//	defer job.Close()
//	for batch, err := range sdk.Steps(ctx, job, loader) {
//		if err != nil { return err } // names its cause; errors.Is(err, sdk.ErrPreempted) …
//		train(batch)
//		if switchNow() { job.SetBatchSize(64) }
//	}
//
// Steps waits for the first RUN lease, then yields batches while the lease
// is valid. Steps are counted locally and timed from boundary to boundary;
// as the clock costs more than everything else on the path (60–80 ns on a
// small VM), it is read once per stride of steps, the stride adapting so
// that reads are 20–200 µs apart (a step of real work is timed on its own),
// and each read publishes the count and time to the job's atomic counters.
// A background goroutine turns the counters into progress events (steps,
// elapsed time, steps/s, batch size; samples/s is that times the batch
// size) and publishes them in batches, so the per-step path does no
// network I/O and allocates nothing. The lease check is one atomic load
// per step, right before the step. io.EOF from the source ends an
// epoch. A SUSPEND lease, or a RUN lease that expires without renewal, is
// seen at the next boundary: the iterator calls OnSuspend, blocks until a
// RUN lease arrives, calls OnResume with it and continues. In EXIT mode
// (ExitOnSuspend, for Kubernetes or Slurm) it ends with ErrPreempted after
// OnSuspend instead; the restarted process registers with the same id and
// WithResume(checkpoint) and continues. An EXIT lease ends the loop with
// ErrEnded.
//
// # The low-level API
//
// Steps is built from methods that any loop can call directly; the C
// bindings (libshockwave.so) use them so that Python never crosses into Go
// on a step:
//
//	RecordSteps(n, elapsed)     per step or per sample of a counter: atomic, no allocation, no I/O
//	Record(steps, samples, d)   the same with an exact sample count (short last batches)
//	LeaseState()                Waiting, Running, Ended or Closed: one atomic load
//	Boundary()                  Continue, Suspend, Preempt (EXIT mode) or Stop; no hooks
//	Gate()                      multi-rank: the step at which to call Boundary even under Running
//	Devices() / Grant()         the current grant per node / the RUN lease it comes from
//	Changed()                   a channel closed at the next lease change (to mirror the state)
//	WaitRun(ctx)                block until a RUN lease; returns it (ErrEnded, ErrClosed, ctx errors)
//	EndEpoch()                  an epoch boundary (an event coalesced only as a last resort)
//	SetBatchSize(n)             a batch-size change (steps so far at the old size, then the change)
//	Checkpoint() / WithResume   the SDK's progress to save with a checkpoint and restore after a restart
//	Finish(ctx)                 report done; wait until the coordinator has it
//	Close()                     deliver what is buffered (bounded), stop, disconnect; no done event
//
// While a Steps loop runs, call SetBatchSize, EndEpoch, Checkpoint, Flush
// and Finish from its body or its hooks (its goroutine): they first publish
// the steps the loop counted but has not published yet, so that the steps
// before a batch-size change are attributed to the old size.
//
// A loop without hooks looks like this:
//
//	for !job.Done() {
//		switch job.Boundary() {
//		case sdk.Suspend:
//			checkpoint(job.Checkpoint())
//			if _, err := job.WaitRun(ctx); err != nil { return err }
//		case sdk.Preempt:
//			checkpoint(job.Checkpoint())
//			os.Exit(0)
//		case sdk.Stop:
//			return nil
//		}
//		start := time.Now()
//		step()
//		job.RecordSteps(1, time.Since(start))
//	}
//	job.Finish(ctx)
//
// # Job ids, restarts and sequence numbers
//
// The job id is WithJobID, else $SHOCKWAVE_JOB_ID, else derived from
// WithName by JobID (same name, same id). Registering an id the coordinator
// knows with the same defining parameters (model, adaptation, workers,
// initial batch size, dataset size, length) resumes the job: a restarted
// process passes its initial settings again plus WithResume for its
// current progress (without it, the SDK adopts the progress the coordinator
// recorded). The reply carries the last event sequence number the
// coordinator accepted; the SDK continues after it, so sequence numbers
// stay strictly increasing across restarts.
//
// # Leases and time
//
// A RUN lease is valid until its expiry on the local clock, worked out
// without trusting clock agreement: the lease's length (Expiry − Start)
// after it was received, but never later than Expiry translated by the
// clock offset measured at registration (the reply's Now against the local
// receive time), which catches leases republished late. A timer flips the
// state to Waiting at that deadline unless a renewal (the next round's RUN
// lease) arrived. Leases of older rounds are ignored; a malformed lease or
// one of another job is logged and ignored (Stats.BadLeases).
//
// A process started by a relaying node agent also reads its leases from a
// pipe the agent gives it ($SHOCKWAVE_LEASE_FD="FD:INODE", EnvLeaseFD): one
// lease as JSON per line, taken through the same checks as a lease from
// NATS. The descriptor is used only when it is a pipe with that inode (a
// launcher in between may have closed it); it is made close-on-exec, and
// the registration then says Relayed, so the coordinator may leave the
// job's RUN and SUSPEND leases to the agent. Only a single process or rank 0
// reads it. Job.Relayed reports it (docs/agent.md, "Leases relayed by the
// agent").
//
// Such an agent may also give a single-process job an uplink
// ($SHOCKWAVE_UPLINK_FD="FD:INODE", EnvUplinkFD): a Unix socket through
// which the process registers and sends its event batches, one JSON
// request per line (protocol/uplink.go), and which the agent forwards over
// its own NATS connection. The process then opens no connection at all
// (Job.Uplinked; Job.Conn is nil), so that a round that stops and starts
// thousands of processes costs the NATS server no connections. The SDK
// takes the uplink only together with the lease pipe, for a single
// process (the ranks of a multi-process job talk over NATS), and only when
// the descriptor is a socket with that inode; otherwise, or with
// WithoutUplink, it connects to NATS as before, and so it does when the
// agent answers its first registration that no coordinator takes
// registrations through agents (an older coordinator). The agent's answer to a
// flush request confirms published events (its connection flushed); when
// its connection comes back after an outage it says so, and the SDK
// registers again and sends what the coordinator lacks, as after its own
// reconnection. An uplink that the agent closes, or that carries a line
// the SDK cannot read, does not come back: the job trains until its lease
// expires and keeps its events, and Flush, Finish and Close return
// ErrNotDelivered at once rather than wait for it.
//
// A resident single-process job that no agent started may reach its node
// agent through the agent's job socket instead (WithAgentSocket, default
// $SHOCKWAVE_AGENT_SOCKET, EnvAgentSocket): it dials the Unix socket, says
// hello with its job token (token mode), and the agent's welcome names the
// node, which its registration then names (the job is resident there; a
// configured node that differs keeps the job on NATS). The socket then
// works as the uplink above and also carries the job's leases, applied
// with the same checks as leases from NATS; the registration says
// Relayed false. A socket that cannot be reached, is not a socket, or
// whose agent refuses the hello or does not answer it within
// JobSocketTimeout leaves the job on NATS, with a log line saying why.
//
// # Devices and resident processes
//
// Job.Devices is the current grant per node (protocol.NodeDevices: the
// node's name and its local device indices, in the order of the lease's
// workers); a coordinator that names no nodes grants cluster-wide ids
// only, returned as one node with an empty name. Hooks receive the lease:
// move the model to the granted device in OnResume, release device memory
// in OnSuspend. A process that suspends in place is resident on its node:
// WithNode (default $SHOCKWAVE_NODE outside EXIT mode) and
// WithVisibleDevices (default $SHOCKWAVE_VISIBLE_DEVICES, else
// $CUDA_VISIBLE_DEVICES when it lists indices) go into the registration,
// and the coordinator grants it devices on that node only.
//
// # Multi-process jobs
//
// A job of width W may run as W processes ("ranks", one per device, on one
// or more nodes), each linking the SDK: WithRank(rank, world), by default
// from $RANK and $WORLD_SIZE as torchrun sets them ($LOCAL_RANK gives
// LocalRank). Every rank registers with the same job id and credentials;
// rank 0 registers the job with the coordinator, follows its leases and
// reports progress; the other ranks attach: they only talk to rank 0, on
// the job's ranks subject (<prefix>.job.<id>.ranks, which the job's
// credentials allow and no other job's). The job is one scheduling unit.
//
// The ranks must stop at the same step: a rank that stops at step 177
// while another enters the all-reduce of step 177 hangs both. So no rank
// acts on a lease by itself; they follow an agreement that rank 0 runs:
//
//   - Release horizon. A rank may begin step k (k steps done) only when
//     k < release, a step count rank 0 publishes and raises as it goes,
//     about DefaultRankLookahead of steps ahead of itself at the measured
//     rate (at least one step). A rank at the horizon blocks in Boundary
//     until rank 0 releases more, so a rank that missed a message waits
//     instead of running past a stop it did not hear of.
//   - Stop. On a SUSPEND lease, an expired RUN lease or an EXIT lease,
//     rank 0 stops raising the release and announces stop = release, the
//     highest step any rank may have reached. Every rank runs to that step
//     (ranks under DDP are within a step of each other, and the horizon is
//     one step at a 50 ms step, so this is at most about one step after
//     rank 0 heard of it), and there Boundary returns Suspend, Preempt
//     (EXIT mode) or Stop on every rank: the same step everywhere, so no
//     collective is left half-entered.
//   - Resume. After a stop, rank 0 starts the next generation only when
//     it holds a valid RUN lease and every rank, itself included, waits in
//     WaitRun at the stop step with its suspend hook done (a rank reports
//     that on the ranks subject). The generation's message carries the
//     base step (the stop step) and the RUN lease with its devices; every
//     rank resumes at the base, and OnResume gets that lease. A rank
//     joining for the first time adopts rank 0's progress at the base.
//     So no rank resumes while another still writes its checkpoint.
//
// Rank 0 repeats its state every DefaultRankHeartbeat and the other ranks
// report theirs as often, and when their state changes (a stop announced
// or reached, a park, a close). No rank answers another's message with
// one of its own, so while a generation runs rank 0 sends at most one
// release a step (about one per half lookahead) and the others only their
// heartbeats. Every wait is bounded:
//
//   - a rank silent for the rank timeout (WithRankTimeout, default
//     DefaultRankTimeout), a rank that closes before the job finished, a
//     rank that restarts alone or claims another's rank, or a rank missing
//     after the join timeout breaks the agreement: rank 0 announces an
//     abort at stop = release, every live rank stops there (or at once if
//     it is waiting) and its loop ends with ErrRankLost. Rank 0 dead or
//     silent: the others end with ErrRankLost after the rank timeout.
//   - A rank blocked inside a collective with a dead peer is released by
//     the collective library (gloo and NCCL fail on a closed connection or
//     their own timeout), not by the SDK.
//   - The ranks talk through the coordinator's NATS: while it is
//     unreachable no release arrives, so the ranks stop at their horizon
//     (a single process would train on until its lease expires), and an
//     outage longer than the rank timeout ends them with ErrRankLost.
//
// After ErrRankLost the process exits non-zero and the launcher (the node
// agent, or torchrun with restarts) restarts every rank; they resume from
// the job's checkpoint as an EXIT-mode job does (WithResume on rank 0).
// Save the checkpoint on rank 0 at a suspension and, if periodic, at step
// boundaries, and load rank 0's checkpoint on every rank.
//
// For a multi-rank job LeaseState is the agreed state: Running until the
// agreed stop step although the SUSPEND lease already arrived. The per-step
// cost stays one comparison: Boundary and the Steps loop check the step
// count against Gate (the next step at which the agreement must be
// consulted); bindings mirror Gate into their control block.
//
// # Faults
//
// The connection reconnects forever with a jittered exponential backoff
// (WithReconnectBackoff). While the coordinator is unreachable the job
// keeps training until its lease expires, then suspends; its events wait
// in a bounded buffer (WithEventBuffer) where, past the bound, the oldest
// pairs of progress samples are merged. A batch-size change that no step
// followed is replaced by the next change; past the bound, a change that
// held for only one progress sample before the next one is dropped and
// that sample merged into the following one (which carries the size it
// ran at). Epoch ends are merged the same way only when nothing else can
// be (a job ending epochs faster than it may send them), and a done event
// never: steps and seconds are never lost, and the later event's counters
// say where the job is. After reconnecting the SDK registers again
// (the reply returns the current lease and the last event the coordinator
// holds, and the SDK drops what it holds) and sends the rest of the buffer
// in order. A published batch leaves the buffer once a flush round trip
// confirms that the server has it: at once when Flush, Finish or Close
// ask, otherwise once the oldest unconfirmed batch is 30 sampling
// intervals old or a quarter of the buffer waits (a round trip a second
// for every job cost the server more than its leases at 10,000 jobs); a
// batch that may have been lost is sent again and the coordinator drops
// duplicates by sequence number.
//
// The coordinator folds a job's events under a budget
// (protocol.EventRate a second, bursts of protocol.EventBurst) and refuses
// the rest, with the steps and seconds they carry. The SDK keeps a copy of
// that budget at nine tenths of it and publishes no faster: what waits
// stays buffered, and while the budget is spent the buffer's bound is what
// the budget lets out in about a second, so that coalescing keeps it
// current (a job that changed its batch size ten million times in a second
// still delivered every step and second;
// TestEvents_AJobChangingItsBatchSizeFasterThanItsBudgetLosesNoStepOrSecond).
//
// The server having a batch still does not mean the coordinator folds it
// (the log's stream drops what arrives while its ingest queue is full, so
// another client flooding could make a batch vanish). Progress repairs itself, since every
// event carries the cumulative counters; a done event would not. So once a
// job has finished, its last batches are confirmed by the coordinator: the
// SDK registers again, a reply that the job has ended confirms them, and
// otherwise the reply's last sequence number drops what the coordinator
// holds and the rest is sent again, after pauses from 0.1 s doubling to
// 2 s, until Finish's context ends. No event follows done.
//
// Every error the SDK returns names the job and its cause.
package sdk
