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

// bruteTightest enumerates every allocation that fits each round and
// returns the least worst ρ among them.
func bruteTightest(p market.Problem) float64 {
	T, _ := defaults(p)
	N := len(p.Jobs)
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
	best := math.Inf(1)
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
			best = math.Min(best, worstRho(p, n))
			return
		}
		for _, m := range fits {
			x[t] = m
			walk(t + 1)
		}
	}
	walk(0)
	return best
}

// TestTightest_FindsTheLeastFeasibleBoundOfBruteForce checks the binding
// fairness rule on tiny instances against exhaustive enumeration: where
// ρmax is infeasible, the solve is not relaxed, its bound is the least
// worst ρ any packing achieves (or ρmax when that is larger), and its
// allocation meets that bound.
func TestTightest_FindsTheLeastFeasibleBoundOfBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 14))
	s := market.DefaultSettings()
	s.Fairness = market.FairnessTightest
	bound := 0
	for trial := 0; trial < 300; trial++ {
		p := tinyProblem(rng)
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
		want := math.Max(s.RhoMax, bruteTightest(p))
		if math.Abs(r.RhoBound-want) > 1e-6*want {
			t.Fatalf("trial %d: bound %.9g, brute force %.9g (%+v)", trial, r.RhoBound, want, p)
		}
		if got := worstRho(p, r.Rounds); got > r.RhoBound*(1+1e-6) {
			t.Fatalf("trial %d: allocation's worst ρ %.9g above its bound %.9g", trial, got, r.RhoBound)
		}
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
