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
func (c *Core) Tick(now float64) (*Round, error) {
	if err := c.advance(now); err != nil {
		return nil, err
	}
	lost := c.expire(now)
	exits := c.settle()
	for _, j := range c.pending {
		j.state = Active
		j.view.Seq = c.nextSeq
		if !j.readmit {
			j.view.AdmitTime, j.view.AdmitRound = now, c.round
		}
		j.readmit = false
		c.nextSeq++
		c.active = append(c.active, j)
		c.pol.Admit(&j.view)
	}
	c.pending = c.pending[:0]

	snap := &policy.Snapshot{Round: c.round, Now: now, GPUs: c.total, RoundSeconds: c.cfg.RoundSeconds, Nodes: c.nodeSizes()}
	snap.Jobs = make([]*policy.Job, 0, len(c.active))
	eligible := make([]*job, 0, len(c.active))
	var waits []policy.Explanation
	for _, j := range c.active {
		if why := c.waitReason(j); why != "" {
			waits = append(waits, policy.Explanation{Job: j.view.ID, Reason: why})
			continue
		}
		snap.Jobs = append(snap.Jobs, &j.view)
		eligible = append(eligible, j)
	}
	plan := &policy.Plan{Round: c.round, Run: []string{}, Note: "no nodes in the cluster"}
	if c.total > 0 {
		var err error
		if plan, err = c.pol.Allocate(snap); err != nil {
			return nil, fmt.Errorf("coordinator: round %d: %w", c.round, err)
		}
	}
	run, err := c.checkPlan(plan)
	if err != nil {
		return nil, fmt.Errorf("coordinator: round %d: policy %s: %w", c.round, c.pol.Name(), err)
	}
	pl := newPlacer(c.nodes)
	run, plan = c.placeRun(pl, run, eligible, plan)
	if len(waits) > 0 {
		np := *plan
		np.Explain = append(slices.Clone(plan.Explain), waits...)
		plan = &np
	}
	r := &Round{Index: c.round, Start: now, Active: len(c.active), Plan: plan}
	r.Leases = c.issue(pl, run)
	r.Leases = append(r.Leases, lost...)
	r.Leases = append(r.Leases, exits...)
	r.Ended, c.ended = c.ended, nil
	r.Lost, c.life.lost = c.life.lost, nil
	c.life.lastTick, c.life.ticked = now, true
	c.plan = plan
	c.round++
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
		c.pol.Fail(j.view.ID)
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

// checkPlan resolves the plan's job ids and checks it fits the cluster.
func (c *Core) checkPlan(p *policy.Plan) ([]*job, error) {
	if p == nil {
		return nil, fmt.Errorf("nil plan")
	}
	run := make([]*job, 0, len(p.Run))
	seen := make(map[string]bool, len(p.Run))
	gpus := 0
	for _, id := range p.Run {
		j, ok := c.jobs[id]
		if !ok || j.state != Active {
			return nil, fmt.Errorf("plan runs job %q, which is not active", id)
		}
		if seen[id] {
			return nil, fmt.Errorf("plan runs job %q twice", id)
		}
		seen[id] = true
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
func (c *Core) issue(p *placer, run []*job) []protocol.Lease {
	leases := make([]protocol.Lease, 0, len(run))
	scheduled := make(map[*job]bool, len(run))
	for _, j := range run {
		l := c.lease(j, protocol.Run)
		l.Workers = p.ids(j.next)
		l.Devices = cloneGrant(j.next)
		l.Extension = c.ranLast(j) && sameGrant(j.devices, j.next)
		leases = append(leases, l)
		scheduled[j] = true
	}
	for _, j := range c.active {
		if !scheduled[j] && j.leaseRound == c.round-1 && j.leaseRound >= 0 {
			l := c.lease(j, protocol.Suspend)
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
		j.workers, j.devices, j.next = slices.Clone(leases[i].Workers), j.next, nil
		j.leaseRound, j.leaseSteps, j.leaseElapsed = c.round, 0, 0
		j.view.LastRun = c.round
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
