package policy

import "math"

// The LP baselines of the original were solved by an interior-point method
// (ECOS), which returns, on a non-unique optimal face or for a pure
// feasibility problem, approximately the analytic centre of that set: the
// point that maximizes the sum of the logarithms of the constraint slacks
// (spec §5.1, §5.5, §5.6). The helpers below compute such centres for the
// sets that occur here: boxes with one knapsack constraint Σ w_i·x_i ≤ S.

// centreVar is one coordinate of an analytic-centre problem: its barrier
// terms are ln(x − lo[k]) for k < nlo and ln(hi − x); w is its weight in
// the knapsack.
type centreVar struct {
	lo  [2]float64
	nlo int
	hi  float64
	w   float64
}

// floor is the largest lower bound.
func (v *centreVar) floor() float64 {
	f := v.lo[0]
	if v.nlo > 1 {
		f = max(f, v.lo[1])
	}
	return f
}

// analyticCentre maximizes
//
//	Σ_i [Σ_k ln(x_i − lo_ik) + ln(hi_i − x_i)] + ln(S − Σ_i w_i·x_i)
//
// by damped Newton steps (the function is self-concordant; the Hessian is
// diagonal plus rank one, so each step costs O(n)). It reports false when
// the set has no interior point.
func analyticCentre(vs []centreVar, capacity float64) ([]float64, bool) {
	x, ok := centreStart(vs, capacity)
	if !ok {
		return nil, false
	}
	n := len(vs)
	g, d, step := make([]float64, n), make([]float64, n), make([]float64, n)
	for iter := 0; iter < 500; iter++ {
		s := capacity - weighted(vs, x)
		var dg, dw float64
		for i := range vs {
			v := &vs[i]
			a, h := 0.0, 0.0
			for k := 0; k < v.nlo; k++ {
				r := 1 / (x[i] - v.lo[k])
				a += r
				h += r * r
			}
			b := 1 / (v.hi - x[i])
			g[i] = a - b - v.w/s
			d[i] = h + b*b
			dg += v.w * g[i] / d[i]
			dw += v.w * v.w / d[i]
		}
		coef := dg / (s*s + dw)
		dec := 0.0
		for i := range vs {
			step[i] = (g[i] - vs[i].w*coef) / d[i]
			dec += g[i] * step[i]
		}
		if !(dec > 1e-26) {
			break
		}
		t := 1.0
		if dec > 1.0/16 {
			t = 1 / (1 + math.Sqrt(dec))
		}
		if !centreMove(vs, capacity, x, step, t) {
			break
		}
	}
	return x, true
}

// centreStart is a strictly feasible point: each coordinate at the same
// fraction (at most ½) of the way from its floor to its ceiling.
func centreStart(vs []centreVar, capacity float64) ([]float64, bool) {
	base, span := 0.0, 0.0
	for i := range vs {
		f := vs[i].floor()
		if !(f < vs[i].hi) {
			return nil, false
		}
		base += vs[i].w * f
		span += vs[i].w * (vs[i].hi - f)
	}
	slack := capacity - base
	if !(slack > 0) {
		return nil, false
	}
	t := 0.5
	if span > 0 {
		t = min(t, 0.5*slack/span)
	}
	x := make([]float64, len(vs))
	for i := range vs {
		f := vs[i].floor()
		x[i] = f + t*(vs[i].hi-f)
	}
	return x, true
}

// centreMove sets x += t·step, halving t until the point stays strictly
// inside; it reports false if no move is possible.
func centreMove(vs []centreVar, capacity float64, x, step []float64, t float64) bool {
	for ; t > 1e-12; t /= 2 {
		ok := capacity-weightedStep(vs, x, step, t) > 0
		for i := range vs {
			if !ok {
				break
			}
			y := x[i] + t*step[i]
			ok = y < vs[i].hi && y > vs[i].floor()
		}
		if ok {
			for i := range x {
				x[i] += t * step[i]
			}
			return true
		}
	}
	return false
}

func weighted(vs []centreVar, x []float64) float64 {
	s := 0.0
	for i := range vs {
		s += vs[i].w * x[i]
	}
	return s
}

func weightedStep(vs []centreVar, x, step []float64, t float64) float64 {
	s := 0.0
	for i := range vs {
		s += vs[i].w * (x[i] + t*step[i])
	}
	return s
}

// splitEvenly returns the analytic centre of {0 ≤ x ≤ 1, Σ w_i·x_i = r}
// (0 < r < Σ w_i): the point an interior-point method returns when jobs
// tie on the optimal face. With equal weights it is x_i = r/(k·w).
func splitEvenly(w []float64, r float64) []float64 {
	x := make([]float64, len(w))
	equal := true
	for _, wi := range w {
		equal = equal && wi == w[0]
	}
	if equal {
		for i := range x {
			x[i] = r / (float64(len(w)) * w[0])
		}
		return x
	}
	// Stationarity: 1/x_i − 1/(1−x_i) = μ·w_i; Σ w_i·x_i(μ) falls with μ.
	fill := func(mu float64) float64 {
		s := 0.0
		for i, wi := range w {
			x[i] = boxCentre(mu * wi)
			s += wi * x[i]
		}
		return s
	}
	lo, hi := -1.0, 1.0
	for fill(lo) < r {
		lo *= 2
	}
	for fill(hi) > r {
		hi *= 2
	}
	for k := 0; k < 200; k++ {
		mid := lo + (hi-lo)/2
		if mid == lo || mid == hi {
			break
		}
		if fill(mid) > r {
			lo = mid
		} else {
			hi = mid
		}
	}
	fill(lo + (hi-lo)/2)
	return x
}

// boxCentre solves 1/x − 1/(1−x) = c on (0, 1).
func boxCentre(c float64) float64 {
	if c < 0 {
		return 1 - boxCentre(-c)
	}
	return 2 / ((c + 2) + math.Sqrt(c*c+4))
}
