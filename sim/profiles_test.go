package sim_test

import (
	"bytes"
	"testing"

	"github.com/shockwave-sched/shockwave/sim"
	"github.com/shockwave-sched/shockwave/sim/workload"
)

// exportRun simulates jobs with pol and returns the realized profiles as
// written by workload.WriteProfiles.
func exportRun(t *testing.T, jobs []workload.Spec, thr *workload.Throughputs, pol string, n workload.Noise) ([]byte, *sim.Result) {
	t.Helper()
	r, err := sim.Run(sim.Config{Jobs: jobs, Throughputs: thr, GPUs: 8, Policy: pol, RecordProfiles: true, Noise: n})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := workload.WriteProfiles(&buf, r.Profiles); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), r
}

// TestProfiles_ReplayOfAnExportedRunReexportsTheSameProfiles exports the
// realized per-job profiles of a run (noisy, with switches), reads them
// back, replays them under the same policy, and checks that the replay
// realizes exactly the same profiles and the same schedule.
func TestProfiles_ReplayOfAnExportedRunReexportsTheSameProfiles(t *testing.T) {
	jobs, thr := generated(t, 40, 9)
	noise := workload.Noise{Seed: 2, ScheduleJitter: 3, ThroughputNoise: 0.1}
	first, r1 := exportRun(t, jobs, thr, "gavel", noise)
	replay, err := workload.ReadProfiles(bytes.NewReader(first), "export.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	changes := 0
	for _, sp := range replay {
		for e := 1; e < len(sp.Profile.BatchSizes); e++ {
			if sp.Profile.BatchSizes[e] != sp.Profile.BatchSizes[e-1] {
				changes++
			}
		}
	}
	if changes == 0 {
		t.Fatal("the exported profiles have no batch-size change")
	}
	second, r2 := exportRun(t, replay, thr, "gavel", workload.Noise{})
	if !bytes.Equal(first, second) {
		t.Fatal("the replay realized other profiles")
	}
	if r1.Makespan != r2.Makespan || r1.AvgJCT != r2.AvgJCT {
		t.Fatalf("replay makespan %.1f avg JCT %.1f, original %.1f %.1f", r2.Makespan, r2.AvgJCT, r1.Makespan, r1.AvgJCT)
	}
}
