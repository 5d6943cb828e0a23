package market

import "math"

// Solve solves one round's market (§4.5): it first solves the problem with
// the finish-time-fairness constraints; if no allocation meets them it
// solves the priority-weighted relaxation without them (Result.Relaxed).
// The rounds of the allocation are then ordered as the package doc
// describes. A nil s means DefaultSettings(). Malformed input returns an
// error wrapping ErrInvalid; an infeasible FTF set is not an error.
func Solve(p Problem, s *Settings) (*Result, error) {
	if s == nil {
		s = DefaultSettings()
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	in := newInstance(&p, s)
	N := len(in.jobs)
	if N == 0 {
		r := &Result{Status: Optimal, Rounds: []int{}, Progress: []float64{}, Priorities: []float64{},
			Rho: []float64{}, Schedule: make([][]int, in.T)}
		for t := range r.Schedule {
			r.Schedule[t] = []int{}
		}
		return r, nil
	}
	weights := make([]float64, N)
	scale := 1 / float64(N*in.T)
	for c := range weights {
		weights[c] = scale
	}
	var stats Stats
	m := newModel(in, weights, true)
	sr := newSearcher(m, s)
	feasible := sr.run()
	sr.balanceTwins()
	stats.add(sr.stats)
	unproven := sr.unproven
	if !feasible && s.Fairness == FairnessTightest {
		var tm *model
		var tsr *searcher
		if tm, tsr, feasible = in.tightest(m, weights, &stats); feasible {
			m, sr = tm, tsr
			unproven = unproven || sr.unproven
			return in.result(m, sr, false, unproven, stats), nil
		}
	}
	if !feasible {
		for c := range weights {
			weights[c] = in.prio[c] * scale
		}
		m = newModel(in, weights, false)
		sr = newSearcher(m, s)
		sr.run()
		sr.balanceTwins()
		stats.add(sr.stats)
		unproven = unproven || sr.unproven
	}
	return in.result(m, sr, !feasible, unproven, stats), nil
}

// result assembles the answer in input order.
func (in *instance) result(m *model, sr *searcher, relaxed, unproven bool, stats Stats) *Result {
	N, T := len(in.jobs), in.T
	r := &Result{
		Relaxed:    relaxed,
		Rounds:     make([]int, N),
		Progress:   make([]float64, N),
		Priorities: make([]float64, N),
		Rho:        make([]float64, N),
		Schedule:   make([][]int, T),
		Stats:      stats,
	}
	n := sr.inc.n
	for c, i := range in.perm {
		r.Rounds[i] = n[c]
		r.Progress[i] = m.jobs[c].p[n[c]]
		r.Rho[i] = in.rho[c]
		r.Priorities[i] = 1
		if relaxed {
			r.Priorities[i] = in.prio[c]
		}
	}
	// Each round's jobs in ascending input order: walk the input order.
	on := arrange(in, m, n, sr.inc.on)
	count := make([]int, T)
	for k, v := range on {
		if v {
			count[k%T]++
		}
	}
	for t := range r.Schedule {
		r.Schedule[t] = make([]int, 0, count[t])
	}
	canon := make([]int, N)
	for c, i := range in.perm {
		canon[i] = c
	}
	for i, c := range canon {
		for t, v := range on[c*T : (c+1)*T] {
			if v {
				r.Schedule[t] = append(r.Schedule[t], i)
			}
		}
	}
	if !relaxed {
		r.RhoBound = in.ftfRho
	}
	r.Objective = sr.inc.val
	r.MaxRemaining = m.maxRemaining(n)
	r.Price = m.price(n)
	r.Bound = max(sr.bound, r.Objective)
	if unproven { // an unanswered packing question: nothing is certified
		r.Bound = math.Inf(1)
	}
	diff := r.Bound - r.Objective
	r.Gap = diff / max(math.Abs(r.Objective), 1e-10)
	tie := 1e-12 * max(1, m.uScale+m.k*m.rScale) // rounding of the objective's terms
	if diff <= tie {
		r.Gap = 0
	}
	switch {
	case diff > tie && r.Gap > in.set.Gap:
		r.Status = Limit
	case relaxed:
		r.Status = Relaxed
	case diff <= tie:
		r.Status = Optimal
	default:
		r.Status = GapBounded
	}
	return r
}
