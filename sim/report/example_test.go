package report_test

import (
	"os"

	"github.com/shockwave-sched/shockwave/sim"
	"github.com/shockwave-sched/shockwave/sim/report"
)

// The released 32-GPU results of three policies (spec §7.2), rounded.
func ExampleWriteTable() {
	results := []*sim.Result{
		{Policy: "shockwave", Jobs: 120, GPUs: 32, Makespan: 24197.4, AvgJCT: 9958.5, WorstFTF: 1.784,
			UnfairPct105: 5, UnfairPct110: 5, Utilization: 0.817, Rounds: 202},
		{Policy: "max_min_fairness", Jobs: 120, GPUs: 32, Makespan: 33207.7, AvgJCT: 11274.1, WorstFTF: 2.947,
			UnfairPct105: 25, UnfairPct110: 21.67, Utilization: 0.595, Rounds: 277},
		{Policy: "max_sum_throughput_perf", Jobs: 120, GPUs: 32, Makespan: 31909.0, AvgJCT: 9654.7, WorstFTF: 4.976,
			UnfairPct105: 25, UnfairPct110: 22.5, Utilization: 0.619, Rounds: 266},
	}
	report.WriteTable(os.Stdout, results)
	// Output:
	// 120 jobs, 32 GPUs, 3 policies; * = best in column; % ρ>x = share of jobs with ρ > x
	//
	// policy     makespan s           avg JCT s           worst ρ   % ρ>1.05   % ρ>1.1    util   rounds
	// Shockwave     24197.4*  6.72 h     9958.5   2.77 h    1.784*      5.00*     5.00*  0.817*     202
	// Gavel         33207.7   9.22 h    11274.1   3.13 h    2.947      25.00     21.67   0.595      277
	// MST           31909.0   8.86 h     9654.7*  2.68 h    4.976      25.00     22.50   0.619      266
	//
	// ratio to the best policy (lower is better; the best reads 1.00×):
	//
	// policy     makespan  avg JCT  worst ρ  % ρ>1.05
	// Shockwave     1.00×    1.03×    1.00×     1.00×
	// Gavel         1.37×    1.17×    1.65×     5.00×
	// MST           1.32×    1.00×    2.79×     5.00×
}

func ExampleWriteJSON() {
	results := []*sim.Result{{
		Policy: "shockwave", Jobs: 2, GPUs: 1, Makespan: 3000, AvgJCT: 2000, WorstFTF: 1.25,
		UnfairPct105: 50, UnfairPct110: 50, Utilization: 0.9, Rounds: 25,
		JCT: []float64{1000, 3000}, FTF: []float64{0.5, 1.25},
	}}
	report.WriteJSON(os.Stdout, results)
	// Output:
	// {"results":[
	// {"policy":"shockwave","makespan_s":3000,"avg_jct_s":2000,"worst_ftf":1.25,"unfair_pct_105":50,"unfair_pct_110":50,"utilization":0.9,"rounds":25,"jct_s":[1000,3000],"ftf":[0.5,1.25],"gpus":1,"jobs":2,"worst_ftf_themis":0,"ftf_themis":[],"lease_extensions":0,"lease_opportunities":0,"envy_p50":0,"envy_p90":0,"envy_p99":0,"envy_max":0}
	// ]}
}
