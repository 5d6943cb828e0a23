package pollux

import (
	"testing"

	"github.com/shockwave-sched/shockwave/policy"
)

// TestTiresiasPort_MatchesTheSimulatorsTiresiasJobForJob: the live
// coordinator's tiresias policy (package policy), driven through the
// adapter every 60 s interval at the trace's width and batch size, gives
// every job of workloads 1–6 the completion time that the Pollux world's
// own Tiresias+TunedJobs gives it.
func TestTiresiasPort_MatchesTheSimulatorsTiresiasJobForJob(t *testing.T) {
	dir, _ := loadPublished(t)
	apps := mustApps(t)
	for k := 1; k <= 6; k++ {
		rows := loadWorkload(t, dir, k, apps)
		native, err := Run(Config{Workload: rows, Apps: apps, Policy: NewTiresias(), Setup: SetupTiresias})
		if err != nil {
			t.Fatal(err)
		}
		port, err := NewProject("tiresias", policy.Options{}, BatchTrace)
		if err != nil {
			t.Fatal(err)
		}
		port.Every = 1
		jobs, err := Run(Config{Workload: rows, Apps: apps, Policy: port, Setup: port.Setup})
		if err != nil {
			t.Fatal(err)
		}
		differ := 0
		for i, j := range jobs {
			if j.Name != native[i].Name || j.Completion != native[i].Completion || j.Restarts != native[i].Restarts {
				if differ++; differ <= 3 {
					t.Errorf("workload %d job %s: port completes at %d s after %d restarts, native %s at %d s after %d",
						k, j.Name, j.Completion, j.Restarts, native[i].Name, native[i].Completion, native[i].Restarts)
				}
			}
		}
		if differ > 0 {
			t.Errorf("workload %d: %d of %d jobs differ", k, differ, len(jobs))
		}
	}
}
