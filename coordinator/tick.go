package coordinator

import (
	"fmt"
	"slices"

	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
)

// Tick runs the round boundary at time now: it settles the previous round's
// leases, admits pending jobs, asks the policy for a plan, places gangs on
// GPUs and issues leases. On a policy error no round is started and the
// error is returned; the jobs' state is unchanged apart from the settling.
//
// Tick is BeginTick, Solve and EndTick in one step; the service runs them
// apart, so that events are folded while the policy solves (pipeline.go).
func (c *Core) Tick(now float64) (*Round, error) {
	t, err := c.BeginTick(now, nil)
	if err != nil {
		return nil, err
	}
	return c.EndTick(t.Solve())
}

// BeginTick runs the first half of a round boundary at time now: it settles
// the previous round's leases, marks silent jobs lost and admits pending
// jobs, then freezes the policy's input. The round is open until EndTick:
// the Solve of the returned value may run on another goroutine meanwhile,
// and the Core keeps folding events (pipeline.go). A second BeginTick
// before EndTick is an error. When the policy is lent (lendPolicy) the
// calls the boundary makes are held back with the earlier ones and the
// Solve makes them, in order, once wait is closed.
func (c *Core) BeginTick(now float64, wait <-chan struct{}) (*OpenRound, error) {
	if c.open != nil {
		return nil, fmt.Errorf("coordinator: round %d is still open", c.round)
	}
	if err := c.advance(now); err != nil {
		return nil, err
	}
	t := &OpenRound{round: c.round, now: now, active: 0, pol: c.pol}
	t.lost = c.expire(now)
	t.exits = c.settle()
	for _, j := range c.active {
		if j.leaseRound == c.round-1 && j.leaseRound >= 0 {
			// Settled: progress from here on counts for this round's lease.
			j.leaseSteps, j.leaseElapsed = 0, 0
		}
	}
	// Sized once: the first round of a large cluster admits thousands, and
	// growing these slices by appends copied each several times
	// (BenchmarkBeginTick_FirstRoundOf10000Jobs).
	t.prepared = make([]policy.Prepared, 0, len(c.pending))
	c.active = slices.Grow(c.active, len(c.pending))
	first := len(c.active) // the admitted jobs are c.active[first:]
	for _, j := range c.pending {
		j.state = Active
		j.view.Seq = c.nextSeq
		if !j.readmit {
			j.view.AdmitTime, j.view.AdmitRound = now, c.round
		}
		j.readmit = false
		c.nextSeq++
		c.active = append(c.active, j)
		t.prepared = append(t.prepared, j.prepared)
		j.prepared = nil
	}
	c.pending = c.pending[:0]
	t.active = len(c.active)
	if c.lent { // the calls held back so far belong to the solve, after the policy is back
		t.wait, t.before, c.later = wait, c.later, nil
	}
	t.ended, c.ended = c.ended, nil
	t.lostJobs, c.life.lost = c.life.lost, nil
	t.snap = policy.Snapshot{Round: c.round, Now: now, GPUs: c.total, RoundSeconds: c.cfg.RoundSeconds, Nodes: c.nodeSizes()}
	c.frozen = slices.Grow(c.frozen[:0], len(c.active))
	t.eligible = make([]*job, 0, len(c.active))
	// The admitted jobs' views told to the policy in Solve, before Allocate:
	// an eligible one's is its copy in the snapshot (one copy of each view
	// a round, as the first round of a large cluster admits thousands).
	frozenAt := make([]int, 0, len(c.active)-first)
	for i, j := range c.active {
		if why := c.waitReason(j); why != "" {
			t.waits = append(t.waits, policy.Explanation{Job: j.view.ID, Reason: why})
			if i >= first {
				frozenAt = append(frozenAt, -1)
			}
			continue
		}
		if i >= first {
			frozenAt = append(frozenAt, len(c.frozen))
		}
		c.frozen = append(c.frozen, j.view) // a copy: events change the job's view while the policy reads this
		t.eligible = append(t.eligible, j)
		j.inSnapshot = c.round + 1
	}
	t.snap.Jobs = make([]*policy.Job, len(c.frozen))
	for i := range c.frozen {
		t.snap.Jobs[i] = &c.frozen[i]
	}
	t.admitted = make([]*policy.Job, len(frozenAt))
	for k, at := range frozenAt {
		if at >= 0 {
			t.admitted[k] = &c.frozen[at]
		} else {
			v := c.active[first+k].view // waits: not in the snapshot
			t.admitted[k] = &v
		}
	}
	if c.total == 0 {
		t.none = true
	}
	c.open = t
	return t, nil
}

// EndTick closes the open round with the policy's plan (or its error):
// it places the plan's gangs on devices and issues the round's leases. On
// a policy error no round is started and the error is returned.
func (c *Core) EndTick(plan *policy.Plan, solveErr error) (*Round, error) {
	t := c.open
	if t == nil {
		return nil, fmt.Errorf("coordinator: no open round to end")
	}
	c.open = nil
	c.flushPolicy()
	if solveErr != nil {
		c.restoreEnded(t)
		return nil, fmt.Errorf("coordinator: round %d: %w", t.round, solveErr)
	}
	run, err := c.checkPlan(plan, t)
	if err != nil {
		c.restoreEnded(t)
		return nil, fmt.Errorf("coordinator: round %d: policy %s: %w", t.round, c.pol.Name(), err)
	}
	eligible := t.eligible
	if t.changed {
		eligible = slices.DeleteFunc(slices.Clone(eligible), func(j *job) bool { return j.state != Active })
	}
	pl := newPlacer(c.nodes)
	run, plan = c.placeRun(pl, run, eligible, plan)
	if len(t.waits) > 0 {
		np := *plan
		np.Explain = append(slices.Clone(plan.Explain), t.waits...)
		plan = &np
	}
	r := &Round{Index: t.round, Start: t.now, Active: t.active, Plan: plan}
	r.Leases = c.issue(pl, run, t)
	r.Leases = append(r.Leases, t.lost...)
	r.Leases = append(r.Leases, t.exits...)
	r.Ended, r.Lost, r.Covered = t.ended, t.lostJobs, t.covered
	c.life.lastTick, c.life.ticked = t.now, true
	c.plan = plan
	c.round++
	clear(c.frozen) // drop the references the copies hold
	return r, nil
}

// settle counts the previous round's leases that produced no progress as
// failures (spec §3.3 step 2.4) and ends jobs that failed too often.
func (c *Core) settle() []protocol.Lease {
	var exits []protocol.Lease
	for _, j := range slices.Clone(c.active) {
		if j.leaseRound != c.round-1 || j.leaseRound < 0 || j.leaseSteps > 0 || j.leaseElapsed > 0 || j.void != "" {
			continue
		}
		j.failures++
		j.leaseBatch = j.view.BatchSize
		c.measure(j)
		c.fail(j.view.ID)
		if c.cfg.MaxFailedLeases > 0 && j.failures >= c.cfg.MaxFailedLeases {
			reason := fmt.Sprintf("%d consecutive leases without progress", j.failures)
			c.end(j, Failed, reason)
			l := c.lease(j, protocol.Exit)
			l.Reason = reason
			exits = append(exits, l)
		}
	}
	return exits
}

// checkPlan resolves the plan's job ids and checks it fits the cluster. A
// job the plan may run must have been in the round's snapshot; one that
// ended while the policy solved (an event folded meanwhile) is left out.
func (c *Core) checkPlan(p *policy.Plan, t *OpenRound) ([]*job, error) {
	if p == nil {
		return nil, fmt.Errorf("nil plan")
	}
	run := make([]*job, 0, len(p.Run))
	seen := c.newMark()
	gpus := 0
	for _, id := range p.Run {
		j, ok := c.jobs[id]
		if !ok || !t.wasEligible(j) {
			return nil, fmt.Errorf("plan runs job %q, which is not active", id)
		}
		if j.mark == seen {
			return nil, fmt.Errorf("plan runs job %q twice", id)
		}
		j.mark = seen
		if j.state != Active {
			t.changed = true
			continue
		}
		gpus += j.view.Workers
		run = append(run, j)
	}
	if gpus > c.total && !c.dynamic { // with dynamic membership placement drops the excess (repair.go)
		return nil, fmt.Errorf("plan needs %d GPUs, the cluster has %d", gpus, c.total)
	}
	return run, nil
}

// issue returns RUN leases for the placed jobs (an extension when the job
// ran in the previous round on the same devices), then SUSPEND leases for
// jobs that ran in the previous round and do not now.
func (c *Core) issue(p *placer, run []*job, t *OpenRound) []protocol.Lease {
	leases := make([]protocol.Lease, 0, len(run))
	scheduled := c.newMark()
	for _, j := range run {
		l := c.leaseAt(j, protocol.Run, t.round, t.now)
		l.Workers = p.ids(j.next)
		l.Devices = cloneGrant(j.next)
		l.Extension = c.ranLast(j) && sameGrant(j.devices, j.next)
		if c.runLease(j, &l, t.round, t.now) {
			t.covered = append(t.covered, j.view.ID)
		}
		leases = append(leases, l)
		j.mark = scheduled
	}
	for _, j := range c.active {
		if j.mark != scheduled && j.leaseRound == t.round-1 && j.leaseRound >= 0 {
			l := c.leaseAt(j, protocol.Suspend, t.round, t.now)
			l.Reason = "preempted"
			if j.void != "" {
				l.Reason = j.void
			}
			leases = append(leases, l)
			j.workers, j.devices = nil, nil
		}
		j.void = ""
	}
	for i, j := range run {
		if j.leaseRound != t.round-1 || j.leaseRound < 0 {
			// A new lease; a renewed one was reset when the round began
			// and keeps what it made since.
			j.leaseSteps, j.leaseElapsed = 0, 0
		}
		j.workers, j.devices, j.next = slices.Clone(leases[i].Workers), j.next, nil
		j.leaseRound = t.round
		j.view.LastRun = t.round
	}
	return leases
}

// nodeSizes lists the GPU counts of the current nodes, in topology order.
func (c *Core) nodeSizes() []int {
	out := make([]int, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.GPUs
	}
	return out
}

func cloneGrant(g []protocol.NodeDevices) []protocol.NodeDevices {
	if len(g) == 0 {
		return nil
	}
	out := make([]protocol.NodeDevices, len(g))
	for i, nd := range g {
		out[i] = protocol.NodeDevices{Node: nd.Node, Devices: slices.Clone(nd.Devices)}
	}
	return out
}
