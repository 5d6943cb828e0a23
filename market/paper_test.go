package market_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/shockwave-sched/shockwave/market"
)

// Each test checks one named claim of the spec (§4.5, §4.10) or of the
// solver's design (doc.go).

// §4.10: "The z binaries are redundant. The points (B_j, L_j) are concave:
// the slopes 61.0, 3.47, 2.03, 1.44, 1.12 decrease ... So the LP over λ
// alone already yields the piecewise-linear interpolation of ln."
func TestPaper_PWLConcaveSoZBinariesRedundant(t *testing.T) {
	b := market.DefaultBreakpoints
	l := make([]float64, len(b))
	for j := range b {
		l[j] = math.Log(math.Max(b[j], 1e-6))
	}
	want := []float64{61.0, 3.47, 2.03, 1.44, 1.12}
	for j := 0; j+1 < len(b); j++ {
		slope := (l[j+1] - l[j]) / (b[j+1] - b[j])
		if math.Abs(slope-want[j]) > 0.01*want[j] {
			t.Errorf("slope %d = %.3f, spec says %.2f", j, slope, want[j])
		}
		if j > 0 && slope >= (l[j]-l[j-1])/(b[j]-b[j-1]) {
			t.Errorf("slopes do not decrease at %d", j)
		}
	}
	// The LP max Σ λ_j L_j s.t. Σ λ_j B_j = u, Σ λ_j = 1, λ ≥ 0 has a basic
	// optimum with at most two nonzero λ; enumerate every pair (no SOS2
	// adjacency) and compare with the adjacent interpolation.
	s := market.DefaultSettings()
	rng := rand.New(rand.NewPCG(1, 1))
	for trial := 0; trial < 1000; trial++ {
		u := rng.Float64()
		lp := math.Inf(-1)
		for j := range b {
			for k := j; k < len(b); k++ {
				if b[j] <= u && u <= b[k] {
					v := l[j]
					if k > j {
						f := (u - b[j]) / (b[k] - b[j])
						v = (1-f)*l[j] + f*l[k]
					}
					lp = math.Max(lp, v)
				}
			}
		}
		if got := pwlLog(s, u); math.Abs(lp-got) > 1e-12 {
			t.Fatalf("u = %v: LP over λ gives %v, SOS2 interpolation %v", u, lp, got)
		}
	}
}

// §4.5: p_i should be as large as n_i allows. The objective
// and the FTF constraint are monotone in p_i, so p_i = min(Δ n_i/d_i, E_i − c_i).
func TestPaper_ObjectiveMonotoneInProgress(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	s := market.DefaultSettings()
	for trial := 0; trial < 2000; trial++ {
		j := randomJob(rng, "x", 1, 10, 20, 4, 8)
		pmax := j.Epochs - j.Progress
		p1 := rng.Float64() * pmax
		p2 := p1 + rng.Float64()*(pmax-p1)
		u := func(p float64) float64 { return pwlLog(s, (j.Progress+p)/j.Epochs) }
		r := func(p float64) float64 { return math.Max(0, j.Remaining-j.EpochSeconds*p) }
		if u(p2) < u(p1)-1e-12 || r(p2) > r(p1)+1e-9 {
			t.Fatalf("not monotone: p %v→%v gives log %v→%v, remaining %v→%v", p1, p2, u(p1), u(p2), r(p1), r(p2))
		}
	}
}

// §4.5 relaxation steps 1–2: π_i = ρ̃^λ (R̂ ≥ Δ) or ρ̃^100 (R̂ < Δ) above
// ρmax, else 1, with ρ̃ = (Δ·R + R̂/s)/F; overflow clamped (Go has no
// Python OverflowError).
func TestPaper_RelaxationPriorities(t *testing.T) {
	p := market.Problem{GPUs: 1, Round: 50, Rounds: 4, Jobs: []market.Job{
		{ID: "behind", Workers: 1, Epochs: 10, EpochSeconds: 100, Remaining: 1000, FairFinish: 3000},
		{ID: "nearly-done", Workers: 1, Epochs: 10, Progress: 9.5, EpochSeconds: 100, Remaining: 50, FairFinish: 5000},
		{ID: "way-behind", Workers: 1, Epochs: 10, EpochSeconds: 100, Remaining: 1e6, FairFinish: 1000},
		{ID: "ahead", Workers: 1, Epochs: 10, EpochSeconds: 100, Remaining: 1000, FairFinish: 1e9},
	}}
	s := market.DefaultSettings()
	r, err := market.Solve(p, s)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Relaxed {
		t.Fatalf("4 jobs on 1 GPU cannot all meet their targets")
	}
	if r.Rho[1] <= 1 || r.Rho[2] <= 1 || r.Rho[3] >= 1 {
		t.Fatalf("ρ̃ = %v: the cases are not covered", r.Rho)
	}
	share := 0.25
	for i, j := range p.Jobs {
		rho := (120*50 + j.Remaining/share) / j.FairFinish
		if math.Abs(r.Rho[i]-rho) > 1e-12*rho {
			t.Errorf("%s: ρ̃ = %v, want %v", j.ID, r.Rho[i], rho)
		}
	}
	want := []float64{
		math.Pow(r.Rho[0], 12),  // ρ̃ > 1, R̂ ≥ Δ
		math.Pow(r.Rho[1], 100), // ρ̃ > 1, R̂ < Δ
		math.Pow(r.Rho[2], 12),  // ρ̃ ≈ 4006
		1,                       // ρ̃ ≤ ρmax
	}
	for i := range want {
		if math.Abs(r.Priorities[i]-want[i]) > 1e-9*want[i] {
			t.Errorf("%s: π = %v, want %v", p.Jobs[i].ID, r.Priorities[i], want[i])
		}
	}
}

// §4.5 objective, second term: with a large k the makespan proxy decides,
// so the job with the most remaining time runs in every round.
func TestPaper_MakespanPenaltyServesLongestJob(t *testing.T) {
	p := market.Problem{GPUs: 2, Rounds: 10, Jobs: []market.Job{
		{ID: "long", Workers: 1, Epochs: 100, EpochSeconds: 300, Remaining: 30000, FairFinish: 1e9},
		{ID: "a", Workers: 1, Epochs: 100, EpochSeconds: 60, Remaining: 6000, FairFinish: 1e9},
		{ID: "b", Workers: 1, Epochs: 100, EpochSeconds: 60, Remaining: 6000, FairFinish: 1e9},
	}}
	s := market.DefaultSettings()
	s.K = 1e5
	r, err := market.Solve(p, s)
	if err != nil {
		t.Fatal(err)
	}
	if r.Rounds[0] != 10 {
		t.Fatalf("rounds %v: the longest job should run in all 10", r.Rounds)
	}
	s.K = 0 // without the penalty the shorter jobs' larger log gains win
	r, _ = market.Solve(p, s)
	if r.Rounds[0] != 0 {
		t.Fatalf("rounds %v: with k = 0 the welfare prefers the shorter jobs", r.Rounds)
	}
}

// §4.5 objective, first term: the Nash social welfare (sum of logs) splits
// a contended GPU evenly between equal jobs.
func TestPaper_NashWelfareSplitsEvenly(t *testing.T) {
	job := market.Job{Workers: 1, Epochs: 1000, EpochSeconds: 100, Remaining: 1e5, FairFinish: 1e9}
	p := market.Problem{GPUs: 1, Rounds: 20}
	for _, id := range []string{"x", "y"} {
		job.ID = id
		p.Jobs = append(p.Jobs, job)
	}
	s := market.DefaultSettings()
	s.K = 0
	r, err := market.Solve(p, s)
	if err != nil {
		t.Fatal(err)
	}
	if r.Rounds[0] != 10 || r.Rounds[1] != 10 {
		t.Fatalf("rounds %v, want 10 and 10", r.Rounds)
	}
}

// §4.5 FTF constraint: Δ·(R+T) + max(0, R̂ − d·p)/s ≤ ρmax·F forces enough
// rounds for a job even when the welfare would rather serve others.
func TestPaper_FTFConstraintForcesRounds(t *testing.T) {
	// 'tight' must cut 1200 s of its 2400 s remaining: 10 rounds at Δ = 120.
	p := market.Problem{GPUs: 1, Rounds: 20, Jobs: []market.Job{
		{ID: "tight", Workers: 1, Epochs: 20, Progress: 19, EpochSeconds: 2400, Remaining: 2400, FairFinish: 20*120 + 1200},
		{ID: "fresh", Workers: 1, Epochs: 10, EpochSeconds: 120, Remaining: 1200, FairFinish: 1e9},
	}}
	s := market.DefaultSettings()
	s.K = 0
	r, err := market.Solve(p, s)
	if err != nil {
		t.Fatal(err)
	}
	if r.Relaxed || r.Rounds[0] < 10 {
		t.Fatalf("rounds %v relaxed %v: FTF needs 10 rounds for 'tight'", r.Rounds, r.Relaxed)
	}
	p.Jobs[0].FairFinish = 1e9 // without the constraint the fresh job takes more
	r2, _ := market.Solve(p, s)
	if r2.Rounds[0] >= r.Rounds[0] {
		t.Fatalf("rounds %v vs %v: the constraint should have been binding", r2.Rounds, r.Rounds)
	}
}

// The clamp: ρ̃^100 overflows float64 for ρ̃ > ~1200 (Python raises); the
// Go port clamps π instead of failing.
func TestPaper_PriorityOverflowIsClamped(t *testing.T) {
	p := market.Problem{GPUs: 1, Round: 1000, Rounds: 2, Jobs: []market.Job{
		{ID: "doomed", Workers: 1, Epochs: 1, Progress: 0.9, EpochSeconds: 100, Remaining: 10, FairFinish: 1},
		{ID: "other", Workers: 1, Epochs: 1, EpochSeconds: 100, Remaining: 100, FairFinish: 1e9},
	}}
	r, err := market.Solve(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Relaxed || r.Priorities[0] != 1e200 || math.IsInf(r.Objective, 0) || math.IsNaN(r.Objective) {
		t.Fatalf("relaxed %v π %v objective %v", r.Relaxed, r.Priorities, r.Objective)
	}
}
