package policy

// The baselines of spec §5, each an Allocator driven by the Gavel round
// mechanism (spec §3.7). The aliases are the original's script names.
func init() {
	for _, n := range []string{"gavel", "themis", "allox", "mst", "ossp", "gandiva_fair"} {
		gavelRound[n] = true
	}
	baseline := func(mk func() Allocator) Factory {
		return func(o Options) (Policy, error) {
			g := NewGavelRound(mk())
			g.ReallocateOnChange = o.ReallocateOnChange
			return g, nil
		}
	}
	Register("gavel", baseline(NewMaxMinFairness), "max_min_fairness", "las")
	Register("themis", baseline(NewThemis), "finish_time_fairness")
	Register("allox", baseline(NewAlloX))
	Register("mst", baseline(NewMaxSumThroughput), "max_sum_throughput_perf")
	Register("ossp", baseline(NewMinTotalDuration), "min_total_duration")
	Register("gandiva_fair", baseline(NewGandivaFair), "gandiva-fair", "gandiva")
}

// gavelRound holds the policies built on GavelRound.
var gavelRound = map[string]bool{}

// UsesGavelRound reports whether the named policy (canonical name or alias)
// is driven by the Gavel round mechanism, the only one that
// Options.ReallocateOnChange affects.
func UsesGavelRound(name string) bool {
	n, err := Canonical(name)
	return err == nil && gavelRound[n]
}
