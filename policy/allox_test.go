package policy

import (
	"slices"
	"testing"
)

func TestAlloX_EveryWaitingJobGetsAGPUWhenTheyFit(t *testing.T) {
	s := optSnap(4, 100, optJob{w: 1, theta: 1, rem: 10}, optJob{w: 2, theta: 1, rem: 10}, optJob{w: 4, theta: 1, rem: 10})
	x, err := NewAlloX().Allocate(s)
	if err != nil {
		t.Fatal(err)
	}
	if want := []float64{1, 0.5, 0.25}; !slices.Equal(x, want) {
		t.Fatalf("x = %v, want %v", x, want)
	}
}

func TestAlloX_PlacedOneGPUJobsKeepTheirGPU(t *testing.T) {
	a := NewAlloX()
	s := optSnap(1, 100, optJob{w: 1, theta: 1, rem: 1000, arrival: 0})
	a.Allocate(s)
	// A shorter, older-looking job arrives: the placed job is not preempted.
	s.Jobs = append(s.Jobs, &Job{ID: "1", Seq: 1, Workers: 1, Throughput: 1, TotalSteps: 1, SubmitTime: -500})
	x, _ := a.Allocate(s)
	if !slices.Equal(x, []float64{1, 0}) {
		t.Fatalf("x = %v, want [1 0]", x)
	}
	a.Forget("0")
	s.Jobs = s.Jobs[1:]
	if x, _ := a.Allocate(s); !slices.Equal(x, []float64{1}) {
		t.Fatalf("after the job left: x = %v, want [1]", x)
	}
}

func TestAlloX_OnlyTheOldestJobsAreConsidered(t *testing.T) {
	// 2 GPUs, 5 waiting jobs: keep max(⌊0.2·5⌋, 2) = 2, the two oldest.
	s := optSnap(2, 1000,
		optJob{w: 1, theta: 1, rem: 10, arrival: 500}, optJob{w: 1, theta: 1, rem: 10, arrival: 100},
		optJob{w: 1, theta: 1, rem: 10, arrival: 900}, optJob{w: 1, theta: 1, rem: 10, arrival: 50},
		optJob{w: 1, theta: 1, rem: 10, arrival: 800})
	x, _ := NewAlloX().Allocate(s)
	if want := []float64{0, 1, 0, 1, 0}; !slices.Equal(x, want) {
		t.Fatalf("x = %v, want %v", x, want)
	}
}

func TestAlloX_ShortestKeptJobRunsFirstOnAGPU(t *testing.T) {
	// 1 GPU, 10 waiting jobs: keep ⌊0.2·10⌋ = 2 oldest (jobs 0 and 1); on
	// one GPU the shorter one takes the later position r = 2 and runs
	// first (shortest processing time first).
	jobs := make([]optJob, 10)
	for i := range jobs {
		jobs[i] = optJob{w: 1, theta: 1, rem: 1000, arrival: float64(100 + i)}
	}
	jobs[1].rem = 300
	x, _ := NewAlloX().Allocate(optSnap(1, 1000, jobs...))
	want := make([]float64, 10)
	want[1] = 1
	if !slices.Equal(x, want) {
		t.Fatalf("x = %v, want %v", x, want)
	}
}

func TestAlloX_WaitingMultiGPUJobKeepsItsShareLikeTheOriginal(t *testing.T) {
	a := NewAlloX()
	s := optSnap(2, 100, optJob{w: 2, theta: 1, rem: 1000, arrival: 0})
	a.Allocate(s) // x = ½
	// Two older 1-GPU jobs arrive and take both GPUs; the 2-GPU job
	// keeps ½ from before, so the total is 3 GPUs on a 2-GPU cluster.
	s.Jobs = append(s.Jobs,
		&Job{ID: "1", Seq: 1, Workers: 1, Throughput: 1, TotalSteps: 10, SubmitTime: -100},
		&Job{ID: "2", Seq: 2, Workers: 1, Throughput: 1, TotalSteps: 10, SubmitTime: -90})
	x, _ := a.Allocate(s)
	if want := []float64{0.5, 1, 1}; !slices.Equal(x, want) {
		t.Fatalf("x = %v, want %v", x, want)
	}
}

func TestAlloX_UnknownThroughputCountsAsNearlyZero(t *testing.T) {
	// θ = 0 becomes 1e-10: an enormous processing time, placed last.
	jobs := []optJob{{w: 1, theta: 0, rem: 10, arrival: 0}, {w: 1, theta: 1, rem: 10, arrival: 1}}
	for range 8 {
		jobs = append(jobs, optJob{w: 1, theta: 1, rem: 1000, arrival: 50})
	}
	x, err := NewAlloX().Allocate(optSnap(1, 100, jobs...))
	if err != nil || x[0] != 0 || x[1] != 1 {
		t.Fatalf("x = %v, err %v", x, err)
	}
}
