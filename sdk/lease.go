package sdk

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/protocol"
)

// Directive is what a training loop must do at an iteration boundary.
type Directive int

// Directives, from Boundary.
const (
	// Continue: the job holds a valid RUN lease; run the next step.
	Continue Directive = iota
	// Suspend: the job may not train (its lease was revoked or expired, or
	// it has none yet): checkpoint, release the GPUs, then WaitRun.
	Suspend
	// Preempt: like Suspend, in EXIT mode: checkpoint and exit the
	// process; the launcher restarts it later.
	Preempt
	// Stop: the job ended (EXIT lease, Finish) or was closed.
	Stop
)

func (d Directive) String() string {
	switch d {
	case Continue:
		return "continue"
	case Suspend:
		return "suspend"
	case Preempt:
		return "preempt"
	case Stop:
		return "stop"
	}
	return fmt.Sprintf("Directive(%d)", int(d))
}

// LeaseState is the current lease state: one atomic load.
func (j *Job) LeaseState() LeaseState { return LeaseState(j.state.Load()) }

// Boundary tells the caller what to do at an iteration boundary: two
// atomic loads, no hooks, no I/O. The Steps iterator calls it every step; a
// binding mirrors LeaseState into its own control block instead. Call it
// after recording the steps done (RecordSteps).
//
// In a multi-process job it also enforces the rank agreement: at the
// agreed stop step it returns Suspend, Preempt or Stop although the lease
// state still read Running; on a rank other than 0 at the release horizon
// it blocks until rank 0 releases more steps (bounded by the rank timeout).
func (j *Job) Boundary() Directive { return j.boundary(context.Background()) }

// boundary is Boundary whose wait at a rank's release horizon ends with ctx.
func (j *Job) boundary(ctx context.Context) Directive {
	if j.steps.Load() >= j.gateAt.Load() {
		return j.gate(ctx)
	}
	switch LeaseState(j.state.Load()) {
	case Running:
		return Continue
	case Waiting:
		if j.o.exitMode {
			return Preempt
		}
		return Suspend
	}
	return Stop
}

// ExitMode reports whether the job runs in EXIT mode (ExitOnSuspend).
func (j *Job) ExitMode() bool { return j.o.exitMode }

// Lease returns the latest lease the job accepted, and false before the
// first one.
func (j *Job) Lease() (protocol.Lease, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return cloneLease(j.lease), j.hasLease
}

// LeaseDeadline is the local time at which the current RUN lease expires
// unless renewed (zero when the job is not running).
func (j *Job) LeaseDeadline() time.Time {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.state.Load() != int32(Running) {
		return time.Time{}
	}
	return j.deadline
}

// Reason explains the current lease state: why the job is waiting
// ("no lease yet", "suspended by the coordinator: preempted", "the lease of
// round 7 expired …"), or why it ended.
func (j *Job) Reason() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.reason
}

// Changed returns a channel that is closed at the next change of the lease
// state (or of the lease, e.g. an extension). A binding selects on it to
// mirror the state into its control block.
func (j *Job) Changed() <-chan struct{} {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.changed
}

// WaitRun blocks until the job holds a valid RUN lease and returns it. It
// returns an error wrapping ErrEnded when the coordinator ends the job,
// ErrClosed after Close, or ctx's error.
func (j *Job) WaitRun(ctx context.Context) (protocol.Lease, error) {
	for {
		j.mu.Lock()
		var lost error
		if j.rk != nil {
			j.parkLocked()
			lost = j.rk.lost
		}
		st, ch, l, reason := LeaseState(j.state.Load()), j.changed, cloneLease(j.lease), j.reason
		j.mu.Unlock()
		if lost != nil && st != Running {
			return l, lost
		}
		switch st {
		case Running:
			if j.rk != nil {
				j.mu.Lock()
				l = cloneLease(j.rk.runLease) // the lease of the generation
				j.mu.Unlock()
			}
			return l, nil
		case Ended:
			return l, j.jobErr(ErrEnded, "%s", reason)
		case Closed:
			return l, j.jobErr(ErrClosed, "waiting for a RUN lease")
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return l, j.jobErr(ctx.Err(), "waiting for a RUN lease (%s)", reason)
		}
	}
}

// onLease runs on the NATS subscription goroutine.
func (j *Job) onLease(m *nats.Msg) {
	recv := time.Now()
	l, err := protocol.DecodeLease(m.Data, protocol.DefaultMaxMessageBytes)
	if err != nil {
		j.mu.Lock()
		j.badLeases++
		j.mu.Unlock()
		j.log.Warn("ignoring a bad lease message", "subject", m.Subject, "err", err)
		return
	}
	j.applyLease(*l, recv)
}

// applyLease acts on a valid lease received at recv.
func (j *Job) applyLease(l protocol.Lease, recv time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	st := LeaseState(j.state.Load())
	switch {
	case l.Job != j.id:
		j.badLeases++
		j.log.Warn("ignoring a lease of another job", "lease_job", l.Job)
		return
	case st == Ended || st == Closed:
		return
	case l.Epoch < j.epoch:
		// A deposed coordinator's lease (the fencing epoch of DESIGN.md).
		j.log.Debug("ignoring a lease of an older leader", "epoch", l.Epoch, "current", j.epoch, "round", l.Round)
		return
	case j.hasLease && l.Round < j.lease.Round:
		j.log.Debug("ignoring a stale lease", "round", l.Round, "current", j.lease.Round)
		return
	case j.hasLease && l.Round == j.lease.Round && l.Action == protocol.Run && j.lease.Action != protocol.Run:
		return // a republished RUN does not undo a SUSPEND or EXIT of the same round
	}
	j.epoch = l.Epoch
	switch l.Action {
	case protocol.Run:
		deadline := j.localExpiry(&l, recv)
		if !deadline.After(time.Now()) {
			j.log.Debug("ignoring an expired RUN lease", "round", l.Round)
			return
		}
		j.lease, j.hasLease, j.deadline = l, true, deadline
		j.armExpiryLocked(deadline, l.Round)
		j.leaseStateLocked(Running, "")
	case protocol.Suspend:
		j.lease, j.hasLease = l, true
		j.stopExpiryLocked()
		j.leaseStateLocked(Waiting, "suspended by the coordinator in round "+fmt.Sprint(l.Round)+": "+orDefault(l.Reason, "no reason given"))
	case protocol.Exit:
		j.lease, j.hasLease = l, true
		j.stopExpiryLocked()
		j.leaseStateLocked(Ended, "ended by the coordinator in round "+fmt.Sprint(l.Round)+": "+orDefault(l.Reason, "no reason given"))
	}
}

// leaseStateLocked acts on the state a lease asks for: at once for a
// single process; through the rank agreement for rank 0 of several.
func (j *Job) leaseStateLocked(s LeaseState, reason string) {
	if j.rk != nil {
		j.leaderLeaseLocked(s, reason)
		return
	}
	j.setStateLocked(s, reason)
}

// localExpiry works out when a RUN lease ends on the local clock: the
// lease's length (Expiry − Start) after it was received, and never later
// than its Expiry translated with the clock offset measured at
// registration (which catches leases republished late, e.g. after a
// coordinator restart). Clocks need not agree: only differences of the
// coordinator's clock are trusted, plus the measured offset.
func (j *Job) localExpiry(l *protocol.Lease, recv time.Time) time.Time {
	d := time.Duration((l.Expiry - l.Start) * float64(time.Second))
	if j.haveOffset {
		coordNow := unixSeconds(recv) - j.offset
		d = min(d, time.Duration((l.Expiry-coordNow)*float64(time.Second)))
	}
	return recv.Add(d)
}

func (j *Job) armExpiryLocked(deadline time.Time, round int) {
	j.stopExpiryLocked()
	gen := j.leaseGen
	j.expiry = time.AfterFunc(time.Until(deadline), func() {
		j.mu.Lock()
		defer j.mu.Unlock()
		if j.leaseGen != gen || (j.rk == nil && j.state.Load() != int32(Running)) {
			return
		}
		j.leaseStateLocked(Waiting, fmt.Sprintf("the RUN lease of round %d expired at %s without renewal (coordinator unreachable or late)",
			round, deadline.Format("15:04:05.000")))
		j.log.Warn("lease expired without renewal; suspending", "round", round)
	})
}

func (j *Job) stopExpiryLocked() {
	j.leaseGen++
	if j.expiry != nil {
		j.expiry.Stop()
		j.expiry = nil
	}
}

// setStateLocked records a new state and wakes everyone watching.
func (j *Job) setStateLocked(s LeaseState, reason string) {
	j.state.Store(int32(s))
	j.reason = reason
	close(j.changed)
	j.changed = make(chan struct{})
	j.poke() // send the progress up to the change promptly
}

func cloneLease(l protocol.Lease) protocol.Lease {
	l.Workers = append([]int(nil), l.Workers...)
	if l.Devices != nil {
		d := make([]protocol.NodeDevices, len(l.Devices))
		for i, x := range l.Devices {
			d[i] = protocol.NodeDevices{Node: x.Node, Devices: append([]int(nil), x.Devices...)}
		}
		l.Devices = d
	}
	return l
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
