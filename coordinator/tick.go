package coordinator

import (
	"cmp"
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

	snap := &policy.Snapshot{Round: c.round, Now: now, GPUs: c.cfg.GPUs, RoundSeconds: c.cfg.RoundSeconds}
	snap.Jobs = make([]*policy.Job, len(c.active))
	for i, j := range c.active {
		snap.Jobs[i] = &j.view
	}
	plan, err := c.pol.Allocate(snap)
	if err != nil {
		return nil, fmt.Errorf("coordinator: round %d: %w", c.round, err)
	}
	run, err := c.checkPlan(plan)
	if err != nil {
		return nil, fmt.Errorf("coordinator: round %d: policy %s: %w", c.round, c.pol.Name(), err)
	}
	r := &Round{Index: c.round, Start: now, Active: len(c.active), Plan: plan}
	r.Leases = c.issue(run)
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
		if j.leaseRound != c.round-1 || j.leaseRound < 0 || j.leaseSteps > 0 || j.leaseElapsed > 0 {
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
	if gpus > c.cfg.GPUs {
		return nil, fmt.Errorf("plan needs %d GPUs, the cluster has %d", gpus, c.cfg.GPUs)
	}
	return run, nil
}

// issue places the scheduled gangs on GPU ids (spec §3.4: widest first; a
// job keeps its previous GPUs when all are free; the rest take the lowest
// free ids) and returns RUN leases, then SUSPEND leases for jobs that ran in
// the previous round and do not now.
func (c *Core) issue(run []*job) []protocol.Lease {
	order := slices.Clone(run)
	slices.SortStableFunc(order, func(a, b *job) int { return cmp.Compare(b.view.Workers, a.view.Workers) })
	taken := make([]bool, c.cfg.GPUs)
	placed := make(map[*job]bool, len(order))
	for _, j := range order {
		if j.leaseRound == c.round-1 && j.leaseRound >= 0 && allFree(taken, j.workers) {
			for _, w := range j.workers {
				taken[w] = true
			}
			placed[j] = true
		}
	}
	for _, j := range order {
		if placed[j] {
			continue
		}
		ws := make([]int, 0, j.view.Workers)
		for w := 0; len(ws) < j.view.Workers; w++ {
			if !taken[w] {
				taken[w] = true
				ws = append(ws, w)
			}
		}
		j.workers = ws
	}
	leases := make([]protocol.Lease, 0, len(run))
	scheduled := make(map[*job]bool, len(run))
	for _, j := range run {
		l := c.lease(j, protocol.Run)
		l.Workers = slices.Clone(j.workers)
		l.Extension = j.leaseRound == c.round-1 && j.leaseRound >= 0
		leases = append(leases, l)
		scheduled[j] = true
	}
	for _, j := range c.active {
		if !scheduled[j] && j.leaseRound == c.round-1 && j.leaseRound >= 0 {
			l := c.lease(j, protocol.Suspend)
			l.Reason = "preempted"
			leases = append(leases, l)
			j.workers = nil
		}
	}
	for _, j := range run {
		j.leaseRound, j.leaseSteps, j.leaseElapsed = c.round, 0, 0
		j.view.LastRun = c.round
	}
	return leases
}

func allFree(taken []bool, ws []int) bool {
	if len(ws) == 0 {
		return false
	}
	for _, w := range ws {
		if w >= len(taken) || taken[w] {
			return false
		}
	}
	return true
}
