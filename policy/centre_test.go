package policy

import (
	"math"
	"math/rand/v2"
	"testing"
)

// centreGradient is ∂/∂x_i of the analytic-centre objective.
func centreGradient(vs []centreVar, capacity float64, x []float64) []float64 {
	s := capacity - weighted(vs, x)
	g := make([]float64, len(vs))
	for i, v := range vs {
		for k := 0; k < v.nlo; k++ {
			g[i] += 1 / (x[i] - v.lo[k])
		}
		g[i] -= 1/(v.hi-x[i]) + v.w/s
	}
	return g
}

func TestAnalyticCentre_GradientVanishesOnRandomBoxesWithAKnapsack(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for trial := 0; trial < 500; trial++ {
		n := 1 + rng.IntN(40)
		vs := make([]centreVar, n)
		floor := 0.0
		for i := range vs {
			lo := rng.Float64() * 0.9
			vs[i] = centreVar{lo: [2]float64{0, lo}, nlo: 1 + rng.IntN(2), hi: 1, w: float64(int(1) << rng.IntN(4))}
			if vs[i].nlo == 1 {
				vs[i].lo[0] = lo
			}
			floor += vs[i].w * lo
		}
		capacity := floor + 0.001 + rng.Float64()*float64(n)
		x, ok := analyticCentre(vs, capacity)
		if !ok {
			t.Fatalf("trial %d: no centre found", trial)
		}
		for i, g := range centreGradient(vs, capacity, x) {
			// Scale by the distance to the nearest bound to compare.
			gap := min(x[i]-vs[i].floor(), vs[i].hi-x[i], capacity-weighted(vs, x))
			if math.Abs(g)*gap > 1e-8 {
				t.Fatalf("trial %d: ∂_%d = %v at x = %v", trial, i, g, x[i])
			}
		}
	}
}

func TestAnalyticCentre_OneUnitBoxAndLooseKnapsackSolvesTheCubic(t *testing.T) {
	// max ln x + ln(1−x) + ln(2−x): 1/x − 1/(1−x) − 1/(2−x) = 0, i.e.
	// 3x² − 6x + 2 = 0, x = 1 − 1/√3.
	x, ok := analyticCentre([]centreVar{{nlo: 1, hi: 1, w: 1}}, 2)
	if want := 1 - 1/math.Sqrt(3); !ok || math.Abs(x[0]-want) > 1e-12 {
		t.Fatalf("x = %v, want %v", x, want)
	}
}

func TestAnalyticCentre_ReportsAnEmptyInterior(t *testing.T) {
	if _, ok := analyticCentre([]centreVar{{lo: [2]float64{0.5}, nlo: 1, hi: 1, w: 2}}, 1); ok {
		t.Fatal("Σ w·lo = capacity has no interior")
	}
	if _, ok := analyticCentre([]centreVar{{lo: [2]float64{1}, nlo: 1, hi: 1, w: 1}}, 5); ok {
		t.Fatal("lo = hi has no interior")
	}
}

func TestSplitEvenly_EqualWidthsShareTheRemainderEqually(t *testing.T) {
	x := splitEvenly([]float64{2, 2, 2}, 3)
	for _, v := range x {
		if v != 0.5 {
			t.Fatalf("x = %v, want ½ each", x)
		}
	}
}

func TestSplitEvenly_MixedWidthsGiveTheCentreOfTheTiedFace(t *testing.T) {
	w := []float64{1, 2, 4}
	x := splitEvenly(w, 3)
	sum := 0.0
	for i := range w {
		sum += w[i] * x[i]
	}
	if math.Abs(sum-3) > 1e-12 {
		t.Fatalf("Σ w·x = %v, want 3", sum)
	}
	// Stationarity: (1/x − 1/(1−x))/w is the same multiplier for all.
	mu := (1/x[0] - 1/(1-x[0])) / w[0]
	for i := range w {
		if m := (1/x[i] - 1/(1-x[i])) / w[i]; math.Abs(m-mu) > 1e-9 {
			t.Fatalf("multipliers differ: %v vs %v (x = %v)", m, mu, x)
		}
	}
}
