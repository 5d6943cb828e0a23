package market_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/shockwave-sched/shockwave/market"
)

// bruteForce is the naive reference: it enumerates every binary x[i,t]
// that respects the per-round capacity, keeps the FTF-feasible ones, and
// falls back to the π-weighted objective over all x when none is (§4.5).
// p_i is set to its largest feasible value (TestPaper_ObjectiveMonotoneInProgress
// shows that is optimal).
func bruteForce(p market.Problem, s *market.Settings) (best float64, relaxed bool) {
	T, _ := defaults(p)
	N := len(p.Jobs)
	var fits []int // subsets of jobs that fit in one round
	for mask := 0; mask < 1<<N; mask++ {
		used := 0
		for i := 0; i < N; i++ {
			if mask&(1<<i) != 0 {
				used += p.Jobs[i].Workers
			}
		}
		if used <= p.GPUs {
			fits = append(fits, mask)
		}
	}
	pi := priorities(p, s)
	bestFTF, bestAll := math.Inf(-1), math.Inf(-1)
	x := make([]int, T) // x[t] = the mask of round t
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
			if ev := evaluate(p, s, n, ones(N)); ev.ftfOK {
				bestFTF = math.Max(bestFTF, ev.objective)
			}
			bestAll = math.Max(bestAll, evaluate(p, s, n, pi).objective)
			return
		}
		for _, m := range fits {
			x[t] = m
			walk(t + 1)
		}
	}
	walk(0)
	if !math.IsInf(bestFTF, -1) {
		return bestFTF, false
	}
	return bestAll, true
}

func tinyProblem(rng *rand.Rand) market.Problem {
	G := 1 + rng.IntN(4)
	T := 1 + rng.IntN(4)
	N := 1 + rng.IntN(4)
	R := rng.IntN(40)
	p := market.Problem{GPUs: G, Round: R, Rounds: T}
	for i := 0; i < N; i++ {
		p.Jobs = append(p.Jobs, randomJob(rng, fmt.Sprintf("j%d", i), G, R, T, N, G))
	}
	return p
}

func TestSolve_MatchesBruteForceOnTinyInstances(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	counts := map[string]int{}
	for trial := 0; trial < 400; trial++ {
		p := tinyProblem(rng)
		s := randomSettings(rng)
		want, wantRelaxed := bruteForce(p, s)
		r, err := market.Solve(p, s)
		if err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		checkResult(t, p, s, r)
		if r.Relaxed != wantRelaxed {
			t.Fatalf("trial %d: relaxed = %v, brute force says %v\n%+v", trial, r.Relaxed, wantRelaxed, p)
		}
		tol := 1e-9 * termScale(p, s, r.Relaxed) // float sums cannot resolve less
		if math.Abs(r.Objective-want) > tol {
			t.Fatalf("trial %d: objective %.12g, brute force %.12g (status %v)\n%+v\nrounds %v",
				trial, r.Objective, want, r.Status, p, r.Rounds)
		}
		if r.Status != market.Optimal && r.Status != market.Relaxed {
			t.Fatalf("trial %d: status %v with Gap = 0", trial, r.Status)
		}
		if r.Bound < want-tol {
			t.Fatalf("trial %d: bound %v below the optimum %v", trial, r.Bound, want)
		}
		counts[r.Status.String()]++
		if r.Stats.Branches > 0 {
			counts["branched"]++
		}
	}
	t.Logf("outcomes: %v", counts)
	if counts["Relaxed"] == 0 || counts["Optimal"] == 0 || counts["branched"] == 0 {
		t.Fatalf("the instances do not cover feasible, infeasible and branching cases: %v", counts)
	}
}

// TestSolve_GangCounterExample is the counter-example to a bound that only
// counts GPU-rounds: G = 3, T = 2 and two
// 2-GPU jobs that want 2 and 1 rounds. Σ w·n = 6 = G·T, yet no round holds
// both, so only 2 of the 3 job-rounds fit, and the bound must know it.
func TestSolve_GangCounterExample(t *testing.T) {
	job := func(id string, epochs float64) market.Job {
		// One epoch takes exactly one round; the FTF target is loose.
		return market.Job{ID: id, Workers: 2, Epochs: epochs, EpochSeconds: 120,
			Remaining: 120 * epochs, FairFinish: 1e6}
	}
	p := market.Problem{GPUs: 3, Rounds: 2, Jobs: []market.Job{job("a", 2), job("b", 1)}}
	s := market.DefaultSettings()
	s.Gap = 0
	r, err := market.Solve(p, s)
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, p, s, r)
	if got := r.Rounds[0] + r.Rounds[1]; got != 2 {
		t.Fatalf("rounds %v: %d job-rounds, only 2 fit", r.Rounds, got)
	}
	want, _ := bruteForce(p, s)
	if r.Status != market.Optimal || !close(r.Objective, want, 1e-12) || !close(r.Bound, want, 1e-12) {
		t.Fatalf("status %v objective %v bound %v, want optimal %v", r.Status, r.Objective, r.Bound, want)
	}
	// The packing-blind knapsack would give both jobs their rounds.
	blind := evaluate(p, s, []int{2, 1}, ones(2)).objective
	if r.Bound >= blind {
		t.Fatalf("bound %v does not account for packing (the unpackable allocation scores %v)", r.Bound, blind)
	}
}
