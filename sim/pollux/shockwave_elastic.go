package pollux

import "slices"

// MinWidthFraction bounds how far an elastic job shrinks: never below
// ⌈trace width / MinWidthFraction⌉ GPUs, a quarter of its TunedJobs width.
const MinWidthFraction = 4

// elasticWidths returns each job's width for the next round when jobs can
// run narrower than their trace width (BatchAgent: the job re-picks its
// batch size for the GPUs it holds). While the trace widths fit the
// cluster nothing shrinks. Otherwise every job gets min(trace width, c),
// the max-min fair widths with c the largest power of two for which they
// fit the cluster (1 when none does), raised to a floor of a quarter of
// its trace width (MinWidthFraction). The floor bounds the slowdown that a
// width alone inflicts on a job's ρ (about 4× at linear scaling); the
// GPUs the floors add beyond the cluster are what the policy time-slices,
// which is what it is for. A power-of-two cap moves only when the load
// halves or doubles, so widths, and with them restarts, change rarely.
func elasticWidths(trace []int, gpus int) []int {
	out := slices.Clone(trace)
	sum := 0
	for _, w := range trace {
		sum += w
	}
	if sum <= gpus {
		return out
	}
	c := elasticCap(trace, gpus)
	for i, w := range trace {
		out[i] = max(min(w, c), (w+MinWidthFraction-1)/MinWidthFraction)
	}
	return out
}

// elasticCap is the largest power of two c below the widest trace width
// with Σ min(w, c) ≤ gpus, or 1.
func elasticCap(trace []int, gpus int) int {
	widest := slices.Max(trace)
	c := 1
	for c*2 < widest && capped(trace, c*2) <= gpus {
		c *= 2
	}
	return c
}

// capped is Σ min(w, c): the GPUs of max-min fair widths at cap c.
func capped(trace []int, c int) int {
	s := 0
	for _, w := range trace {
		s += min(w, c)
	}
	return s
}

// placePacked places want GPUs on the one node with the fewest free GPUs
// that still holds them all (best fit), so that narrow elastic jobs do not
// spread over nodes; a job no node holds falls back to placeMostFree.
func placePacked(free []int, want int) []int {
	best := -1
	for n, f := range free {
		if f >= want && (best < 0 || f < free[best]) {
			best = n
		}
	}
	if best < 0 {
		return placeMostFree(free, want)
	}
	free[best] -= want
	out := make([]int, want)
	for k := range out {
		out[k] = best
	}
	return out
}
