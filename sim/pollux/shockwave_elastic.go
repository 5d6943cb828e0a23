package pollux

import "slices"

// elasticWidths returns each job's width for the next round when jobs can
// run narrower than their trace width (BatchAgent: the job re-picks its
// batch size for the GPUs it holds). Widths are max-min fair: every job
// gets min(trace width, c) GPUs with c the largest power of two for which
// the widths fit the cluster; when even c = 1 does not fit (more jobs than
// GPUs) every job is 1 GPU wide and the policy time-slices them. When the
// trace widths fit, nothing shrinks. A power-of-two cap changes only when
// the load halves or doubles, so widths, and with them restarts, change
// rarely.
func elasticWidths(trace []int, gpus int) []int {
	out := slices.Clone(trace)
	sum := 0
	for _, w := range trace {
		sum += w
	}
	if sum <= gpus {
		return out
	}
	widest := slices.Max(trace)
	c := 1
	for c*2 < widest && capped(trace, c*2) <= gpus {
		c *= 2
	}
	for i, w := range trace {
		out[i] = min(w, c)
	}
	return out
}

// capped is Σ min(w, c).
func capped(trace []int, c int) int {
	s := 0
	for _, w := range trace {
		s += min(w, c)
	}
	return s
}
