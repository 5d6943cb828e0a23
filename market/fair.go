package market

import (
	"fmt"
	"math"
	"slices"
)

// Fairness selects what a solve does when the finish-time-fairness
// constraints at Settings.RhoMax admit no allocation.
type Fairness int

const (
	// FairnessRelax is the original's rule (§4.5): drop the FTF
	// constraints and weight each job's utility by its priority π.
	FairnessRelax Fairness = iota
	// FairnessTightest keeps the constraints at the tightest bound that
	// some allocation meets:
	//
	//	ρ* = min ρ > RhoMax such that every job has an n with ρ_i(n) ≤ ρ
	//	and the lower bounds lo_i(ρ) = min{n : ρ_i(n) ≤ ρ} pack, where
	//	ρ_i(n) = (Δ·(R+e_i(n)) + r_i(n)/s)/F_i, e_i(n) = n if the job
	//	finishes within its n rounds (r_i(n) = 0), T otherwise,
	//
	// and solves the unweighted problem (the FTF problem of §4.5 at ρ*)
	// under lo(ρ*). The bounds include the critical bounds of the jobs
	// that extend the makespan (critBounds) when some ρ packs with them;
	// otherwise they are dropped. The finish-aware e_i differs from the
	// original's constraint, which always counts the window's end, so that
	// a job finishing inside the window is not judged late whatever it
	// gets (with it, ρ* is set by those short jobs and binds nothing).
	// lo_i(ρ) falls as ρ grows, so ρ* is found by bisection over the
	// finitely many values ρ_i(n), one packing check per step (the count
	// model makes each check cheap; lowerBounds, fairbounds.go, resumes each
	// job's scan from the last step that packed). When no value packs (only possible
	// when the packing question goes unanswered), the relaxation is solved.
	FairnessTightest
)

// String returns "relax" or "tightest".
func (f Fairness) String() string {
	switch f {
	case FairnessRelax:
		return "relax"
	case FairnessTightest:
		return "tightest"
	}
	return fmt.Sprintf("Fairness(%d)", int(f))
}

// ParseFairness accepts "relax" and "tightest".
func ParseFairness(s string) (Fairness, error) {
	switch s {
	case "relax":
		return FairnessRelax, nil
	case "tightest":
		return FairnessTightest, nil
	}
	return 0, fmt.Errorf("%w: fairness %q, want relax or tightest", ErrInvalid, s)
}

// tightest finds ρ* (FairnessTightest) and solves the model constrained by
// it. free is a model of the same instance (its curves and classes do not
// depend on the bound). It reports false when no bound packs; stats gets
// the work done.
func (in *instance) tightest(free *model, weights []float64, stats *Stats) (*model, *searcher, bool) {
	in.tight = true
	defer func() {
		if !in.tight {
			in.ftfRho, in.crit = in.set.RhoMax, false
		}
	}()
	pk := newPacker(free)
	rhos := in.rhoCandidates(free)
	lb := newLowerBounds(in, free)
	// rhos[a] does not pack (or a = −1), rhos[b] does (or b = len).
	bisect := func() int {
		lb.start()
		a, b := -1, len(rhos)
		for b-a > 1 {
			mid := (a + b) / 2
			if lb.packs(pk, math.Float64frombits(rhos[mid])) {
				b = mid
			} else {
				a = mid
			}
		}
		return b
	}
	in.critBounds()
	b := bisect()
	if in.crit && b == len(rhos) {
		in.crit = false
		b = bisect()
	}
	stats.PackChecks += pk.checks
	if b == len(rhos) {
		in.tight = false
		return nil, nil, false
	}
	in.ftfRho = math.Float64frombits(rhos[b])
	m := newModel(in, weights, true)
	sr := newSearcher(m, in.set)
	ok := sr.run()
	sr.balanceTwins()
	stats.add(sr.stats)
	if !ok {
		in.tight = false
	}
	return m, sr, ok
}

// critBounds turns on the critical bounds of FairnessTightest. With
//
//	τ = max(Σ_i w_i·R̄_i / G, max_i R̄_i) − T·Δ,   R̄_i = min(R̂_i, cap_i),
//
// the earliest time after the window by which the present jobs could all
// finish (the cluster's GPU-time and the longest job both bound it), a job
// whose remaining time after the window could exceed τ extends the
// makespan; its critical bound is the least n that brings
// max(0, R⁺_i − Δ·n) down to τ, R⁺_i = max(R̂_i, P90_i)·R̄_i/R̂_i (all the
// rounds it can use when none does; Δ·n is d_i·p_i(n) before the job
// ends). Here P90_i is Job.RemainingHigh, the upper edge of the forecast's
// calibrated band, and cap_i is Job.RemainingCap, the remaining time at the
// pace the coordinator observed (critRemaining). The band makes the
// bounds robust: with the mean alone a long job is deferred until it is
// just in time for τ, and any upward revision of its forecast (a batch-size
// change, noise) then extends the makespan; the cap keeps a job that
// reports a slower throughput than it shows from claiming the bound (it
// would otherwise become the longest job, be given every round and set τ
// for everyone). C* = max_t [t + Σ_i w_i·max(0, R̄_i − t)/G], the tail-aware
// bound, adds nothing: the bracket is convex in t (its slope
// 1 − Σ_{R̄_i>t} w_i/G never decreases), so its maximum over [0, max R̄] is
// at an end, the backlog or the longest job. The original objective's makespan
// term, k·max_i r_i, trades only the single longest job against the
// utility; under the binding FTF bounds and the unweighted utility (which
// favours the jobs that progress fastest relative to their size), the other
// long jobs far from their fair-share target were left to the end and ran
// alone. The bounds rank before fairness: ρ* is the tightest bound that
// packs with them (they are dropped when none does).
func (in *instance) critBounds() {
	work, top := 0.0, 0.0
	for c := range in.jobs {
		mean, _ := in.jobs[c].critRemaining()
		work += float64(in.jobs[c].Workers) * mean
		top = max(top, mean)
	}
	in.critAt = max(0, max(work/float64(in.G), top)-float64(in.T)*in.delta)
	in.crit = true
}

// critRemaining returns R̄ = min(R̂, cap) and R⁺ = max(R̂, P90)·R̄/R̂ of
// critBounds: the cap scales the forecast, band included (a zero
// RemainingHigh or RemainingCap is absent).
func (j *Job) critRemaining() (mean, high float64) {
	mean, high = j.Remaining, max(j.Remaining, j.RemainingHigh)
	if c := j.RemainingCap; c > 0 && c < mean {
		high *= c / mean
		mean = c
	}
	return mean, high
}

// critLow is a job's critical bound (0 while the bounds are off).
func (in *instance) critLow(j *Job, jm *jobModel) int {
	if !in.crit {
		return 0
	}
	_, high := j.critRemaining()
	for n := 0; n <= jm.hi; n++ {
		if max(0, high-j.EpochSeconds*jm.p[n]) <= in.critAt {
			return n
		}
	}
	return jm.hi
}

// rhoCandidates returns RhoMax and the sorted distinct values ρ_i(n)
// above it at which some job's lower bound changes. (RhoMax itself can
// pack here although it did not in the original constraint, which counts
// the window's end for every job.) The values are positive, so their bit
// patterns order as they do (sortPositive); it returns the patterns.
func (in *instance) rhoCandidates(m *model) []uint64 {
	size := 1
	for c := range m.jobs {
		if int(m.rep[c]) == c {
			size += m.jobs[c].hi + 1
		}
	}
	bits := make([]uint64, 1, size)
	bits[0] = math.Float64bits(in.set.RhoMax)
	for c := range in.jobs {
		if int(m.rep[c]) != c {
			continue // its values are its representative's
		}
		j, jm := &in.jobs[c], &m.jobs[c]
		for n := 0; n <= jm.hi; n++ {
			end := in.T
			if jm.r[n] <= 0 {
				end = n
			}
			rho := (in.delta*float64(in.R+end) + jm.r[n]/in.share) / j.FairFinish
			if rho > in.set.RhoMax {
				bits = append(bits, math.Float64bits(rho*(1+2*ftfTol)))
			}
		}
	}
	return slices.Compact(sortPositive(bits))
}
