package policy

import (
	"math"
	"testing"
)

// themisRatio is ρ_i(x) of spec §5.2 given C_i.
func themisRatio(s *Snapshot, i int, x, c float64) float64 {
	j := s.Jobs[i]
	rem := float64(j.RemainingSteps())
	iso := j.Throughput * min(1, float64(s.GPUs)/float64(len(s.Jobs))/float64(j.Workers))
	return (s.Now - j.SubmitTime + rem/(j.Throughput*x)) / (c + rem/iso)
}

func TestThemis_IdenticalNewJobsSplitTheGPUEvenly(t *testing.T) {
	x, err := NewThemis().Allocate(optSnap(1, 0, optJob{w: 1, theta: 2, rem: 100}, optJob{w: 1, theta: 2, rem: 100}))
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(x[0]-0.5) > 1e-12 || math.Abs(x[1]-0.5) > 1e-12 {
		t.Fatalf("x = %v, want ½ each", x)
	}
}

func TestThemis_UnderContentionEveryJobGetsTheSameFinishTimeRatio(t *testing.T) {
	s := optSnap(4, 3000,
		optJob{w: 1, theta: 2, rem: 40000, arrival: 2000}, optJob{w: 2, theta: 7, rem: 90000, arrival: 1000},
		optJob{w: 1, theta: 10, rem: 300000, arrival: 2500}, optJob{w: 4, theta: 30, rem: 200000, arrival: 2900},
		optJob{w: 1, theta: 1, rem: 50000, arrival: 2950}, optJob{w: 2, theta: 3, rem: 70000, arrival: 2000})
	x, err := NewThemis().Allocate(s)
	if err != nil {
		t.Fatal(err)
	}
	used, rho := 0.0, themisRatio(s, 0, x[0], 0)
	for i, j := range s.Jobs {
		used += float64(j.Workers) * x[i]
		if r := themisRatio(s, i, x[i], 0); math.Abs(r-rho) > 1e-9*rho {
			t.Fatalf("job %d: ratio %v, job 0: %v (x = %v)", i, r, rho, x)
		}
	}
	if used > 4 || used < 4-1e-9 {
		t.Fatalf("Σ w·x = %v, want the 4 GPUs exactly", used)
	}
}

func TestThemis_OlderJobsGetMoreOfTheCluster(t *testing.T) {
	x, _ := NewThemis().Allocate(optSnap(1, 1000, optJob{w: 1, theta: 1, rem: 500, arrival: 0}, optJob{w: 1, theta: 1, rem: 500, arrival: 900}))
	if !(x[0] > x[1]) {
		t.Fatalf("x = %v: the job waiting longer should get more", x)
	}
}

func TestThemis_WithSpareGPUsTheBottleneckRunsFullyAndTheRestSitInside(t *testing.T) {
	// On 8 GPUs job 0 (old) bounds the ratio at x = 1; job 1 is free
	// within [x_min, 1] and gets the centre of that interval.
	s := optSnap(8, 5000, optJob{w: 1, theta: 1, rem: 1000, arrival: 0}, optJob{w: 2, theta: 1, rem: 1000, arrival: 4990})
	x, _ := NewThemis().Allocate(s)
	if x[0] != 1 || !(x[1] > 0 && x[1] < 1) {
		t.Fatalf("x = %v", x)
	}
	if themisRatio(s, 1, x[1], 0) > themisRatio(s, 0, 1, 0) {
		t.Fatalf("job 1's ratio exceeds the optimum")
	}
}

func TestThemis_AccumulatesIsolatedTimeOfProgressBetweenCalls(t *testing.T) {
	th := NewThemis().(*Themis)
	s := optSnap(2, 0, optJob{w: 1, theta: 4, rem: 1000}, optJob{w: 1, theta: 4, rem: 1000}, optJob{w: 1, theta: 4, rem: 1000})
	if _, err := th.Allocate(s); err != nil {
		t.Fatal(err)
	}
	// x̂ = 2/3, isolated rate 8/3: 200 steps = 75 s of isolated time.
	s.Jobs[0].StepsDone = 200
	s.Now = 100
	th.Allocate(s)
	if got := th.cum["0"]; math.Abs(got-75) > 1e-12 {
		t.Fatalf("C_0 = %v, want 75", got)
	}
	th.Forget("0")
	if _, ok := th.cum["0"]; ok {
		t.Fatal("Forget kept C_0")
	}
}

func TestThemis_NonConvexModelFallsBackToIsolatedShares(t *testing.T) {
	th := NewThemis().(*Themis)
	s := optSnap(2, 0, optJob{w: 1, theta: 1, rem: 1000}, optJob{w: 2, theta: 1, rem: 1000}, optJob{w: 1, theta: 1, rem: 1000})
	th.Allocate(s)
	s.Jobs[0].StepsDone = 1100 // overshoot after a rescale (spec §3.5)
	s.Jobs[1].StepsDone = 100
	x, err := th.Allocate(s)
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{2.0 / 3, 1.0 / 3, 2.0 / 3}
	for i := range want {
		if math.Abs(x[i]-want[i]) > 1e-15 {
			t.Fatalf("x = %v, want x̂ = %v", x, want)
		}
	}
	// The failed call did not record its baseline: the next call counts
	// job 1's 100 steps again (isolated rate ⅓ step/s: 300 s each time).
	s.Jobs[0].StepsDone = 900
	th.Allocate(s)
	if got := th.cum["1"]; math.Abs(got-600) > 1e-9 {
		t.Fatalf("C_1 = %v, want 600 (counted twice, as the original)", got)
	}
}

func TestThemis_SpareCapacityPointIsTheCentreOfTheLiftedOptimalFace(t *testing.T) {
	// Stationarity of Σ [2·ln(x − x^min) + ln(1 − x)] + ln(G − Σ w·x) for
	// every job strictly inside its range.
	s := optSnap(8, 5000,
		optJob{w: 1, theta: 1, rem: 1000, arrival: 0}, optJob{w: 2, theta: 1, rem: 1000, arrival: 4990},
		optJob{w: 1, theta: 3, rem: 9000, arrival: 4000}, optJob{w: 4, theta: 2, rem: 500, arrival: 4500})
	x, _ := NewThemis().Allocate(s)
	p := themisProblem{gpus: 8, n: 4}
	for _, j := range s.Jobs {
		rem := float64(j.RemainingSteps())
		iso := j.Throughput * min(1, 2/float64(j.Workers))
		p.add(s.Now-j.SubmitTime, rem, j.Throughput, rem/iso, float64(j.Workers))
	}
	rho := p.floorRatio()
	slack := 8.0
	for i, j := range s.Jobs {
		slack -= float64(j.Workers) * x[i]
	}
	checked := 0
	for i, j := range s.Jobs {
		lo := p.xmin(i, rho)
		if lo >= 1-1e-12 {
			continue
		}
		checked++
		g := 2/(x[i]-lo) - 1/(1-x[i]) - float64(j.Workers)/slack
		if math.Abs(g) > 1e-6 {
			t.Fatalf("job %d: gradient %v at x = %v (x^min %v)", i, g, x[i], lo)
		}
	}
	if checked < 2 || !(slack > 0) {
		t.Fatalf("instance has %d free jobs and slack %v; want a non-unique optimum", checked, slack)
	}
}
