package coordinator

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/shockwave-sched/shockwave/policy"
)

// placeRun places the plan's jobs on devices (setting each placed job's
// next grant) and repairs the plan where the nodes do not hold it (see
// doc.go, "Placement" and "Repair"). waiting are the active jobs the policy
// may have left out, in admission order: the candidates of a back-fill. It
// returns the jobs to run, in plan order then back-fill order, and the plan
// as repaired (a copy when it changed; the policy's own is never modified).
func (c *Core) placeRun(p *placer, run, waiting []*job, plan *policy.Plan) ([]*job, *policy.Plan) {
	order := slices.Clone(run)
	slices.SortStableFunc(order, func(a, b *job) int { return cmp.Compare(b.view.Workers, a.view.Workers) })
	ok := c.attempt(p, order, true)
	if ok < len(order) {
		if c.attempt(p, order, false) <= ok {
			c.attempt(p, order, true) // the pinned attempt places as much and moves no job
		}
	}
	var dropped, filled []*job
	kept := make([]*job, 0, len(run))
	for _, j := range run {
		if j.next != nil {
			kept = append(kept, j)
		} else {
			dropped = append(dropped, j)
		}
	}
	if len(dropped) == 0 {
		return run, plan
	}
	in := make(map[*job]bool, len(run))
	for _, j := range run {
		in[j] = true
	}
	for _, j := range waiting {
		if in[j] {
			continue
		}
		if j.next = p.fit(j.view.Workers, j.node, j.visible); j.next != nil {
			filled = append(filled, j)
		}
	}
	return append(kept, filled...), repairedPlan(plan, dropped, filled)
}

// attempt places order (widest first) from an empty cluster: with pin, jobs
// that ran in the previous round first keep their devices when all are
// still there and free; then resident jobs take devices of their node, then
// the others are fitted. It returns the number of jobs placed.
func (c *Core) attempt(p *placer, order []*job, pin bool) int {
	p.reset()
	placed := 0
	for _, j := range order {
		j.next = nil
		if pin && c.ranLast(j) && p.keep(j.devices) {
			j.next = j.devices
			placed++
		}
	}
	for pass := 0; pass < 2; pass++ {
		for _, j := range order {
			if j.next != nil || (j.node != "") != (pass == 0) {
				continue
			}
			if j.next = p.fit(j.view.Workers, j.node, j.visible); j.next != nil {
				placed++
			}
		}
	}
	return placed
}

// ranLast reports a job holding a valid RUN lease of the previous round.
func (c *Core) ranLast(j *job) bool {
	return j.leaseRound == c.round-1 && j.leaseRound >= 0 && j.void == ""
}

// repairedPlan is plan with dropped jobs moved to the waiting side and
// back-filled ones to the running side, each explained, and a note.
func repairedPlan(plan *policy.Plan, dropped, filled []*job) *policy.Plan {
	np := *plan
	np.Explain = slices.Clone(plan.Explain)
	drop := make(map[string]bool, len(dropped))
	for _, j := range dropped {
		drop[j.view.ID] = true
	}
	np.Run = make([]string, 0, len(plan.Run)+len(filled))
	for _, id := range plan.Run {
		if !drop[id] {
			np.Run = append(np.Run, id)
		}
	}
	at := make(map[string]int, len(np.Explain))
	for i, e := range np.Explain {
		at[e.Job] = i
	}
	explain := func(id string, run bool, reason string) {
		if i, ok := at[id]; ok {
			np.Explain[i].Run, np.Explain[i].Reason = run, reason
			return
		}
		np.Explain = append(np.Explain, policy.Explanation{Job: id, Run: run, Reason: reason})
	}
	names := func(js []*job) string {
		s := make([]string, len(js))
		for i, j := range js {
			s[i] = j.view.ID
		}
		return strings.Join(s, " ")
	}
	for _, j := range dropped {
		explain(j.view.ID, false, fmt.Sprintf("plan repair: no placement for a gang of %d GPUs on the nodes left free", j.view.Workers))
	}
	for _, j := range filled {
		np.Run = append(np.Run, j.view.ID)
		explain(j.view.ID, true, "plan repair: back-filled onto devices the plan could not use")
	}
	note := fmt.Sprintf("repair: dropped [%s]", names(dropped))
	if len(filled) > 0 {
		note += fmt.Sprintf(", back-filled [%s]", names(filled))
	}
	if np.Note != "" {
		note = np.Note + "; " + note
	}
	np.Note = note
	return &np
}
