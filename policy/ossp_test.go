package policy

import (
	"math"
	"testing"
)

func TestMinTotalDuration_HorizonSearchStopsWithin5PercentOfTheThreshold(t *testing.T) {
	// One job, 1000 steps at 1 step/s on 1 GPU: feasible iff T ≥ 1000.
	p := newOSSPProblem(optSnap(1, 0, optJob{w: 1, theta: 1, rem: 1000}))
	T, ok := p.searchHorizon()
	if !ok || T < 1000 || T > 1050 {
		t.Fatalf("T = %v (%v), want in [1000, 1050]", T, ok)
	}
	// The original's bisection from [100, 1e6] halves until 1.05·min ≥
	// max; replay it to check T is the last feasible midpoint.
	lo, hi, last := 100.0, 1e6, 0.0
	for 1.05*lo < hi {
		mid := (lo + hi) / 2
		if mid >= 1000 {
			hi, last = mid, mid
		} else {
			lo = mid
		}
	}
	if T != last {
		t.Fatalf("T = %v, the original's search ends at %v", T, last)
	}
}

func TestMinTotalDuration_WidensTheRangeWhenNoHorizonUpToAMillionFits(t *testing.T) {
	p := newOSSPProblem(optSnap(1, 0, optJob{w: 1, theta: 1, rem: 5_000_000}))
	T, ok := p.searchHorizon()
	if !ok || T < 5e6 || T > 5.25e6 {
		t.Fatalf("T = %v (%v), want in [5e6, 5.25e6]", T, ok)
	}
}

func TestMinTotalDuration_ReturnsAnInteriorPointThatMeetsTheHorizon(t *testing.T) {
	s := optSnap(4, 0,
		optJob{w: 1, theta: 2, rem: 4000}, optJob{w: 2, theta: 1, rem: 500}, optJob{w: 1, theta: 10, rem: 90000},
		optJob{w: 4, theta: 40, rem: 1000}, optJob{w: 1, theta: 3, rem: 0})
	x, err := NewMinTotalDuration().Allocate(s)
	if err != nil {
		t.Fatal(err)
	}
	T, _ := newOSSPProblem(s).searchHorizon()
	used := 0.0
	for i, j := range s.Jobs {
		if !(x[i] > 0 && x[i] < 1) || j.Throughput*x[i] < float64(j.RemainingSteps())/T {
			t.Fatalf("job %d: x = %v misses horizon %v", i, x[i], T)
		}
		used += float64(j.Workers) * x[i]
	}
	if !(used < 4) {
		t.Fatalf("Σ w·x = %v, the centre leaves slack", used)
	}
}

func TestMinTotalDuration_CentreOfASingleJob(t *testing.T) {
	// G = 2, w = 1, rem/(θT) = l: maximize ln x + ln(x − l) + ln(1 − x) +
	// ln(2 − x); check the stationarity condition at the returned point.
	s := optSnap(2, 0, optJob{w: 1, theta: 1, rem: 1000})
	x, _ := NewMinTotalDuration().Allocate(s)
	T, _ := newOSSPProblem(s).searchHorizon()
	l := 1000 / T
	g := 1/x[0] + 1/(x[0]-l) - 1/(1-x[0]) - 1/(2-x[0])
	if math.Abs(g) > 1e-6 {
		t.Fatalf("gradient %v at x = %v (l = %v)", g, x[0], l)
	}
}

func TestMinTotalDuration_JobsWithoutThroughputGetNothing(t *testing.T) {
	x, err := NewMinTotalDuration().Allocate(optSnap(2, 0, optJob{w: 1, theta: 0, rem: 10}, optJob{w: 1, theta: 1, rem: 10}))
	if err != nil || x[0] != 0 || !(x[1] > 0) {
		t.Fatalf("x = %v, err %v", x, err)
	}
}
