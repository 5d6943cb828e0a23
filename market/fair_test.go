package market_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/shockwave-sched/shockwave/market"
)

// worstRho is the largest finish-aware projected ρ of an allocation
// (market.FairnessTightest): a job that finishes within its n rounds is
// judged at the end of the round in which it finishes, any other at the
// window's end.
func worstRho(p market.Problem, n []int) float64 {
	T, delta := defaults(p)
	share := shareOf(p)
	worst := 0.0
	rem := func(j market.Job, n int) float64 {
		prog := math.Min(delta*float64(n)/j.EpochSeconds, j.Epochs-j.Progress)
		return math.Max(0, j.Remaining-j.EpochSeconds*prog)
	}
	for i, j := range p.Jobs {
		r := rem(j, n[i])
		end := T
		if r <= 0 { // it finishes in the round where its remaining time reaches 0
			end = 0
			for rem(j, end) > 0 {
				end++
			}
		}
		worst = math.Max(worst, (delta*float64(p.Round+end)+r/share)/j.FairFinish)
	}
	return worst
}

// remainingAfter is job j's remaining time after n rounds, r_j(n).
func remainingAfter(p market.Problem, j market.Job, n int) float64 {
	_, delta := defaults(p)
	prog := math.Min(delta*float64(n)/j.EpochSeconds, j.Epochs-j.Progress)
	return math.Max(0, j.Remaining-j.EpochSeconds*prog)
}

// critInputs is R̄ = min(R̂, cap) and R⁺ = max(R̂, P90)·R̄/R̂ of the
// critical bounds (a zero band or cap is absent).
func critInputs(j market.Job) (mean, high float64) {
	mean, high = j.Remaining, math.Max(j.Remaining, j.RemainingHigh)
	if j.RemainingCap > 0 && j.RemainingCap < mean {
		high, mean = high*j.RemainingCap/mean, j.RemainingCap
	}
	return mean, high
}

// criticalBounds recomputes FairnessTightest's critical bounds: with τ =
// max(Σ w·R̄/G, max R̄) − T·Δ, the least n with R⁺ − d·p(n) ≤ τ, or the
// rounds after which more rounds add nothing when no n does.
func criticalBounds(p market.Problem) []int {
	T, delta := defaults(p)
	work, top := 0.0, 0.0
	for _, j := range p.Jobs {
		mean, _ := critInputs(j)
		work += float64(j.Workers) * mean
		top = math.Max(top, mean)
	}
	tau := math.Max(0, math.Max(work/float64(p.GPUs), top)-float64(T)*delta)
	out := make([]int, len(p.Jobs))
	for i, j := range p.Jobs {
		hi := T
		for n := 0; n <= T; n++ {
			if delta*float64(n)/j.EpochSeconds >= j.Epochs-j.Progress {
				hi = n
				break
			}
		}
		out[i] = hi
		_, high := critInputs(j)
		for n := 0; n <= hi; n++ {
			prog := math.Min(delta*float64(n)/j.EpochSeconds, j.Epochs-j.Progress)
			if math.Max(0, high-j.EpochSeconds*prog) <= tau {
				out[i] = n
				break
			}
		}
	}
	return out
}

// bruteTightest enumerates every allocation that fits each round and
// returns the least worst ρ among those that meet the critical bounds, or
// among all of them when none does.
func bruteTightest(p market.Problem) (rho float64, critOK bool) {
	T, _ := defaults(p)
	N := len(p.Jobs)
	crit := criticalBounds(p)
	var fits []int
	for mask := 0; mask < 1<<N; mask++ {
		used := 0
		for i := range N {
			if mask&(1<<i) != 0 {
				used += p.Jobs[i].Workers
			}
		}
		if used <= p.GPUs {
			fits = append(fits, mask)
		}
	}
	best, bestCrit := math.Inf(1), math.Inf(1)
	x := make([]int, T)
	n := make([]int, N)
	var walk func(t int)
	walk = func(t int) {
		if t == T {
			for i := range n {
				n[i] = 0
				for _, m := range x {
					if m&(1<<i) != 0 {
						n[i]++
					}
				}
			}
			rho := worstRho(p, n)
			best = math.Min(best, rho)
			for i := range n {
				if n[i] < crit[i] {
					return
				}
			}
			bestCrit = math.Min(bestCrit, rho)
			return
		}
		for _, m := range fits {
			x[t] = m
			walk(t + 1)
		}
	}
	walk(0)
	if !math.IsInf(bestCrit, 1) {
		return bestCrit, true
	}
	return best, false
}

// TestTightest_FindsTheLeastFeasibleBoundOfBruteForce checks the binding
// fairness rule on tiny instances against exhaustive enumeration: where
// ρmax is infeasible, the solve is not relaxed, its bound is the least
// worst ρ any packing that meets the critical bounds achieves (any packing
// when none does; ρmax when that is larger), and its allocation meets that
// bound.
func TestTightest_FindsTheLeastFeasibleBoundOfBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 14))
	s := market.DefaultSettings()
	s.Fairness = market.FairnessTightest
	bound, withCrit := 0, 0
	for trial := 0; trial < 300; trial++ {
		p := tinyProblem(rng)
		for i := range p.Jobs { // a forecast band and a pace cap on some jobs
			if rng.IntN(2) == 0 {
				p.Jobs[i].RemainingHigh = p.Jobs[i].Remaining * (1 + rng.Float64())
			}
			if rng.IntN(3) == 0 {
				p.Jobs[i].RemainingCap = p.Jobs[i].Remaining * (0.2 + rng.Float64())
			}
		}
		r, err := market.Solve(p, s)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != market.Optimal && r.Status != market.GapBounded && r.Status != market.Limit {
			t.Fatalf("trial %d: status %v", trial, r.Status)
		}
		if r.Relaxed || r.RhoBound < s.RhoMax {
			t.Fatalf("trial %d: relaxed %v, bound %g", trial, r.Relaxed, r.RhoBound)
		}
		if r.RhoBound == s.RhoMax {
			continue // the original constraint was feasible
		}
		bound++
		brute, critOK := bruteTightest(p)
		want := math.Max(s.RhoMax, brute)
		if math.Abs(r.RhoBound-want) > 1e-6*want {
			t.Fatalf("trial %d: bound %.9g, brute force %.9g (%+v)", trial, r.RhoBound, want, p)
		}
		if got := worstRho(p, r.Rounds); got > r.RhoBound*(1+1e-6) {
			t.Fatalf("trial %d: allocation's worst ρ %.9g above its bound %.9g", trial, got, r.RhoBound)
		}
		if crit := criticalBounds(p); critOK {
			for i, n := range r.Rounds {
				if n < crit[i] {
					t.Fatalf("trial %d: job %d got %d rounds, below its critical bound %d", trial, i, n, crit[i])
				}
			}
			withCrit++
		}
	}
	if withCrit < 20 {
		t.Fatalf("only %d of the %d bound instances could meet their critical bounds", withCrit, bound)
	}
	if bound < 50 {
		t.Fatalf("only %d of 300 instances needed a tighter bound", bound)
	}
}

// TestTightest_RelaxRuleIsTheOriginal checks that FairnessRelax, the zero
// value, still answers an infeasible instance with the relaxation.
func TestTightest_RelaxRuleIsTheOriginal(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 15))
	relaxed := 0
	for range 200 {
		p := tinyProblem(rng)
		r, err := market.Solve(p, market.DefaultSettings())
		if err != nil {
			t.Fatal(err)
		}
		if r.Relaxed {
			relaxed++
			if r.RhoBound != 0 {
				t.Fatalf("relaxed solve reports bound %g", r.RhoBound)
			}
		}
	}
	if relaxed == 0 {
		t.Fatal("no instance needed the relaxation")
	}
}

func TestParseFairness_RejectsUnknownRule(t *testing.T) {
	for _, s := range []string{"relax", "tightest"} {
		f, err := market.ParseFairness(s)
		if err != nil || f.String() != s {
			t.Fatalf("%s: %v %v", s, f, err)
		}
	}
	if _, err := market.ParseFairness("loose"); err == nil {
		t.Fatal("unknown rule accepted")
	}
}
