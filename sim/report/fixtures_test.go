package report_test

import (
	"github.com/shockwave-sched/shockwave/sim"
)

// threePolicies is a small hand-made comparison: 4 jobs on 2 GPUs, where
// shockwave is best on makespan, worst ρ and unfairness, mst on average JCT.
func threePolicies() []*sim.Result {
	return []*sim.Result{
		{
			Policy: "shockwave", GPUs: 2, Jobs: 4, Makespan: 3600, AvgJCT: 1800, Rounds: 30,
			WorstFTF: 1.25, WorstFTFThemis: 1.5, UnfairPct105: 25, UnfairPct110: 25, Utilization: 0.9,
			LeaseExtensions: 7, LeaseOpportunities: 9, EnvyP50: 0.1, EnvyP90: 0.2, EnvyP99: 0.25, EnvyMax: 0.3,
			JCT:         []float64{600, 1200.5, 2400, 3000.25},
			FTF:         []float64{0.5, 0.75, 1.25, 1},
			FTFThemis:   []float64{0.5, 0.75, 1.5, 1},
			RoundStart:  []float64{0, 120, 240, 360},
			RoundActive: []int{2, 4, 3, 1},
			RoundBusy:   []int{2, 2, 2, 1},
		},
		{
			Policy: "max_min_fairness", GPUs: 2, Jobs: 4, Makespan: 5400, AvgJCT: 2000, Rounds: 45,
			WorstFTF: 2.5, UnfairPct105: 50, UnfairPct110: 50, Utilization: 0.6,
			JCT:         []float64{700, 1300, 2000, 4000},
			FTF:         []float64{0.6, 0.9, 1.6, 2.5},
			RoundStart:  []float64{0, 120, 240, 360, 480},
			RoundActive: []int{2, 4, 4, 2, 1},
			RoundBusy:   []int{2, 1, 2, 2, 1},
		},
		{
			Policy: "mst", GPUs: 2, Jobs: 4, Makespan: 4500, AvgJCT: 1500, Rounds: 38,
			WorstFTF: 3.75, UnfairPct105: 75, UnfairPct110: 50, Utilization: 0.7,
			JCT:         []float64{500, 900, 1600, 3000},
			FTF:         []float64{1.06, 0.4, 1.5, 3.75},
			RoundStart:  []float64{0, 120, 240},
			RoundActive: []int{2, 3, 1},
			RoundBusy:   []int{2, 2, 1},
		},
	}
}
