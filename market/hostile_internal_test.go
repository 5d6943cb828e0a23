package market

import (
	"fmt"
	"testing"
)

// hostileProblem is an oversubscribed round (8 GPUs, 15 jobs): ten short
// jobs, four honest long ones and job "x", the twin of the honest long job
// "h" (same width, epochs, progress, service so far), which reports an
// epoch time `slow` times longer than the pace it shows. Every input is
// derived as the policy derives it: R̂ and its P90 from the reported epoch
// time, F = now + (done + R̂)/share, and with capped the pace cap from the
// rounds it ran (20 rounds for its 10 epochs).
func hostileProblem(slow float64, capped bool) Problem {
	const G, R, T, delta = 8, 50, 20, 120.0
	p := Problem{GPUs: G, Round: R, Rounds: T, RoundSeconds: delta}
	share := float64(G) / 16
	add := func(id string, epochs, progress, d, done float64, ran int) {
		rem := d * (epochs - progress)
		j := Job{ID: id, Workers: 1, Epochs: epochs, Progress: progress, EpochSeconds: d,
			Remaining: rem, RemainingHigh: 1.2 * rem, FairFinish: delta*R + (done+rem)/share}
		if capped {
			j.RemainingCap = (epochs - progress) * float64(ran) * delta / progress
		}
		p.Jobs = append(p.Jobs, j)
	}
	for i := range 10 {
		add(fmt.Sprintf("s%d", i), 20, float64(2+i%5), 200+10*float64(i), 600, 5)
	}
	for i := range 4 {
		add(fmt.Sprintf("l%d", i), 100, float64(5+3*i), 230+5*float64(i), 2400, 20)
	}
	add("h", 100, 10, 240, 2400, 20)
	add("x", 100, 10, 240*slow, 2400, 20)
	return p
}

// critical returns τ and every job's critical bound, by ID.
func critical(p Problem) (float64, map[string]int) {
	s := DefaultSettings()
	s.Fairness = FairnessTightest
	in := newInstance(&p, s)
	weights := make([]float64, len(in.jobs))
	for c := range weights {
		weights[c] = 1 / float64(len(in.jobs)*in.T)
	}
	m := newModel(in, weights, false)
	in.critBounds()
	out := make(map[string]int, len(in.jobs))
	for c := range in.jobs {
		out[in.jobs[c].ID] = in.critLow(&in.jobs[c], &m.jobs[c])
	}
	return in.critAt, out
}

// TestCritBounds_HostileSlowReportChangesNoBound: a job that reports a
// 100× slower throughput than its progress shows gets the critical bound
// of its honest twin, and τ and every other job's bound are those of the
// round in which it is honest (they come from the pace the coordinator
// observed, scaled with the job's band). Without the pace cap the claim
// works: the job becomes the longest, its bound is every round of the
// window, and τ rises so that no honest job keeps a bound.
func TestCritBounds_HostileSlowReportChangesNoBound(t *testing.T) {
	tauHonest, honest := critical(hostileProblem(1, true))
	tau, hostile := critical(hostileProblem(100, true))
	t.Logf("honest τ %.0f %v; hostile τ %.0f %v", tauHonest, honest, tau, hostile)
	if tau != tauHonest {
		t.Errorf("τ %.0f beside the hostile job, %.0f beside an honest one", tau, tauHonest)
	}
	for id, n := range honest {
		if hostile[id] != n {
			t.Errorf("job %s: critical bound %d beside the hostile job, %d beside an honest one", id, hostile[id], n)
		}
	}
	if hostile["x"] > hostile["h"] {
		t.Errorf("hostile job's bound %d above its honest twin's %d", hostile["x"], hostile["h"])
	}
	tauOpen, open := critical(hostileProblem(100, false))
	t.Logf("no cap: τ %.0f %v", tauOpen, open)
	kept := 0
	for id, n := range open {
		if id != "x" && n > 0 {
			kept++
		}
	}
	if open["x"] != 20 || kept > 0 || honest["h"] == 0 {
		t.Errorf("without the cap: hostile bound %d, %d honest jobs kept a bound (twin's honest bound %d): the test shows no attack",
			open["x"], kept, honest["h"])
	}
}

// TestSolve_HostileSlowReportGetsNoMoreRoundsThanItsTwin: in the solve,
// the hostile job of hostileProblem gets no more rounds than its honest twin.
func TestSolve_HostileSlowReportGetsNoMoreRoundsThanItsTwin(t *testing.T) {
	s := DefaultSettings()
	s.Fairness = FairnessTightest
	p := hostileProblem(100, true)
	r, err := Solve(p, s)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for i, j := range p.Jobs {
		got[j.ID] = r.Rounds[i]
	}
	t.Logf("rounds %v (relaxed %v, ρ* %.3g)", got, r.Relaxed, r.RhoBound)
	if got["x"] > got["h"] {
		t.Errorf("hostile job got %d rounds, its honest twin %d", got["x"], got["h"])
	}
}
