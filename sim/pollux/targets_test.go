package pollux

import (
	"testing"

	"github.com/shockwave-sched/shockwave/policy"
)

// tableSpecs is the comparison of make results-pollux.
var tableSpecs = []Spec{
	{Policy: "pollux"}, {Policy: "optimus"}, {Policy: "tiresias"},
	{Policy: "shockwave", Batch: BatchTrace}, {Policy: "gavel", Batch: BatchTrace}, {Policy: "themis", Batch: BatchTrace},
	{Policy: "shockwave", Batch: BatchAgent}, {Policy: "gavel", Batch: BatchAgent}, {Policy: "themis", Batch: BatchAgent},
}

// The targets for Shockwave on Pollux's workloads: in each batch
// mode, the lowest worst ρ of all policies and a lower average JCT than
// Tiresias and Optimus, on every workload. The distance to Pollux is
// logged.
func TestShockwave_TargetsOnPolluxWorkloads(t *testing.T) {
	longTests(t)
	dir, _ := loadPublished(t)
	apps := mustApps(t)
	for k := 1; k <= 6; k++ {
		rows := loadWorkload(t, dir, k, apps)
		res, err := Compare(rows, tableSpecs, Options{Apps: apps, Seed: 1, Parallel: parallelism(),
			Policy: policy.Options{Config: onlineShockwave()}})
		if err != nil {
			t.Fatal(err)
		}
		by := map[string]*Result{}
		for _, r := range res {
			by[r.Policy] = r
			t.Logf("workload %d %-16s avg %8.1f makespan %6d worst ρ %6.2f ρ>1.05 %3.0f%%", k, r.Policy, r.AvgJCT, r.Makespan, r.WorstRho, 100*r.UnfairShare)
		}
		for _, sw := range []string{"shockwave", "shockwave+agent"} {
			s := by[sw]
			t.Logf("workload %d %s: avg JCT %.2f× Pollux's, worst ρ %.2f× Pollux's", k, sw, s.AvgJCT/by["pollux"].AvgJCT, s.WorstRho/by["pollux"].WorstRho)
			for _, r := range res {
				if r.Policy != sw && r.WorstRho < s.WorstRho {
					t.Errorf("workload %d: %s worst ρ %.2f is above %s's %.2f", k, sw, s.WorstRho, r.Policy, r.WorstRho)
				}
			}
			for _, b := range []string{"tiresias", "optimus"} {
				if s.AvgJCT >= by[b].AvgJCT {
					t.Errorf("workload %d: %s average JCT %.1f is not below %s's %.1f", k, sw, s.AvgJCT, b, by[b].AvgJCT)
				}
			}
		}
	}
}
