package policy

import (
	"fmt"
	"slices"
)

// nodeCapacity is the GPU capacity per round the market may plan on a
// cluster of nodes (sizes, topology order) so that each round's gangs can
// also be placed on the nodes by the coordinator's rules (a gang no wider
// than a node on one node), for gangs of the given widths. It returns the
// capacity and a note when it is below total.
//
//   - One node (or none given): total, the flat pool.
//   - Uniform nodes of K GPUs, every width ≤ K dividing K and the widths
//     with K forming a divisibility chain (1, 2, 4, 8 on 8-GPU nodes), every
//     width > K a multiple of K: total, exactly. Widest first, every gang
//     of width w meets free space that is a multiple of w on every node, so
//     a gang is refused only when the GPU count is exhausted; the market's
//     per-round packing (GPU count) is then also the node packing.
//   - Otherwise a conservative bound: with W the widest gang that must fit
//     on one node, any-fit placement fails for a gang only when every node
//     has fewer than W free GPUs, that is more than K_n − W in use, so a
//     round using at most Σ_n max(0, K_n − W + 1) GPUs always places. The
//     capacity is that sum, but at least the widest gang (so no job is
//     starved outright); the coordinator repairs what still does not fit.
func nodeCapacity(total int, nodes, widths []int) (int, string) {
	if len(nodes) <= 1 || len(widths) == 0 {
		return total, ""
	}
	maxK, uniform := slices.Max(nodes), true
	for _, k := range nodes {
		uniform = uniform && k == nodes[0]
	}
	if uniform && chain(nodes[0], widths) {
		return total, ""
	}
	wmax, widest := 0, slices.Max(widths)
	for _, w := range widths {
		if w <= maxK {
			wmax = max(wmax, w)
		}
	}
	bound := 0
	for _, k := range nodes {
		bound += max(0, k-wmax+1)
	}
	bound = min(total, max(bound, widest))
	if bound >= total {
		return total, ""
	}
	return bound, fmt.Sprintf("node-safe capacity %d of %d GPUs (gangs up to %d GPUs on one node)", bound, total, wmax)
}

// chain reports widths that, with the node size k, form a divisibility
// chain below k and are multiples of k above it.
func chain(k int, widths []int) bool {
	ws := slices.Clone(widths)
	slices.Sort(ws)
	ws = slices.Compact(ws)
	prev := 1
	for _, w := range ws {
		switch {
		case w > k && w%k != 0:
			return false
		case w <= k && (k%w != 0 || w%prev != 0):
			return false
		case w <= k:
			prev = w
		}
	}
	return true
}
