package market

import (
	"cmp"
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

// TestExpandTies_OrdersAsSortingTheJobRounds checks the round-by-round
// merge of one key's runs against expanding them and sorting the
// job-rounds by (n, job), as sortedItems did: random runs in (n0, job)
// order, long and short, with gaps between them and jobs holding several
// runs of the key one after the other (as gains per GPU that round to one
// key can give), scratch reused across trials.
func TestExpandTies_OrdersAsSortingTheJobRounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 9))
	var active [2][]run
	for trial := range 2000 {
		var runs []run
		for job := range int32(1 + rng.IntN(60)) {
			if rng.IntN(4) == 0 {
				continue
			}
			n0 := int32(rng.IntN(30))
			for range 1 + rng.IntN(3) {
				cnt := int32(1)
				if rng.IntN(2) == 0 {
					cnt += int32(rng.IntN(25))
				}
				runs = append(runs, run{gain: float64(job), job: job, n0: n0, cnt: cnt})
				n0 += cnt + int32(rng.IntN(2)*rng.IntN(10))
			}
		}
		if len(runs) == 0 {
			continue
		}
		slices.SortFunc(runs, func(a, b run) int { return cmp.Or(cmp.Compare(a.n0, b.n0), cmp.Compare(a.job, b.job)) })
		var want []item
		for _, r := range runs {
			for n := r.n0; n < r.n0+r.cnt; n++ {
				want = append(want, item{job: r.job, n: n, gain: r.gain})
			}
		}
		slices.SortFunc(want, func(a, b item) int { return cmp.Or(cmp.Compare(a.n, b.n), cmp.Compare(a.job, b.job)) })
		prefix := []item{{job: -1, n: -1}}
		got := expandTies(slices.Clone(prefix), runs, &active)
		if !slices.Equal(got[1:], want) || got[0] != prefix[0] {
			t.Fatalf("trial %d: runs %v\ngot  %v\nwant %v", trial, runs, got[1:], want)
		}
	}
}
