package pollux

import (
	"cmp"
	"testing"

	"github.com/shockwave-sched/shockwave/policy"
)

// tableSpecs is the comparison of make results-pollux.
var tableSpecs = []Spec{
	{Policy: "pollux"}, {Policy: "optimus"}, {Policy: "tiresias"},
	{Policy: "shockwave", Batch: BatchTrace}, {Policy: "gavel", Batch: BatchTrace}, {Policy: "themis", Batch: BatchTrace},
	{Policy: "shockwave", Batch: BatchAgent}, {Policy: "gavel", Batch: BatchAgent}, {Policy: "themis", Batch: BatchAgent},
}

// swMiss is where Shockwave misses an issue target on one workload, and
// the bound the test holds it to instead (a zero field: the target itself
// is asserted). Every entry is reported with its number in docs/pollux.md.
type swMiss struct {
	worstRho float64 // bound on Shockwave's worst ρ (target: below every other policy's)
	avgJCT   float64 // bound on its average JCT over Tiresias' and Optimus' lower one (target: below both)
}

// polluxMisses lists the misses by Shockwave row and workload, measured
// with Pollux at seed 1 (the value in each comment).
var polluxMisses = map[string]map[int]swMiss{
	"shockwave": { // jobs keep the trace width: the market time-slices wide jobs
		1: {worstRho: 16.1, avgJCT: 1.66}, // ρ 15.27 (Pollux 2.71); 1.576× Tiresias
		2: {worstRho: 13.8, avgJCT: 1.36}, // ρ 13.10 (Pollux 4.52); 1.295× Tiresias
		3: {worstRho: 6.5},                // ρ 6.13 (shockwave+agent 2.48); average JCT met (0.938× Tiresias)
		4: {worstRho: 18.7, avgJCT: 1.89}, // ρ 17.77 (Pollux 2.56); 1.803× Tiresias
		5: {worstRho: 8.4, avgJCT: 1.41},  // ρ 7.96 (Pollux 3.26); 1.342× Tiresias
		6: {worstRho: 13.1, avgJCT: 1.59}, // ρ 12.41 (Pollux 4.10); 1.511× Tiresias
	},
	// shockwave+agent (elastic widths from reported speedups) meets both
	// targets on all six workloads, so it has no entry: worst ρ 1.86, 3.59,
	// 2.48, 1.93, 2.33, 3.03 against Pollux's 2.71, 4.52, 3.77, 2.56, 3.26,
	// 4.10; average JCT 0.86, 0.67, 0.66, 0.82, 0.76, 0.78× Tiresias'.
}

// The targets for Shockwave on Pollux's workloads: in each batch
// mode, the lowest worst ρ of all policies and a lower average JCT than
// Tiresias and Optimus, on every workload; misses are held to the bounds
// of polluxMisses. The distance to Pollux is logged.
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
			s, miss := by[sw], polluxMisses[sw][k]
			t.Logf("workload %d %s: avg JCT %.2f× Pollux's, worst ρ %.2f× Pollux's", k, sw, s.AvgJCT/by["pollux"].AvgJCT, s.WorstRho/by["pollux"].WorstRho)
			lowest := ""
			for _, r := range res {
				if r.Policy != sw && r.WorstRho <= s.WorstRho && (lowest == "" || r.WorstRho < by[lowest].WorstRho) {
					lowest = r.Policy
				}
			}
			switch {
			case lowest != "" && miss.worstRho == 0:
				t.Errorf("workload %d: %s worst ρ %.2f is not below %s's %.2f", k, sw, s.WorstRho, lowest, by[lowest].WorstRho)
			case lowest != "" && s.WorstRho > miss.worstRho:
				t.Errorf("workload %d: %s worst ρ %.2f (known miss: %s has %.2f) is above its bound %.2f", k, sw, s.WorstRho, lowest, by[lowest].WorstRho, miss.worstRho)
			case lowest == "" && miss.worstRho != 0:
				t.Logf("workload %d: %s now has the lowest worst ρ; drop its known miss", k, sw)
			}
			best := min(by["tiresias"].AvgJCT, by["optimus"].AvgJCT)
			ratio := s.AvgJCT / best
			if bound := cmp.Or(miss.avgJCT, 1); ratio >= bound {
				t.Errorf("workload %d: %s average JCT %.1f is %.3f× the better of Tiresias' and Optimus' %.1f (want below %.3f×)", k, sw, s.AvgJCT, ratio, best, bound)
			} else if miss.avgJCT != 0 && ratio < 1 {
				t.Logf("workload %d: %s now beats Tiresias and Optimus; drop its known miss", k, sw)
			}
		}
	}
}
