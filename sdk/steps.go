package sdk

import (
	"context"
	"errors"
	"io"
	"iter"
	"time"
)

// Source yields a training loop's batches. Next returns io.EOF at the end
// of each epoch; the call after that starts the next epoch. A source that
// returns io.EOF at the start of an epoch has no more data.
type Source[T any] interface {
	Next(ctx context.Context) (T, error)
}

// SourceFunc adapts a function to Source.
type SourceFunc[T any] func(ctx context.Context) (T, error)

// Next calls f.
func (f SourceFunc[T]) Next(ctx context.Context) (T, error) { return f(ctx) }

// Steps wraps src in the job's lease protocol:
//
//	for batch, err := range sdk.Steps(ctx, job, src) {
//		if err != nil { … }    // the loop ends after an error
//		train(batch)
//	}
//
// Before the first batch it waits for a RUN lease. At every iteration
// boundary it records the step (its time, from the previous boundary, and
// the current batch size give the throughput) and checks the lease: one
// atomic load. When the lease was revoked or expired it calls OnSuspend,
// then either waits for the next RUN lease and calls OnResume (default), or
// in EXIT mode ends with an error wrapping ErrPreempted. io.EOF from src
// marks an epoch boundary (Job.EndEpoch). When the job has run its declared
// length (or src has no more data) Steps reports done (Job.Finish) and
// ends; breaking out of the loop ends it without reporting done.
//
// Steps is a function, not a method of Job, because Go methods take no type
// parameters.
func Steps[T any](ctx context.Context, j *Job, src Source[T]) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		var zero T
		if err := j.pause(ctx, true); err != nil {
			yield(zero, err)
			return
		}
		last := time.Now()
		fresh := true // no batch yet in this epoch
		done := ctx.Done()
		for {
			select {
			case <-done:
				yield(zero, j.jobErr(ctx.Err(), "training loop"))
				return
			default:
			}
			b, err := src.Next(ctx)
			if errors.Is(err, io.EOF) {
				if !fresh {
					j.EndEpoch()
					fresh = true
					if !j.Done() {
						continue
					}
				}
				if err := j.finish(ctx); err != nil {
					yield(zero, err)
				}
				return
			}
			if err != nil {
				yield(zero, j.jobErr(err, "batch source"))
				return
			}
			fresh = false
			// The lease check sits right before the step: a revocation
			// that arrived while the batch was loading is honored now, and
			// the batch is kept for after the suspension.
			if j.state.Load() != int32(Running) {
				if err := j.pause(ctx, false); err != nil {
					yield(zero, err)
					return
				}
				last = time.Now()
			}
			more := yield(b, nil)
			now := time.Now()
			j.RecordSteps(1, now.Sub(last))
			last = now
			if !more {
				return
			}
			if j.steps.Load() >= j.doneAt.Load() {
				if err := j.finish(ctx); err != nil {
					yield(zero, err)
				}
				return
			}
		}
	}
}

// finish reports done, bounded by the close timeout.
func (j *Job) finish(ctx context.Context) error {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), j.o.closeFlushTimeout)
	defer cancel()
	return j.Finish(fctx)
}

// pause handles a boundary at which the job may not train: before the
// first step (first) it only waits for a RUN lease; later it calls
// OnSuspend, then waits and calls OnResume, or in EXIT mode returns
// ErrPreempted.
func (j *Job) pause(ctx context.Context, first bool) error {
	d := j.Boundary()
	switch d {
	case Continue:
		return nil
	case Stop:
		_, err := j.WaitRun(ctx) // returns the error that names the cause
		return err
	}
	if !first {
		l, _ := j.Lease()
		reason := j.Reason()
		j.mu.Lock()
		j.suspensions++
		j.ev.sample(j, false)
		j.mu.Unlock()
		j.poke()
		if h := j.o.onSuspend; h != nil {
			if err := h(ctx, l); err != nil {
				return j.jobErr(err, "OnSuspend hook (%s)", reason)
			}
		}
		if d == Preempt {
			return j.jobErr(ErrPreempted, "%s", reason)
		}
	}
	l, err := j.WaitRun(ctx)
	if err != nil {
		return err
	}
	if h := j.o.onResume; h != nil && !first {
		if err := h(ctx, l); err != nil {
			return j.jobErr(err, "OnResume hook (round %d)", l.Round)
		}
	}
	return nil
}
