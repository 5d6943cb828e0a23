package market

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSortRuns_OrdersAsTheComparisonSort checks the radix sort against a
// comparison sort by (gain desc, n0, job) on random runs with many equal
// gains, negative gains, ±0 and large job and round numbers.
func TestSortRuns_OrdersAsTheComparisonSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 4))
	gains := []float64{0, math.Copysign(0, -1), 1, -1, 1e-300, -1e-300, 3.5, 1e300, math.SmallestNonzeroFloat64}
	for trial := range 300 {
		n := rng.IntN(2000)
		runs := make([]run, n)
		for i := range runs {
			g := rng.NormFloat64() * math.Pow(10, float64(rng.IntN(20)-10))
			if rng.IntN(3) == 0 {
				g = gains[rng.IntN(len(gains))]
			}
			runs[i] = run{key: descending(g), gain: g, job: int32(rng.IntN(1 << uint(1+rng.IntN(30)))),
				n0: int32(rng.IntN(1 << uint(1+rng.IntN(12)))), cnt: int32(i)}
		}
		want := slices.Clone(runs)
		slices.SortStableFunc(want, func(a, b run) int {
			switch {
			case a.gain != b.gain:
				if a.gain > b.gain {
					return -1
				}
				return 1
			case a.n0 != b.n0:
				return int(a.n0 - b.n0)
			case a.job != b.job:
				return int(a.job - b.job)
			}
			return int(a.cnt - b.cnt) // input order among equal runs
		})
		got := sortRuns(runs)
		for i := range got {
			if got[i].cnt != want[i].cnt {
				t.Fatalf("trial %d: position %d holds run %+v, want %+v", trial, i, got[i], want[i])
			}
		}
	}
}

// TestSortRuns_JobOrderedRunsAsTheComparisonSort checks the shortcut for
// runs listed by job, then n0 (one counting pass over n0 instead of the
// (n0, job) bytes): runs made as sortedItems makes them, for jobs in
// ascending order with increasing round starts, against the comparison
// sort; and that runs out of that order are not taken for it.
func TestSortRuns_JobOrderedRunsAsTheComparisonSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 7))
	gains := []float64{0, 1, 0.5, 0.25, 3.5, 1e-3}
	for trial := range 300 {
		var runs []run
		job := int32(0)
		for range rng.IntN(300) {
			job += int32(rng.IntN(3))
			n0 := int32(0)
			for range 1 + rng.IntN(6) {
				g := gains[rng.IntN(len(gains))] * float64(1+rng.IntN(3))
				runs = append(runs, run{key: descending(g), gain: g, job: job, n0: n0, cnt: int32(len(runs))})
				n0 += 1 + int32(rng.IntN(40))
			}
			job++
		}
		if !byJob(runs) {
			t.Fatalf("trial %d: runs listed by job and n0 not recognized", trial)
		}
		if len(runs) > 1 {
			swapped := slices.Clone(runs)
			k := rng.IntN(len(runs) - 1)
			swapped[k], swapped[k+1] = swapped[k+1], swapped[k]
			if byJob(swapped) {
				t.Fatalf("trial %d: runs %d and %d swapped still taken as listed by job", trial, k, k+1)
			}
		}
		want := slices.Clone(runs)
		slices.SortStableFunc(want, func(a, b run) int {
			switch {
			case a.gain != b.gain:
				if a.gain > b.gain {
					return -1
				}
				return 1
			case a.n0 != b.n0:
				return int(a.n0 - b.n0)
			}
			return int(a.job - b.job)
		})
		got := sortRuns(runs)
		for i := range got {
			if got[i].cnt != want[i].cnt {
				t.Fatalf("trial %d: position %d holds run %+v, want %+v", trial, i, got[i], want[i])
			}
		}
	}
}
