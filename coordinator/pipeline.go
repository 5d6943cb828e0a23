package coordinator

import (
	"time"

	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
)

// A round boundary in two halves. BeginTick settles the previous round,
// admits pending jobs and freezes the policy's input: a copy of each
// eligible job's view, so that events folded afterwards change the Core's
// jobs and not what the policy reads. Solve (the policy's Allocate) may
// then run on its own goroutine while the Core goes on folding events;
// EndTick closes the round with the plan: placement and leases.
//
// While a round is open the policy belongs to Solve: the Core queues the
// calls it would make (Observe for progress, Remove or Complete for a job
// that ended) and makes them, in order, at EndTick, after Allocate. That is
// the order a one-step Tick makes them in (Allocate at the boundary, the
// later events' calls after it), so the policy's state, and every later
// plan, is the same however long the solve took. Progress folded while the
// round is open counts for the open round's leases and is measured under
// the next round's index, as it would be after a one-step Tick.
//
// What decides where a round closes is the caller's business: the service
// closes it at a plan record of the log (fold.go), so a replay closes it
// at the same record and reaches the same state.

// OpenRound is a round between BeginTick and EndTick.
type OpenRound struct {
	round  int
	now    float64
	active int
	pol    policy.Policy
	snap   policy.Snapshot
	none   bool // no nodes: the policy is not asked

	admitted []*policy.Job     // the views of the jobs admitted at this boundary, as the snapshot holds them (tick.go)
	prepared []policy.Prepared // what the policy built for each ahead of it (policy.Preparer), or nil
	wait     <-chan struct{}   // closed when a lent policy is free again
	before   []policyCall      // calls held back while it was lent, made before Admit
	eligible []*job
	waits    []policy.Explanation
	lost     []protocol.Lease // SUSPEND leases of jobs marked lost
	exits    []protocol.Lease // EXIT leases of jobs that failed too often
	covered  []string         // jobs whose RUN lease need not be sent (leases.go)
	ended    []Ended
	lostJobs []Ended
	changed  bool // a job the plan runs ended while the round was open
}

// Round is the index of the open round.
func (t *OpenRound) Round() int { return t.round }

// Jobs is the number of jobs in the policy's snapshot.
func (t *OpenRound) Jobs() int { return len(t.snap.Jobs) }

// Solve announces the jobs admitted at this boundary to the policy, then
// asks it for the round's plan. It touches nothing but the policy and the
// frozen copies, so it may run on another goroutine while
// the Core folds events; it must be called once, before EndTick.
func (t *OpenRound) Solve() (*policy.Plan, error) {
	t.admit()
	return t.allocate()
}

// admit makes the policy calls held back for the round, then the
// admissions (Solve's first half).
func (t *OpenRound) admit() {
	if t.wait != nil {
		<-t.wait
	}
	makeCalls(t.pol, t.before)
	t.before = nil
	if r, ok := t.pol.(policy.Reserver); ok && len(t.admitted) > 0 {
		r.Reserve(len(t.admitted)) // the policy grows its tables when they at least double
	}
	pr, _ := t.pol.(policy.Preparer)
	for i := range t.admitted {
		if pr != nil && t.prepared[i] != nil {
			pr.AdmitPrepared(t.admitted[i], t.prepared[i])
		} else {
			t.pol.Admit(t.admitted[i])
		}
	}
	t.admitted, t.prepared = nil, nil
}

// allocate asks the policy for the round's plan (Solve's second half).
func (t *OpenRound) allocate() (*policy.Plan, error) {
	if t.none {
		return &policy.Plan{Round: t.round, Run: []string{}, Note: "no nodes in the cluster"}, nil
	}
	return t.pol.Allocate(&t.snap)
}

// wasEligible reports whether j was in the round's snapshot.
func (t *OpenRound) wasEligible(j *job) bool { return j.inSnapshot == t.round+1 }

// Open reports whether a round is between BeginTick and EndTick.
func (c *Core) Open() bool { return c.open != nil }

// restoreEnded gives the ends and losses of a round that did not start back
// to the next one, as a one-step Tick that failed leaves them.
func (c *Core) restoreEnded(t *OpenRound) {
	c.ended = append(t.ended, c.ended...)
	c.life.lost = append(t.lostJobs, c.life.lost...)
}

// eventRound is the round index under which an event folded now is
// measured: the next round's while a round is open, as after a Tick.
func (c *Core) eventRound() int {
	if c.open != nil {
		return c.round + 1
	}
	return c.round
}

// A policy call the Core holds back while a round is open.
type policyCall struct {
	kind    byte // 'o' Observe, 'r' Remove, 'c' Complete, 'a' Admit, 'u' Update, 'f' Fail
	id      string
	elapsed float64
	steps   int64
	view    *policy.Job // Complete, Admit and Update: the job's view when called
}

// holding says whether policy calls wait: a round is open, or the
// policy's state is being saved (lendPolicy).
func (c *Core) holding() bool { return c.open != nil || c.lent }

func (c *Core) observe(id string, elapsed float64, steps int64) {
	if c.holding() {
		c.later = append(c.later, policyCall{kind: 'o', id: id, elapsed: elapsed, steps: steps})
		return
	}
	c.pol.Observe(id, elapsed, steps)
}

func (c *Core) remove(id string) {
	if c.holding() {
		c.later = append(c.later, policyCall{kind: 'r', id: id})
		return
	}
	c.pol.Remove(id)
}

// complete tells the policy that a job completed (policy.Completer), or
// that it left.
func (c *Core) complete(v *policy.Job) {
	cp, ok := c.pol.(policy.Completer)
	switch {
	case !ok:
		c.remove(v.ID)
	case c.holding():
		frozen := *v // the Core clears the job's measurements once it ended
		c.later = append(c.later, policyCall{kind: 'c', id: v.ID, view: &frozen})
	default:
		cp.Complete(v)
	}
}

// admit re-announces a job whose registration changed (submit.go).
func (c *Core) admit(v *policy.Job) {
	if c.holding() {
		frozen := *v
		c.later = append(c.later, policyCall{kind: 'a', id: v.ID, view: &frozen})
		return
	}
	c.pol.Admit(v)
}

// update tells the policy that a job's parameters changed
// (policy.Updater), or removes and admits the job again.
func (c *Core) update(v *policy.Job) {
	if _, ok := c.pol.(policy.Updater); !ok {
		c.remove(v.ID)
		c.admit(v)
		return
	}
	if c.holding() {
		frozen := *v
		c.later = append(c.later, policyCall{kind: 'u', id: v.ID, view: &frozen})
		return
	}
	c.pol.(policy.Updater).Update(v)
}

// flushPolicy makes the calls held back while the round was open.
func (c *Core) flushPolicy() {
	makeCalls(c.pol, c.later)
	c.later = c.later[:0]
}

func makeCalls(pol policy.Policy, calls []policyCall) {
	for i := range calls {
		pc := &calls[i]
		switch pc.kind {
		case 'o':
			pol.Observe(pc.id, pc.elapsed, pc.steps)
		case 'r':
			pol.Remove(pc.id)
		case 'c':
			pol.(policy.Completer).Complete(pc.view)
		case 'a':
			pol.Admit(pc.view)
		case 'u':
			pol.(policy.Updater).Update(pc.view)
		case 'f':
			pol.Fail(pc.id)
		}
		*pc = policyCall{}
	}
}

// fail reports a lease that made no progress (settle).
func (c *Core) fail(id string) {
	if c.holding() {
		c.later = append(c.later, policyCall{kind: 'f', id: id})
		return
	}
	c.pol.Fail(id)
}

// solving is an open round of the fold and its solve, which runs on its own
// goroutine: done is closed when plan, err and took are set.
type solving struct {
	t    *OpenRound
	done chan struct{}
	plan *policy.Plan
	err  error
	// began is when the goroutine started, took how long the solve took,
	// admitted how much of it the held calls and admissions took.
	began          time.Time
	took, admitted time.Duration
}

func startSolve(t *OpenRound) *solving {
	s := &solving{t: t, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		s.began = time.Now()
		t.admit()
		s.admitted = time.Since(s.began)
		s.plan, s.err = t.allocate()
		s.took = time.Since(s.began)
	}()
	return s
}
