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
// boundary it counts the step (timed from boundary to boundary; see meter)
// and checks the lease: one atomic load. With the batch size, the step
// times give the throughput the job reports. When the lease was revoked or expired it calls OnSuspend,
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
		if err := j.pause(ctx, j.boundary(ctx), true); err != nil {
			yield(zero, err)
			return
		}
		m := &meter{j: j, stride: 1}
		if !j.loop.CompareAndSwap(nil, m) {
			yield(zero, j.jobErr(errors.New("another Steps loop is running"), "Steps"))
			return
		}
		defer j.loop.Store(nil)
		m.start()
		fresh := true // no batch yet in this epoch
		for {
			b, err := src.Next(ctx)
			if errors.Is(err, io.EOF) {
				m.publish()
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
				m.publish()
				yield(zero, j.jobErr(err, "batch source"))
				return
			}
			fresh = false
			// The lease check sits right before the step: a revocation
			// that arrived while the batch was loading is honored now, and
			// the batch is kept for after the suspension.
			// In a multi-process job the rank agreement is checked at
			// gateAt (a local comparison per step; see ranks.go).
			if j.state.Load() != int32(Running) || m.pending >= m.gateLeft {
				m.publish()
				if d := j.boundary(ctx); d != Continue {
					if err := ctx.Err(); err != nil {
						yield(zero, j.jobErr(err, "training loop"))
						return
					}
					if err := j.pause(ctx, d, false); err != nil {
						yield(zero, err)
						return
					}
				}
				m.start()
			}
			more := yield(b, nil)
			m.pending++
			if !more {
				m.publish()
				return
			}
			if m.pending < m.stride && m.pending < m.left {
				continue
			}
			m.publish()
			if j.steps.Load() >= j.doneAt.Load() {
				if err := j.finish(ctx); err != nil {
					yield(zero, err)
				}
				return
			}
			if err := ctx.Err(); err != nil {
				yield(zero, j.jobErr(err, "training loop"))
				return
			}
		}
	}
}

// meter counts and times the steps of one Steps loop, on the loop's
// goroutine. Reading the clock costs more than the rest of a step's
// overhead, so it reads it once per stride of steps and publishes the
// count and the time to the job's counters then; the stride adapts (1 to
// 4096) so that reads are about 20–200 µs apart. A step of real work
// (milliseconds) is timed on its own.
type meter struct {
	j        *Job
	pending  int64 // steps since the last publish
	stride   int64
	left     int64 // steps until the job is done, as of the last publish
	gateLeft int64 // steps until the next rank-agreement check, as of the last publish
	last     time.Time
}

const (
	minClockGap = 20 * time.Microsecond
	maxClockGap = 200 * time.Microsecond
	maxStride   = 4096
)

func (m *meter) start() {
	m.pending, m.last = 0, time.Now()
	m.refresh()
}

// refresh recomputes the steps left after the job's state changed.
func (m *meter) refresh() {
	s := m.j.steps.Load()
	m.left, m.gateLeft = m.j.doneAt.Load()-s, m.j.gateAt.Load()-s
}

// publish records the pending steps with the time since the last publish.
func (m *meter) publish() {
	now := time.Now()
	dt := now.Sub(m.last)
	if m.pending > 0 {
		m.j.RecordSteps(m.pending, dt)
		switch {
		case dt < minClockGap && m.stride < maxStride:
			m.stride *= 2
		case dt > maxClockGap && m.stride > 1:
			m.stride /= 2
		}
	}
	m.pending, m.last = 0, now
	m.refresh()
}

// syncLoop publishes the steps a running Steps loop has not published yet.
// It must run on the loop's goroutine (the loop body, or a hook), as the
// boundary methods that call it document.
func (j *Job) syncLoop() {
	if m := j.loop.Load(); m != nil && m.pending > 0 {
		m.publish()
	}
}

// finish reports done, bounded by the close timeout.
func (j *Job) finish(ctx context.Context) error {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), j.o.closeFlushTimeout)
	defer cancel()
	return j.Finish(fctx)
}

// pause handles a boundary at which the job may not train (directive d,
// from Boundary): before the first step (first) it only waits for a RUN
// lease; later it calls OnSuspend, then waits and calls OnResume, or in
// EXIT mode returns ErrPreempted.
func (j *Job) pause(ctx context.Context, d Directive, first bool) error {
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
