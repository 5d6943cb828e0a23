package coordinator

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
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
	need := 0
	for _, j := range order {
		need += j.view.Workers
	}
	c.attempt(p, order, pinFirst)
	best, mode := placedGPUs(order), pinFirst
	for m := pinFirst + 1; m <= repack && best < need; m++ {
		c.attempt(p, order, m)
		if n := placedGPUs(order); n > best {
			best, mode = n, m
		}
	}
	if best < need && mode != repack {
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
	in := c.newMark()
	for _, j := range run {
		j.mark = in
	}
	for _, j := range waiting {
		if j.mark == in {
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

// placedGPUs is the GPUs of the jobs of order that have a grant.
func placedGPUs(order []*job) int {
	n := 0
	for _, j := range order {
		if j.next != nil {
			n += j.view.Workers
		}
	}
	return n
}

// Placement attempts, in the order tried: a later one is kept only when it
// places more GPUs (so a wide gang is not traded for narrow ones).
const (
	pinFirst   = iota // jobs that ran keep their devices before anyone else is placed
	evict             // pinFirst, then gangs left out evict the fewest kept jobs of one node
	keepInTurn        // widest first, each job keeping its devices if still free
	repack            // widest first, from scratch
)

// attempt places order (widest first) from an empty cluster, resident jobs
// before the others. A job that ran in the previous round keeps its devices
// when they are all still there and free: before anyone else is placed (pinFirst), when its turn comes
// (keepInTurn), or not at all (repack); the others are fitted (placer.fit).
func (c *Core) attempt(p *placer, order []*job, mode int) {
	p.reset()
	placed := 0 // jobs: the eviction is skipped when every one has a place
	for _, j := range order {
		j.next = nil
		if (mode == pinFirst || mode == evict) && c.ranLast(j) && p.keep(j.devices) {
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
	if mode == evict && placed < len(order) {
		c.evictFor(p, order)
	}
}

// evictFor places the gangs pinFirst left out (widest first, not resident,
// no wider than a node, fewer GPUs than are free in the whole cluster: the
// gang was kept out by fragmentation) by evicting jobs that kept their
// devices: on the
// node where the fewest kept jobs (then the fewest GPUs) free enough room,
// narrowest first. Evicted jobs are then fitted anew, widest first; they
// evict nobody, and one that finds no room is left out.
func (c *Core) evictFor(p *placer, order []*job) {
	byNode := make(map[int][]*job)
	for _, j := range order {
		if j.next != nil && j.node == "" && len(j.next) == 1 && c.ranLast(j) {
			n := p.index[j.next[0].Node]
			byNode[n] = append(byNode[n], j)
		}
	}
	for _, js := range byNode {
		slices.SortStableFunc(js, func(a, b *job) int { return cmp.Compare(a.view.Workers, b.view.Workers) })
	}
	var evicted []*job
	out := make(map[*job]bool)
	free := 0
	for _, f := range p.free {
		free += f
	}
	for _, u := range order {
		w := u.view.Workers
		if u.next != nil || u.node != "" || w > p.maxK || out[u] || free < w {
			continue // placed, not evicting, or no room in the whole cluster: not fragmentation
		}
		best, bestK, bestW := -1, 0, 0
		for n := range p.nodes {
			if p.nodes[n].GPUs < w {
				continue
			}
			k, freed := 0, p.free[n]
			for _, j := range byNode[n] {
				if freed >= w {
					break
				}
				if j.next != nil {
					k, freed = k+1, freed+j.view.Workers
				}
			}
			if freed >= w && (best < 0 || k < bestK || k == bestK && freed-p.free[n] < bestW) {
				best, bestK, bestW = n, k, freed-p.free[n]
			}
		}
		if best < 0 {
			continue
		}
		for _, j := range byNode[best] {
			if p.free[best] >= w {
				break
			}
			if j.next != nil {
				p.release(j.next)
				j.next, out[j] = nil, true
				evicted = append(evicted, j)
			}
		}
		u.next = []protocol.NodeDevices{{Node: p.nodes[best].Name, Devices: p.take(best, w, nil)}}
		free -= w
	}
	slices.SortStableFunc(evicted, func(a, b *job) int { return cmp.Compare(b.view.Workers, a.view.Workers) })
	for _, j := range evicted {
		j.next = p.fit(j.view.Workers, "", nil)
	}
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
	// The few jobs it explains anew, applied below in one pass over the
	// plan's explanations (an index of every job's explanation would cost a
	// map of thousands a round on a large cluster).
	var changes []change
	explain := func(id string, run bool, reason string) {
		changes = append(changes, change{id: id, run: run, reason: reason})
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
	if len(changes) > 0 {
		np.Explain = explainAnew(plan.Explain, changes)
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

// change is a job's new explanation in a repaired plan.
type change struct {
	id, reason string
	run        bool
}

// explainAnew is a copy of explain with each changed job's explanation
// replaced (the last, should the plan have several), or appended for a
// job it does not explain; of a job's several changes, the last counts.
func explainAnew(explain []policy.Explanation, changes []change) []policy.Explanation {
	out := slices.Clone(explain)
	want := make(map[string]int, len(changes))
	for i, c := range changes {
		want[c.id] = i
	}
	found := make([]bool, len(changes))
	for i := len(out) - 1; i >= 0; i-- {
		if k, ok := want[out[i].Job]; ok && !found[k] {
			out[i].Run, out[i].Reason, found[k] = changes[k].run, changes[k].reason, true
		}
	}
	for k, c := range changes {
		if !found[k] && want[c.id] == k { // a job changed twice: the last change counts
			found[k] = true
			out = append(out, policy.Explanation{Job: c.id, Run: c.run, Reason: c.reason})
		}
	}
	return out
}
