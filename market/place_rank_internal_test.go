package market

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestArrange_GroupSortOrdersAsTheComparison: on rankings whose jobs fall
// into groups of equal representative and round count (equal entries but
// for the index; some groups with equal entries too, keys of ±0, NaN), the
// sort by groups gives the comparison sort's order, and with many groups
// it declines and leaves the ranking as it was.
func TestArrange_GroupSortOrdersAsTheComparison(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 14))
	keys := []float64{0, math.Copysign(0, -1), 1, 2.5, math.NaN(), 1e-300}
	grouped := 0
	for trial := range 3000 {
		N := 1 + rng.IntN(400)
		G := 1 + rng.IntN(max(1, N/6))
		if rng.IntN(5) == 0 {
			G = 1 + rng.IntN(N) // many groups: may decline
		}
		type tuple struct {
			later          bool
			key, prio, rho float64
			n              int
		}
		tuples := make([]tuple, G)
		for g := range tuples {
			if g > 0 && rng.IntN(4) == 0 {
				tuples[g] = tuples[rng.IntN(g)] // equal entries, another group
				continue
			}
			tuples[g] = tuple{rng.IntN(3) == 0, keys[rng.IntN(len(keys))], float64(1 + rng.IntN(2)), float64(rng.IntN(3)), rng.IntN(4)}
		}
		order := make([]ranked, N)
		rep, n := make([]int32, N), make([]int, N)
		head := make([]int32, G)
		for g := range head {
			head[g] = -1
		}
		for c := range order {
			g := rng.IntN(G)
			if head[g] < 0 {
				head[g] = int32(c)
			}
			tu := tuples[g]
			order[c] = ranked{tu.later, tu.key, tu.prio, tu.rho, tu.n, c}
			rep[c], n[c] = head[g], tu.n
		}
		want := slices.Clone(order)
		slices.SortFunc(want, compareRanked)
		got := slices.Clone(order)
		if !sortRankedByGroups(got, rep, n) {
			if !slices.EqualFunc(got, order, func(a, b ranked) bool { return a.c == b.c }) {
				t.Fatalf("trial %d: declined but reordered", trial)
			}
			continue
		}
		grouped++
		for i := range want {
			if got[i].c != want[i].c {
				t.Fatalf("trial %d (N=%d, %d groups): position %d holds job %d, the comparison sort job %d", trial, N, G, i, got[i].c, want[i].c)
			}
		}
	}
	if grouped < 1000 {
		t.Fatalf("only %d rankings sorted by groups", grouped)
	}
}
