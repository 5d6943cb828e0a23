package market_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/shockwave-sched/shockwave/market"
)

// localSearch explores feasible x by random add / remove / move / swap
// moves from a start placement, accepting moves that do not lower the
// objective (and, when FTF applies, keep it met), with random restarts from
// the start. It returns the best objective seen.
func localSearch(rng *rand.Rand, p market.Problem, s *market.Settings, prio []float64, ftf bool, start [][]int, steps int) float64 {
	T, _ := defaults(p)
	N := len(p.Jobs)
	on := make([][]bool, N)
	free := make([]int, T)
	n := make([]int, N)
	reset := func() {
		for i := range on {
			on[i] = make([]bool, T)
			n[i] = 0
		}
		for t := range free {
			free[t] = p.GPUs
			for _, i := range start[t] {
				on[i][t] = true
				n[i]++
				free[t] -= p.Jobs[i].Workers
			}
		}
	}
	reset()
	score := func() (float64, bool) {
		ev := evaluate(p, s, n, prio)
		return ev.objective, !ftf || ev.ftfOK
	}
	cur, _ := score()
	best := cur
	set := func(i, t int, v bool) {
		if on[i][t] != v {
			on[i][t] = v
			if v {
				n[i]++
				free[t] -= p.Jobs[i].Workers
			} else {
				n[i]--
				free[t] += p.Jobs[i].Workers
			}
		}
	}
	for step := 0; step < steps; step++ {
		if step%(steps/8) == 0 {
			reset()
			cur, _ = score()
		}
		i, t, u := rng.IntN(N), rng.IntN(T), rng.IntN(T)
		j := rng.IntN(N)
		type change struct {
			i, t int
			v    bool
		}
		var ch []change
		switch rng.IntN(4) {
		case 0: // toggle
			ch = []change{{i, t, !on[i][t]}}
		case 1: // move i from t to u
			if on[i][t] && !on[i][u] {
				ch = []change{{i, t, false}, {i, u, true}}
			}
		case 2: // swap i and j in round t
			if on[i][t] && !on[j][t] {
				ch = []change{{i, t, false}, {j, t, true}}
			}
		case 3: // exchange rounds: i from t to u, j from u to t
			if i != j && on[i][t] && !on[i][u] && on[j][u] && !on[j][t] {
				ch = []change{{i, t, false}, {i, u, true}, {j, u, false}, {j, t, true}}
			}
		}
		if len(ch) == 0 {
			continue
		}
		for _, c := range ch {
			set(c.i, c.t, c.v)
		}
		fits := true
		for _, f := range free {
			fits = fits && f >= 0
		}
		v, ok := score()
		if fits && ok {
			best = math.Max(best, v)
		}
		if !fits || !ok || v < cur-1e-15 && rng.IntN(20) != 0 {
			for k := len(ch) - 1; k >= 0; k-- {
				set(ch[k].i, ch[k].t, !ch[k].v)
			}
			continue
		}
		cur = v
	}
	return best
}

// TestSolve_BoundDominatesLocalSearch checks the certificate on instances
// too large for brute force: no feasible x that local search finds scores
// above Result.Bound, and the gap is within the tolerance.
func TestSolve_BoundDominatesLocalSearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	limits := 0
	for trial := 0; trial < 40; trial++ {
		var p market.Problem
		if trial%2 == 0 {
			p = largeProblem(rng, 10+rng.IntN(40), []int{8, 16, 32}[rng.IntN(3)])
			p.Rounds = []int{5, 10, 20}[rng.IntN(3)]
		} else {
			p = mediumProblem(rng)
		}
		if trial%4 == 1 { // loosen FTF so that unrelaxed solves occur too
			for i := range p.Jobs {
				p.Jobs[i].FairFinish *= 4
			}
		}
		s := market.DefaultSettings()
		s.K = []float64{0, 1e-3, 1}[trial%3]
		r, err := market.Solve(p, s)
		if err != nil {
			t.Fatal(err)
		}
		checkResult(t, p, s, r)
		prio := ones(len(p.Jobs))
		if r.Relaxed {
			prio = priorities(p, s)
		}
		found := localSearch(rng, p, s, prio, !r.Relaxed, r.Schedule, 20000)
		tol := 1e-12 * termScale(p, s, r.Relaxed)
		if found > r.Bound+tol {
			t.Fatalf("trial %d: local search found %.15g above the bound %.15g (objective %.15g)", trial, found, r.Bound, r.Objective)
		}
		if r.Status != market.Limit && r.Gap > s.Gap {
			t.Fatalf("trial %d: status %v with gap %v > %v", trial, r.Status, r.Gap, s.Gap)
		}
		if r.Status == market.Limit {
			limits++
			t.Logf("trial %d: node budget exhausted (gap %.3g, G=%d, N=%d) %+v", trial, r.Gap, p.GPUs, len(p.Jobs), r.Stats)
		}
	}
	if limits > 2 {
		t.Fatalf("%d of 40 solves exhausted the node budget", limits)
	}
}
