package policy

// The baselines of spec §5, each an Allocator driven by the Gavel round
// mechanism (spec §3.7). The aliases are the original's script names.
func init() {
	baseline := func(mk func() Allocator) Factory {
		return func(Options) (Policy, error) { return NewGavelRound(mk()), nil }
	}
	Register("gavel", baseline(NewMaxMinFairness), "max_min_fairness", "las")
	Register("themis", baseline(NewThemis), "finish_time_fairness")
	Register("allox", baseline(NewAlloX))
	Register("mst", baseline(NewMaxSumThroughput), "max_sum_throughput_perf")
	Register("ossp", baseline(NewMinTotalDuration), "min_total_duration")
}
