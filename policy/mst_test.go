package policy

import (
	"math"
	"testing"
)

func TestMaxSumThroughput_FillsGPUsByStepsPerGPU(t *testing.T) {
	// Ratios θ/w: 10, 4, 3, 1. G = 4: job 0 (w 1) and job 1 (w 2) fit,
	// job 2 (w 2) gets the last GPU as x = ½, job 3 nothing.
	s := optSnap(4, 0,
		optJob{w: 1, theta: 10}, optJob{w: 2, theta: 8}, optJob{w: 2, theta: 6}, optJob{w: 1, theta: 1})
	x, err := NewMaxSumThroughput().Allocate(s)
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{1, 1, 0.5, 0}
	for i := range want {
		if math.Abs(x[i]-want[i]) > 1e-6 {
			t.Fatalf("x = %v, want ≈ %v", x, want)
		}
	}
}

func TestMaxSumThroughput_ExactTiesShareTheLastGPUsEvenly(t *testing.T) {
	// One fast job, then three identical jobs for the 2 GPUs left.
	s := optSnap(3, 0, optJob{w: 1, theta: 50}, optJob{w: 1, theta: 5}, optJob{w: 1, theta: 5}, optJob{w: 1, theta: 5})
	x, _ := NewMaxSumThroughput().Allocate(s)
	for i := 1; i < 4; i++ {
		if math.Abs(x[i]-2.0/3) > 1e-8 {
			t.Fatalf("x = %v, want ⅔ for each tied job", x)
		}
	}
	if x[1] != x[2] || x[2] != x[3] {
		t.Fatalf("tied jobs differ: %v", x)
	}
}

func TestMaxSumThroughput_JobsLeftOutGetTinySharesRankedByReducedCost(t *testing.T) {
	// G = 1: job 0 runs; jobs 1 and 2 are out, job 2 further from the price.
	s := optSnap(1, 0, optJob{w: 1, theta: 10}, optJob{w: 1, theta: 9}, optJob{w: 1, theta: 2})
	x, _ := NewMaxSumThroughput().Allocate(s)
	if !(x[1] > 0 && x[2] > 0 && x[1] > x[2] && x[1] < 1e-6) {
		t.Fatalf("x = %v: want tiny positive shares, larger for the closer job", x)
	}
	if !(x[0] < 1 && x[0] > 1-1e-6) {
		t.Fatalf("x[0] = %v, want just below 1", x[0])
	}
	if used := x[0] + x[1] + x[2]; used > 1 {
		t.Fatalf("Σ x = %v > 1", used)
	}
}

func TestMaxSumThroughput_ObjectiveMatchesTheGreedyKnapsackOptimum(t *testing.T) {
	s := optSnap(8, 0,
		optJob{w: 4, theta: 30}, optJob{w: 1, theta: 9}, optJob{w: 2, theta: 12}, optJob{w: 8, theta: 80}, optJob{w: 1, theta: 2})
	x, _ := NewMaxSumThroughput().Allocate(s)
	// Ratios 7.5, 9, 6, 10, 2: job 3 (8 GPUs) alone fills the cluster.
	got := 0.0
	for i, j := range s.Jobs {
		got += j.Throughput * x[i]
	}
	if math.Abs(got-80) > 1e-6 {
		t.Fatalf("Σ θ·x = %v, want 80 (x = %v)", got, x)
	}
}

func TestMaxSumThroughput_EverythingFitsGivesAlmostOneEach(t *testing.T) {
	x, _ := NewMaxSumThroughput().Allocate(optSnap(8, 0, optJob{w: 2, theta: 3}, optJob{w: 4, theta: 1}))
	for _, v := range x {
		if !(v < 1 && v > 1-1e-6) {
			t.Fatalf("x = %v", x)
		}
	}
}
