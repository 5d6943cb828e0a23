package sim_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/shockwave-sched/shockwave/sim"
	"github.com/shockwave-sched/shockwave/sim/workload"
)

var noisy = workload.Noise{Seed: 1, ScheduleJitter: 5, ThroughputNoise: 0.1, RoundNoise: 0.05}

// TestNoise_SeededNoisyRunIsBitForBitAndDiffersFromDeterministic runs a
// noisy workload twice per policy (identical bytes) and checks that the
// noise changed the outcome.
func TestNoise_SeededNoisyRunIsBitForBitAndDiffersFromDeterministic(t *testing.T) {
	jobs, thr := generated(t, 40, 3)
	out := func(pol string, n workload.Noise) []byte {
		r, err := sim.Run(sim.Config{Jobs: jobs, Throughputs: thr, GPUs: 8, Policy: pol, Noise: n, Forecasts: true})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(r)
		return b
	}
	for _, pol := range []string{"shockwave", "gavel"} {
		a, b := out(pol, noisy), out(pol, noisy)
		if !bytes.Equal(a, b) {
			t.Fatalf("%s: two seeded noisy runs differ", pol)
		}
		if bytes.Equal(a, out(pol, workload.Noise{})) {
			t.Fatalf("%s: the noise changed nothing", pol)
		}
	}
}

// TestNoise_EarlyEndsLeaveTheMetricsAndFreeTheCluster checks cancellations
// and crashes: every job ends, the counts add up, the ended-early jobs have
// no ρ and no forecast points, and the others all completed.
func TestNoise_EarlyEndsLeaveTheMetricsAndFreeTheCluster(t *testing.T) {
	jobs, thr := generated(t, 60, 5)
	n := noisy
	n.CancelRate = 0.3
	for _, pol := range []string{"shockwave", "themis"} {
		r, err := sim.Run(sim.Config{Jobs: jobs, Throughputs: thr, GPUs: 12, Policy: pol, Noise: n, Forecasts: true})
		if err != nil {
			t.Fatalf("%s: %v", pol, err)
		}
		t.Logf("%s: %d cancelled, %d crashed, makespan %.0f, avg JCT %.0f, worst ρ %.3f", pol, r.Cancelled, r.Crashed, r.Makespan, r.AvgJCT, r.WorstFTF)
		if r.Cancelled == 0 || r.Crashed == 0 || r.Cancelled+r.Crashed > 40 {
			t.Fatalf("%s: %d cancelled, %d crashed of 60 at rate 0.3", pol, r.Cancelled, r.Crashed)
		}
		zero := 0
		for _, f := range r.FTF {
			if f == 0 {
				zero++
			}
		}
		if zero != r.Cancelled+r.Crashed {
			t.Fatalf("%s: %d jobs without ρ, %d ended early", pol, zero, r.Cancelled+r.Crashed)
		}
		seen := map[int]bool{}
		for _, p := range r.Forecasts {
			seen[p.Job] = true
		}
		for i, f := range r.FTF {
			if f == 0 && seen[i] {
				t.Fatalf("%s: job %d ended early but has forecast points", pol, i)
			}
		}
	}
}
