package market

// lowerBounds computes the FTF lower bounds lo_i(ρ) of the tightest
// fairness rule (fair.go) at the bisection's probes, with the work of one
// probe mostly proportional to the jobs rather than to the job-rounds.
// Each bound is
//
//	lo_i(ρ) = max(first_i(ρ), crit_i),  first_i(ρ) = min{n : ftfAt(i, n) at ρ}
//
// (−1 when no n passes), the value ftfLow computes. Two facts make the
// probes cheap, and neither changes a bound or a probe's answer:
//
//   - first_i is nonincreasing in ρ: the test Δ·(R+e) + r/s ≤ ρ·F + tol·max(1, ρ·F)
//     is monotone in ρ for F > 0, as the rounded product and sum are. So
//     when a probe at ρ_b has packed, every later probe of the bisection
//     (ρ < ρ_b) starts its scan at first_i(ρ_b) (from).
//   - One job with no passing n makes a probe fail whatever the others
//     give, so the job that failed the last probe (witness) is tried first.
//
// The critical bounds crit_i do not depend on ρ; they are computed once per
// bisection.
type lowerBounds struct {
	in      *instance
	m       *model
	lo      []int // the last probe's bounds (complete when it packed)
	firsts  []int // the last probe's first_i
	from    []int // first_i at the smallest ρ that packed in this bisection
	crit    []int // crit_i (critLow)
	witness int   // the job that failed the last probe for want of any n
}

func newLowerBounds(in *instance, m *model) *lowerBounds {
	n := len(in.jobs)
	return &lowerBounds{in: in, m: m, lo: make([]int, n), firsts: make([]int, n), from: make([]int, n), crit: make([]int, n)}
}

// start begins a bisection (at the instance's current critical bounds).
func (lb *lowerBounds) start() {
	for c := range lb.from {
		lb.from[c] = 0
		if r := int(lb.m.rep[c]); r != c {
			lb.crit[c] = lb.crit[r] // the same job but its ID
			continue
		}
		lb.crit[c] = lb.in.critLow(&lb.in.jobs[c], &lb.m.jobs[c])
	}
}

// first is first_i(ρ) at the instance's current bound, scanning from n0
// (no n below it passes).
func (lb *lowerBounds) first(c, n0 int) int {
	j, jm := &lb.in.jobs[c], &lb.m.jobs[c]
	for n := n0; n <= jm.hi; n++ {
		if lb.in.ftfAt(j, n, jm.r[n]) {
			return n
		}
	}
	return -1
}

// packs sets the instance's FTF bound to rho and reports whether the
// bounds lo(rho) pack (pk.check). A probe of a bisection must lie below
// every probe that packed before it (it does: a bisection that packed at
// ρ_b searches below ρ_b).
func (lb *lowerBounds) packs(pk *packer, rho float64) bool {
	lb.in.ftfRho = rho
	if w := lb.witness; w < len(lb.lo) && lb.first(w, lb.from[w]) < 0 {
		return false
	}
	for c := range lb.lo {
		if r := int(lb.m.rep[c]); r != c { // the same job but its ID: its scan passed
			lb.firsts[c], lb.lo[c] = lb.firsts[r], lb.lo[r]
			continue
		}
		f := lb.first(c, lb.from[c])
		if f < 0 {
			lb.witness = c
			return false
		}
		lb.firsts[c], lb.lo[c] = f, max(f, lb.crit[c])
	}
	ok, _ := pk.check(lb.lo)
	if ok {
		copy(lb.from, lb.firsts)
	}
	return ok
}
