package market_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/shockwave-sched/shockwave/market"
)

// This file holds an independent, deliberately plain statement of the
// per-solve problem of spec §4.5 (objective, FTF test, priorities) used by
// the reference solver and by the result checks. It shares no code with the
// package.

func defaults(p market.Problem) (T int, delta float64) {
	T, delta = p.Rounds, p.RoundSeconds
	if T == 0 {
		T = 20
	}
	if delta == 0 {
		delta = 120
	}
	return T, delta
}

func settingsOf(s *market.Settings) *market.Settings {
	if s == nil {
		return market.DefaultSettings()
	}
	return s
}

// pwlLog is the spec's log approximation: linear interpolation through
// (B_j, ln B_j), with ln 0 replaced by ln origin; or the clamped exact log.
func pwlLog(s *market.Settings, u float64) float64 {
	origin := s.Origin
	if origin == 0 {
		origin = 1e-6
	}
	if u > 1 {
		u = 1
	}
	if s.ExactLog {
		return math.Log(math.Max(u, origin))
	}
	b := s.Breakpoints
	if len(b) == 0 {
		b = market.DefaultBreakpoints
	}
	lg := func(x float64) float64 { return math.Log(math.Max(x, origin)) }
	for j := 0; j+1 < len(b); j++ {
		if u >= b[j] && u <= b[j+1] {
			t := (u - b[j]) / (b[j+1] - b[j])
			return (1-t)*lg(b[j]) + t*lg(b[j+1])
		}
	}
	panic(fmt.Sprintf("u = %v outside the breakpoints", u))
}

// evaluation is everything §4.5 says about one vector of round counts.
type evaluation struct {
	objective    float64 // with the given priorities
	maxRemaining float64
	ftfOK        bool
}

func shareOf(p market.Problem) float64 {
	s := float64(p.GPUs) / float64(len(p.Jobs))
	return math.Min(1, s)
}

func evaluate(p market.Problem, s *market.Settings, n []int, prio []float64) evaluation {
	T, delta := defaults(p)
	share := shareOf(p)
	var ev evaluation
	ev.ftfOK = true
	sum := 0.0
	for i, j := range p.Jobs {
		prog := math.Min(delta*float64(n[i])/j.EpochSeconds, j.Epochs-j.Progress)
		sum += prio[i] * pwlLog(s, (j.Progress+prog)/j.Epochs)
		r := math.Max(0, j.Remaining-j.EpochSeconds*prog)
		ev.maxRemaining = math.Max(ev.maxRemaining, r)
		lhs := delta*float64(p.Round+T) + r/share
		rhs := s.RhoMax * j.FairFinish
		if lhs > rhs+1e-9*math.Max(1, math.Abs(rhs)) {
			ev.ftfOK = false
		}
	}
	ev.objective = sum/float64(len(p.Jobs)*T) - s.K*ev.maxRemaining
	return ev
}

// priorities is step 2 of the relaxation (§4.5).
func priorities(p market.Problem, s *market.Settings) []float64 {
	_, delta := defaults(p)
	share := shareOf(p)
	pi := make([]float64, len(p.Jobs))
	for i, j := range p.Jobs {
		rho := (delta*float64(p.Round) + j.Remaining/share) / j.FairFinish
		pi[i] = 1
		if rho > s.RhoMax {
			if j.Remaining >= delta {
				pi[i] = math.Pow(rho, s.Lambda)
			} else {
				pi[i] = math.Pow(rho, 100)
			}
		}
		pi[i] = math.Min(pi[i], 1e200)
	}
	return pi
}

func ones(n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = 1
	}
	return v
}

// checkResult verifies the claims a Result makes about itself.
func checkResult(t *testing.T, p market.Problem, s *market.Settings, r *market.Result) {
	t.Helper()
	s = settingsOf(s)
	T, _ := defaults(p)
	if len(r.Schedule) != T || len(r.Rounds) != len(p.Jobs) {
		t.Fatalf("shape: %d rounds, %d counts", len(r.Schedule), len(r.Rounds))
	}
	count := make([]int, len(p.Jobs))
	for t0, jobs := range r.Schedule {
		used := 0
		seen := map[int]bool{}
		for _, i := range jobs {
			if seen[i] {
				t.Fatalf("round %d lists job %d twice", t0, i)
			}
			seen[i] = true
			used += p.Jobs[i].Workers
			count[i]++
		}
		if used > p.GPUs {
			t.Fatalf("round %d uses %d GPUs of %d: %v", t0, used, p.GPUs, jobs)
		}
	}
	for i := range count {
		if count[i] != r.Rounds[i] {
			t.Fatalf("job %d: schedule has %d rounds, Rounds says %d", i, count[i], r.Rounds[i])
		}
	}
	prio := ones(len(p.Jobs))
	if r.Relaxed {
		prio = priorities(p, s)
	}
	ev := evaluate(p, s, r.Rounds, prio)
	if !r.Relaxed && !ev.ftfOK {
		t.Fatalf("not relaxed but FTF violated: %v", r.Rounds)
	}
	if !close(ev.objective, r.Objective, 1e-9) {
		t.Fatalf("Objective %v, recomputed %v", r.Objective, ev.objective)
	}
	if r.Bound < r.Objective || r.Gap < 0 {
		t.Fatalf("Bound %v < Objective %v (gap %v)", r.Bound, r.Objective, r.Gap)
	}
}

func close(a, b, tol float64) bool {
	return math.Abs(a-b) <= tol*math.Max(1, math.Max(math.Abs(a), math.Abs(b)))
}

// randomJob draws a job whose FTF target is near its projected finish, so
// that FTF sets are sometimes feasible and sometimes not.
func randomJob(rng *rand.Rand, id string, maxWidth, round, rounds, n, gpus int) market.Job {
	epochs := float64(1 + rng.IntN(30))
	progress := 0.0
	if rng.IntN(3) > 0 {
		progress = float64(rng.IntN(int(epochs) + 1))
	}
	d := 20 + 400*rng.Float64()
	remaining := d * (epochs - progress) * (0.7 + 0.6*rng.Float64())
	if rng.IntN(8) == 0 {
		remaining = 120 * rng.Float64()
	}
	share := math.Min(1, float64(gpus)/float64(n))
	finish := (120*float64(round+rounds) + remaining/share) * (0.6 + 1.2*rng.Float64())
	return market.Job{
		ID: id, Workers: 1 + rng.IntN(maxWidth), Epochs: epochs, Progress: progress,
		EpochSeconds: d, Remaining: remaining, FairFinish: math.Max(finish, 1),
	}
}

func randomSettings(rng *rand.Rand) *market.Settings {
	s := market.DefaultSettings()
	s.K = []float64{0, 1e-3, 0.1, 10}[rng.IntN(4)]
	s.Lambda = []float64{0, 5, 12}[rng.IntN(3)]
	s.ExactLog = rng.IntN(5) == 0
	s.Gap = 0
	return s
}

// termScale is the magnitude of the objective's terms (at least 1): the
// sum of |π_i·ln origin|/(N·T) and k·max R̂.
func termScale(p market.Problem, s *market.Settings, relaxed bool) float64 {
	T, _ := defaults(p)
	prio := ones(len(p.Jobs))
	if relaxed {
		prio = priorities(p, s)
	}
	sum, rmax := 0.0, 0.0
	for i, j := range p.Jobs {
		sum += prio[i] * math.Abs(math.Log(1e-6)) / float64(len(p.Jobs)*T)
		rmax = math.Max(rmax, j.Remaining)
	}
	return math.Max(1, sum+s.K*rmax)
}

// largeProblem draws a cluster-sized instance: gang widths 1, 2, 4, 8
// (mostly 1, as in the traces), tens of epochs, and FTF targets around the
// projected finish (tight enough that some sets are infeasible).
func largeProblem(rng *rand.Rand, n, gpus int) market.Problem {
	p := market.Problem{GPUs: gpus, Round: 50 + rng.IntN(200)}
	share := math.Min(1, float64(gpus)/float64(n))
	for i := 0; i < n; i++ {
		w := []int{1, 1, 1, 1, 1, 2, 2, 4, 8}[rng.IntN(9)]
		epochs := float64(5 + rng.IntN(150))
		progress := float64(rng.IntN(int(epochs)))
		d := 30 + 600*rng.Float64()
		remaining := d * (epochs - progress) * (0.8 + 0.4*rng.Float64())
		finish := (120*float64(p.Round+20) + remaining/share) * (0.9 + 1.5*rng.Float64())
		p.Jobs = append(p.Jobs, market.Job{ID: fmt.Sprintf("job-%04d", i), Workers: w, Epochs: epochs,
			Progress: progress, EpochSeconds: d, Remaining: remaining, FairFinish: finish})
	}
	return p
}
