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
	best, mode := c.attempt(p, order, pinFirst), pinFirst
	for m := keepInTurn; m <= repack && best < len(order); m++ {
		if n := c.attempt(p, order, m); n > best {
			best, mode = n, m
		}
	}
	if best < len(order) && mode != repack {
		c.attempt(p, order, mode) // restore the best attempt
	}
	repacked := mode != pinFirst
	var dropped, filled, moved []*job
	kept := make([]*job, 0, len(run))
	for _, j := range run {
		switch {
		case j.next == nil:
			dropped = append(dropped, j)
		case repacked && c.ranLast(j) && !sameGrant(j.devices, j.next):
			moved = append(moved, j)
		}
		if j.next != nil {
			kept = append(kept, j)
		}
	}
	if len(dropped) == 0 && len(moved) == 0 {
		return run, plan
	}
	if len(dropped) == 0 {
		return run, repairedPlan(plan, nil, nil, moved)
	}
	in := make(map[*job]bool, len(run))
	for _, j := range run {
		in[j] = true
	}
	for _, j := range waiting {
		if in[j] {
			continue
		}
		if c.ranLast(j) && p.keep(j.devices) {
			j.next = j.devices
		} else {
			j.next = p.fit(j.view.Workers, j.node, j.visible)
		}
		if j.next != nil {
			filled = append(filled, j)
		}
	}
	return append(kept, filled...), repairedPlan(plan, dropped, filled, moved)
}

// Placement attempts, in the order tried: a later one is kept only when it
// places more jobs.
const (
	pinFirst   = iota // jobs that ran keep their devices before anyone else is placed
	keepInTurn        // widest first, each job keeping its devices if still free
	repack            // widest first, from scratch
)

// attempt places order (widest first) from an empty cluster, resident jobs
// before the others, and returns the number of jobs placed. A job that ran
// in the previous round keeps its devices when they are all still there and
// free: before anyone else is placed (pinFirst), when its turn comes
// (keepInTurn), or not at all (repack); the others are fitted (placer.fit).
func (c *Core) attempt(p *placer, order []*job, mode int) int {
	p.reset()
	placed := 0
	for _, j := range order {
		j.next = nil
		if mode == pinFirst && c.ranLast(j) && p.keep(j.devices) {
			j.next = j.devices
			placed++
		}
	}
	for pass := 0; pass < 2; pass++ {
		for _, j := range order {
			if j.next != nil || (j.node != "") != (pass == 0) {
				continue
			}
			if mode == keepInTurn && c.ranLast(j) && p.keep(j.devices) {
				j.next = j.devices
			} else {
				j.next = p.fit(j.view.Workers, j.node, j.visible)
			}
			if j.next != nil {
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
// back-filled ones to the running side, each explained, and a note that
// also names the jobs a repack moved.
func repairedPlan(plan *policy.Plan, dropped, filled, moved []*job) *policy.Plan {
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
	var parts []string
	if len(moved) > 0 {
		parts = append(parts, fmt.Sprintf("repacked the nodes, moving [%s]", names(moved)))
	}
	if len(dropped) > 0 {
		parts = append(parts, fmt.Sprintf("dropped [%s]", names(dropped)))
	}
	if len(filled) > 0 {
		parts = append(parts, fmt.Sprintf("back-filled [%s]", names(filled)))
	}
	note := "repair: " + strings.Join(parts, ", ")
	if np.Note != "" {
		note = np.Note + "; " + note
	}
	np.Note = note
	return &np
}
