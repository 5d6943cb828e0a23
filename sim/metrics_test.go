package sim

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// textbookEnvy lists every pair difference and sorts them: the definition
// pairDiffs must reproduce bit for bit.
func textbookEnvy(share []float64) (p50, p90, p99, mx float64, ok bool) {
	var diffs []float64
	for i := range share {
		for k := i + 1; k < len(share); k++ {
			diffs = append(diffs, math.Abs(share[i]-share[k]))
		}
	}
	if len(diffs) == 0 {
		return 0, 0, 0, 0, false
	}
	slices.Sort(diffs)
	return percentile(diffs, 50), percentile(diffs, 90), percentile(diffs, 99), diffs[len(diffs)-1], true
}

func TestPairDiffs_PercentilesEqualTheSortedListBitForBit(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 9000))
	for trial := range 400 {
		n := rng.IntN(160)
		share := make([]float64, n)
		for i := range share {
			switch trial % 3 {
			case 0: // ratios of round counts, as the simulator's shares are
				total := 1 + rng.IntN(300)
				share[i] = float64(rng.IntN(total+1)) / float64(total)
			case 1: // few distinct values, many ties
				share[i] = float64(rng.IntN(4)) / 3
			default: // arbitrary values in [0, 1]
				share[i] = rng.Float64()
			}
		}
		want50, want90, want99, wantMax, ok := textbookEnvy(share)
		d := newPairDiffs(share)
		if !ok {
			if d.n != 0 {
				t.Fatalf("trial %d: %d values give %d pairs, want none", trial, n, d.n)
			}
			continue
		}
		got := [4]float64{percentileAt(d.n, 50, d.at), percentileAt(d.n, 90, d.at), percentileAt(d.n, 99, d.at), d.at(d.n - 1)}
		want := [4]float64{want50, want90, want99, wantMax}
		for q := range got {
			if math.Float64bits(got[q]) != math.Float64bits(want[q]) {
				t.Fatalf("trial %d (%d values): statistic %d = %v (%#x), the sorted list gives %v (%#x)",
					trial, n, q, got[q], math.Float64bits(got[q]), want[q], math.Float64bits(want[q]))
			}
		}
	}
}

func TestPairDiffs_EveryRankEqualsTheSortedList(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	share := make([]float64, 60)
	for i := range share {
		total := 1 + rng.IntN(40)
		share[i] = float64(rng.IntN(total+1)) / float64(total)
	}
	var diffs []float64
	for i := range share {
		for k := i + 1; k < len(share); k++ {
			diffs = append(diffs, math.Abs(share[i]-share[k]))
		}
	}
	slices.Sort(diffs)
	d := newPairDiffs(share)
	if d.n != len(diffs) {
		t.Fatalf("%d pairs, want %d", d.n, len(diffs))
	}
	for r, want := range diffs {
		if got := d.at(r); math.Float64bits(got) != math.Float64bits(want) {
			t.Fatalf("rank %d: %v, want %v", r, got, want)
		}
	}
}

func TestEnvy_LeavesTheMetricsZeroWithFewerThanTwoJobs(t *testing.T) {
	for _, share := range [][]float64{nil, {0.5}} {
		if d := newPairDiffs(share); d.n != 0 {
			t.Fatalf("%v: %d pairs, want 0", share, d.n)
		}
	}
}

// BenchmarkEnvy_9000Jobs reads the envy statistics of 9,000 jobs (40.5
// million pairs) from their shares: the metric that, listed and sorted,
// held 324 MB and a third of a 9,000-job profile run's CPU.
func BenchmarkEnvy_9000Jobs(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	share := make([]float64, 9000)
	for i := range share {
		total := 1 + rng.IntN(240)
		share[i] = float64(rng.IntN(total+1)) / float64(total)
	}
	b.ReportAllocs()
	for b.Loop() {
		d := newPairDiffs(share)
		_ = percentileAt(d.n, 50, d.at) + percentileAt(d.n, 90, d.at) + percentileAt(d.n, 99, d.at) + d.at(d.n-1)
	}
}
