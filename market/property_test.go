package market_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/shockwave-sched/shockwave/market"
)

// mediumProblem draws an instance between the tiny and the cluster sizes,
// with wide gangs relative to G so that packing matters.
func mediumProblem(rng *rand.Rand) market.Problem {
	G := []int{4, 6, 8, 12, 16, 32}[rng.IntN(6)]
	N := 2 + rng.IntN(30)
	T := []int{3, 5, 10, 20}[rng.IntN(4)]
	p := market.Problem{GPUs: G, Round: rng.IntN(100), Rounds: T}
	for i := 0; i < N; i++ {
		j := randomJob(rng, fmt.Sprintf("m%02d", i), G, p.Round, T, N, G)
		j.Workers = []int{1, 1, 2, 4, 8}[rng.IntN(5)]
		if j.Workers > G {
			j.Workers = 1
		}
		p.Jobs = append(p.Jobs, j)
	}
	return p
}

func TestSolve_NeverExceedsCapacity(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	limits := 0
	for trial := 0; trial < 150; trial++ {
		p := mediumProblem(rng)
		s := randomSettings(rng)
		s.Gap = 1e-3
		r, err := market.Solve(p, s)
		if err != nil {
			t.Fatal(err)
		}
		checkResult(t, p, s, r) // capacity per round, counts, FTF, objective
		if r.Status == market.Limit {
			limits++
			t.Logf("trial %d: node budget exhausted with gap %.3g (G=%d, N=%d)", trial, r.Gap, p.GPUs, len(p.Jobs))
		}
	}
	// Small clusters with gangs as wide as half the cluster are the hard
	// case for the bound; the certificate stays honest (Status Limit).
	if limits > 3 {
		t.Fatalf("%d of 150 solves exhausted the node budget", limits)
	}
}

// perJob maps job IDs to (rounds, the set of rounds it runs in).
func perJob(p market.Problem, r *market.Result) map[string]string {
	out := map[string]string{}
	for i, j := range p.Jobs {
		var in []int
		for t, jobs := range r.Schedule {
			if slices.Contains(jobs, i) {
				in = append(in, t)
			}
		}
		out[j.ID] = fmt.Sprintf("n=%d p=%.12g rounds=%v", r.Rounds[i], r.Progress[i], in)
	}
	return out
}

func TestSolve_PermutingJobsChangesNoAllocation(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for trial := 0; trial < 60; trial++ {
		p := mediumProblem(rng)
		if trial%3 == 0 {
			p = largeProblem(rng, 40+rng.IntN(60), 32)
		}
		s := market.DefaultSettings()
		r1, err := market.Solve(p, s)
		if err != nil {
			t.Fatal(err)
		}
		q := p
		q.Jobs = slices.Clone(p.Jobs)
		rng.Shuffle(len(q.Jobs), func(i, j int) { q.Jobs[i], q.Jobs[j] = q.Jobs[j], q.Jobs[i] })
		r2, err := market.Solve(q, s)
		if err != nil {
			t.Fatal(err)
		}
		if a, b := perJob(p, r1), perJob(q, r2); !reflect.DeepEqual(a, b) {
			t.Fatalf("trial %d: allocation depends on job order:\n%v\n%v", trial, a, b)
		}
		if r1.Objective != r2.Objective || r1.Status != r2.Status {
			t.Fatalf("trial %d: objective %v/%v status %v/%v", trial, r1.Objective, r2.Objective, r1.Status, r2.Status)
		}
	}
}

func TestSolve_IdenticalJobsGetEqualShares(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for trial := 0; trial < 100; trial++ {
		G := 4 + rng.IntN(28)
		base := randomJob(rng, "", 1+rng.IntN(2), 10, 20, 12, G)
		base.Epochs, base.Progress = 200, float64(rng.IntN(100)) // nobody finishes in the window
		p := market.Problem{GPUs: G, Round: 10}
		copies := 2 + rng.IntN(8)
		for i := 0; i < copies; i++ {
			j := base
			j.ID = fmt.Sprintf("twin%d", i)
			p.Jobs = append(p.Jobs, j)
		}
		for i := 0; i < rng.IntN(5); i++ {
			p.Jobs = append(p.Jobs, randomJob(rng, fmt.Sprintf("other%d", i), 1+rng.IntN(2), 10, 20, 12, G))
		}
		r, err := market.Solve(p, market.DefaultSettings())
		if err != nil {
			t.Fatal(err)
		}
		lo, hi := slices.Min(r.Rounds[:copies]), slices.Max(r.Rounds[:copies])
		if hi-lo > 1 {
			t.Fatalf("trial %d: identical jobs got %v rounds", trial, r.Rounds[:copies])
		}
	}
}

func TestSolve_InfeasibleFTFIsRelaxedNotAnError(t *testing.T) {
	p := market.Problem{GPUs: 2, Round: 100, Jobs: []market.Job{
		// Target already missed: Δ·(R+T) alone exceeds ρmax·F.
		{ID: "late", Workers: 1, Epochs: 10, Progress: 2, EpochSeconds: 300, Remaining: 2400, FairFinish: 1000},
		{ID: "fine", Workers: 1, Epochs: 10, Progress: 2, EpochSeconds: 300, Remaining: 2400, FairFinish: 1e7},
	}}
	r, err := market.Solve(p, nil)
	if err != nil {
		t.Fatalf("infeasible FTF must not be an error: %v", err)
	}
	if !r.Relaxed || r.Status != market.Relaxed {
		t.Fatalf("status %v relaxed %v, want Relaxed", r.Status, r.Relaxed)
	}
	if r.Priorities[0] <= 1 || r.Priorities[1] != 1 {
		t.Fatalf("priorities %v: the late job must outrank", r.Priorities)
	}
	checkResult(t, p, nil, r)
}

func TestSolve_RejectsMalformedInput(t *testing.T) {
	good := market.Job{ID: "a", Workers: 1, Epochs: 10, EpochSeconds: 60, Remaining: 600, FairFinish: 1e4}
	cases := map[string]func(*market.Problem, *market.Settings){
		"negative workers": func(p *market.Problem, _ *market.Settings) { p.Jobs[0].Workers = -1 },
		"zero workers":     func(p *market.Problem, _ *market.Settings) { p.Jobs[0].Workers = 0 },
		"wider than G":     func(p *market.Problem, _ *market.Settings) { p.Jobs[0].Workers = 9 },
		"NaN epochs":       func(p *market.Problem, _ *market.Settings) { p.Jobs[0].Epochs = math.NaN() },
		"progress > E":     func(p *market.Problem, _ *market.Settings) { p.Jobs[0].Progress = 11 },
		"Inf remaining":    func(p *market.Problem, _ *market.Settings) { p.Jobs[0].Remaining = math.Inf(1) },
		"zero fair finish": func(p *market.Problem, _ *market.Settings) { p.Jobs[0].FairFinish = 0 },
		"no GPUs":          func(p *market.Problem, _ *market.Settings) { p.GPUs = 0 },
		"negative rounds":  func(p *market.Problem, _ *market.Settings) { p.Rounds = -1 },
		"NaN k":            func(_ *market.Problem, s *market.Settings) { s.K = math.NaN() },
		"rho max 0":        func(_ *market.Problem, s *market.Settings) { s.RhoMax = 0 },
		"bad breakpoints":  func(_ *market.Problem, s *market.Settings) { s.Breakpoints = []float64{0, 0.5, 0.4, 1} },
		"negative gap":     func(_ *market.Problem, s *market.Settings) { s.Gap = -1 },
	}
	for name, mutate := range cases {
		p := market.Problem{GPUs: 8, Jobs: []market.Job{good}}
		s := market.DefaultSettings()
		mutate(&p, s)
		_, err := market.Solve(p, s)
		if !errors.Is(err, market.ErrInvalid) || !strings.HasPrefix(err.Error(), "market: ") {
			t.Errorf("%s: error %v, want one wrapping ErrInvalid", name, err)
		}
	}
	if _, err := market.Solve(market.Problem{GPUs: 8, Jobs: []market.Job{good}}, nil); err != nil {
		t.Fatalf("the unmodified problem is valid: %v", err)
	}
}

func TestSolve_EmptyProblem(t *testing.T) {
	r, err := market.Solve(market.Problem{GPUs: 4}, nil)
	if err != nil || r.Status != market.Optimal || len(r.Schedule) != market.DefaultRounds {
		t.Fatalf("got %+v, %v", r, err)
	}
}

func TestSolve_IsDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	p := largeProblem(rng, 120, 64)
	a, _ := market.Solve(p, nil)
	b, _ := market.Solve(p, nil)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("two solves of one problem differ")
	}
}

// TestSolve_MostUrgentRunsFirst checks the documented tie-break for the
// current round: among jobs that run in the window, the one with the
// largest π·ρ̃/n (the re-rank weight per planned round times ρ̃) is in
// round 0.
func TestSolve_MostUrgentRunsFirst(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	s := market.DefaultSettings()
	for trial := 0; trial < 100; trial++ {
		p := mediumProblem(rng)
		r, err := market.Solve(p, s)
		if err != nil {
			t.Fatal(err)
		}
		pi := priorities(p, s)
		key := func(i int) float64 { return pi[i] * r.Rho[i] / float64(max(r.Rounds[i], 1)) }
		ahead := func(i, j int) bool { // i ranks before j
			switch {
			case key(i) != key(j):
				return key(i) > key(j)
			case pi[i] != pi[j]:
				return pi[i] > pi[j]
			case r.Rho[i] != r.Rho[j]:
				return r.Rho[i] > r.Rho[j]
			case r.Rounds[i] != r.Rounds[j]:
				return r.Rounds[i] > r.Rounds[j]
			}
			return p.Jobs[i].ID < p.Jobs[j].ID
		}
		best := -1
		for i := range p.Jobs {
			if r.Rounds[i] > 0 && (best < 0 || ahead(i, best)) {
				best = i
			}
		}
		if best >= 0 && !slices.Contains(r.Schedule[0], best) {
			t.Fatalf("trial %d: top-ranked job %d (ρ̃ %.3g, π %.3g) not in round 0: %v",
				trial, best, r.Rho[best], pi[best], r.Schedule[0])
		}
	}
}
