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
//	Changed()                   a channel closed at the next lease change (to mirror the state)
//	WaitRun(ctx)                block until a RUN lease; returns it (ErrEnded, ErrClosed, ctx errors)
//	EndEpoch()                  an epoch boundary (an event never coalesced)
//	SetBatchSize(n)             a batch-size change (steps so far at the old size, then the change)
//	Checkpoint() / WithResume   the SDK's progress to save with a checkpoint and restore after a restart
//	Finish(ctx)                 report done and wait for delivery
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
// # Faults
//
// The connection reconnects forever with a jittered exponential backoff
// (WithReconnectBackoff). While the coordinator is unreachable the job
// keeps training until its lease expires, then suspends; its events wait
// in a bounded buffer (WithEventBuffer) where, past the bound, the oldest
// pairs of progress samples are merged — epoch, batch-size and done events
// are never merged or dropped. After reconnecting the SDK registers again
// (the reply returns the current lease, if any) and sends the buffer in
// order. A batch counts as delivered when the server acknowledged it (a
// flush round trip); a batch that may have been lost is sent again and the
// coordinator drops duplicates by sequence number.
//
// Every error the SDK returns names the job and its cause.
package sdk
