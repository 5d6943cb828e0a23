package pollux

import "math"

// ProfileEntry is one measured configuration of a job: nodes, replicas,
// per-GPU batch size, and the measured step and sync times.
type ProfileEntry struct {
	N, R, A    int
	Step, Sync float64
}

var (
	fitInit = PerfParams{0.1, 0.01, 0.1, 0.01, 0.1, 0.01, 1.001}
	fitLo   = PerfParams{1e-8, 1e-8, 1e-8, 1e-8, 1e-8, 1e-8, 1.0}
)

// fitter holds one fit's data and the map from free parameters to the
// unconstrained coordinates the minimiser works in: x = 1e-8 + e^u for the
// six positive parameters and γ = 1 + 9·σ(u), which keeps γ in its bounds
// [1, 10].
type fitter struct {
	prof  []ProfileEntry
	fixed PerfParams
	free  []int
	x     PerfParams
	g     PerfParams
}

// FitPerfParams fits the step-time model to a job's profile (spec §4.2):
// the RMSE of log accumulation time plus the RMSE of log step time plus the
// priors 1e-3(γ−1)² and 1e-2((β_n/α_n)² + (β_r/α_r)²), with the parameters
// that the data cannot identify held at their initial values. The artifact
// minimises with scipy's L-BFGS-B; this uses BFGS on unconstrained
// coordinates with the analytic gradient, to the same tolerances.
func FitPerfParams(prof []ProfileEntry) PerfParams {
	f := &fitter{prof: prof, fixed: fitInit}
	as, multi, intra, big := map[int]bool{}, false, false, false
	sumAcc := 0.0
	for _, e := range prof {
		as[e.A] = true
		multi = multi || e.N > 1
		intra = intra || e.N == 1 && e.R > 1
		big = big || e.R > 2
		sumAcc += e.Step - e.Sync
	}
	isFixed := [7]bool{}
	if len(as) == 1 {
		f.fixed[pAlphaC] = sumAcc / float64(len(prof)) / 2
		isFixed[pAlphaC] = true
	}
	if !multi {
		f.fixed[pAlphaN], f.fixed[pBetaN] = 1e-8, 1e-8
		isFixed[pAlphaN], isFixed[pBetaN] = true, true
	}
	if !intra {
		f.fixed[pAlphaR], f.fixed[pBetaR] = 1e-8, 1e-8
		isFixed[pAlphaR], isFixed[pBetaR] = true, true
	}
	if !big {
		f.fixed[pBetaN], f.fixed[pBetaR] = 1e-8, 1e-8
		isFixed[pBetaN], isFixed[pBetaR] = true, true
	}
	var u []float64
	for i := 0; i < 7; i++ {
		if isFixed[i] {
			continue
		}
		f.free = append(f.free, i)
		if i == pGamma {
			t := (fitInit[i] - 1) / 9
			u = append(u, math.Log(t/(1-t)))
		} else {
			u = append(u, math.Log(fitInit[i]-fitLo[i]))
		}
	}
	if len(u) > 0 {
		u = bfgs(f.objective, u, 200)
	}
	f.set(u)
	p := f.x
	if !multi {
		p[pAlphaN] = math.Max(p[pAlphaN], 1.1*p[pAlphaR])
		p[pBetaN] = math.Max(p[pBetaN], 1.1*p[pBetaR])
	}
	return p
}

func sigmoid(u float64) float64 { return 1 / (1 + math.Exp(-u)) }

// set maps unconstrained coordinates to parameters.
func (f *fitter) set(u []float64) {
	f.x = f.fixed
	for k, i := range f.free {
		if i == pGamma {
			f.x[i] = 1 + 9*sigmoid(u[k])
		} else {
			f.x[i] = fitLo[i] + math.Exp(u[k])
		}
	}
}

// objective returns the loss at u and writes its gradient to grad.
func (f *fitter) objective(u, grad []float64) float64 {
	f.set(u)
	p := &f.x
	g := p[pGamma]
	var dx PerfParams
	m := float64(len(f.prof))
	var s1, s2 float64
	// First pass: squared errors.
	for _, e := range f.prof {
		acc := p.tAcc(float64(e.A))
		d1 := math.Log(acc) - math.Log(e.Step-e.Sync)
		net := p.tNet(e.N, e.R)
		logO := math.Log(math.Pow(acc, g)+math.Pow(net, g)) / g
		d2 := logO - math.Log(e.Step)
		s1 += d1 * d1
		s2 += d2 * d2
	}
	r1, r2 := math.Sqrt(s1/m), math.Sqrt(s2/m)
	loss := r1 + r2 + 1e-3*(g-1)*(g-1) +
		1e-2*(sq(p[pBetaN]/p[pAlphaN])+sq(p[pBetaR]/p[pAlphaR]))
	// Second pass: gradient.
	for _, e := range f.prof {
		a := float64(e.A)
		acc := p.tAcc(a)
		d1 := math.Log(acc) - math.Log(e.Step-e.Sync)
		net := p.tNet(e.N, e.R)
		ag, ng := math.Pow(acc, g), math.Pow(net, g)
		sum := ag + ng
		logO := math.Log(sum) / g
		d2 := logO - math.Log(e.Step)
		c1, c2 := 0.0, 0.0
		if r1 > 0 {
			c1 = d1 / (m * r1)
		}
		if r2 > 0 {
			c2 = d2 / (m * r2)
		}
		dOdA := ag / acc / sum
		dOdN := ng / net / sum
		dA := c1/acc + c2*dOdA
		dx[pAlphaC] += dA
		dx[pBetaC] += dA * a
		rr := math.Max(float64(e.R-2), 1e-8)
		switch {
		case e.N > 1:
			dx[pAlphaN] += c2 * dOdN
			dx[pBetaN] += c2 * dOdN * rr
		case e.R > 1:
			dx[pAlphaR] += c2 * dOdN
			dx[pBetaR] += c2 * dOdN * rr
		}
		dx[pGamma] += c2 * (-math.Log(sum)/(g*g) + (ag*math.Log(acc)+ng*math.Log(net))/(g*sum))
	}
	dx[pGamma] += 2e-3 * (g - 1)
	dx[pBetaN] += 2e-2 * p[pBetaN] / sq(p[pAlphaN])
	dx[pAlphaN] -= 2e-2 * sq(p[pBetaN]) / (p[pAlphaN] * sq(p[pAlphaN]))
	dx[pBetaR] += 2e-2 * p[pBetaR] / sq(p[pAlphaR])
	dx[pAlphaR] -= 2e-2 * sq(p[pBetaR]) / (p[pAlphaR] * sq(p[pAlphaR]))
	for k, i := range f.free {
		if i == pGamma {
			s := sigmoid(u[k])
			grad[k] = dx[i] * 9 * s * (1 - s)
		} else {
			grad[k] = dx[i] * (p[i] - fitLo[i])
		}
	}
	return loss
}

func sq(x float64) float64 { return x * x }

// bfgs minimises f from x0 with BFGS and a backtracking Armijo line search,
// stopping when the relative decrease falls below scipy L-BFGS-B's default
// (factr 1e7 · machine epsilon) or the gradient below 1e-5.
func bfgs(f func(x, g []float64) float64, x0 []float64, maxIter int) []float64 {
	n := len(x0)
	x := append([]float64(nil), x0...)
	g := make([]float64, n)
	fx := f(x, g)
	h := make([]float64, n*n)
	for i := 0; i < n; i++ {
		h[i*n+i] = 1
	}
	d, xn, gn, sv, yv := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
	for it := 0; it < maxIter; it++ {
		gmax := 0.0
		for i := range g {
			gmax = math.Max(gmax, math.Abs(g[i]))
		}
		if gmax < 1e-5 || math.IsNaN(fx) {
			break
		}
		slope := 0.0
		for i := 0; i < n; i++ {
			d[i] = 0
			for j := 0; j < n; j++ {
				d[i] -= h[i*n+j] * g[j]
			}
			slope += d[i] * g[i]
		}
		if slope >= 0 { // not a descent direction: restart from steepest descent
			for i := range d {
				d[i] = -g[i]
				for j := 0; j < n; j++ {
					h[i*n+j] = 0
				}
				h[i*n+i] = 1
			}
			slope = 0
			for i := range d {
				slope += d[i] * g[i]
			}
		}
		t, fn := 1.0, 0.0
		ok := false
		for ls := 0; ls < 40; ls++ {
			for i := range x {
				xn[i] = x[i] + t*d[i]
			}
			fn = f(xn, gn)
			if fn <= fx+1e-4*t*slope && !math.IsNaN(fn) {
				ok = true
				break
			}
			t /= 2
		}
		if !ok {
			break
		}
		sy := 0.0
		for i := range x {
			sv[i] = xn[i] - x[i]
			yv[i] = gn[i] - g[i]
			sy += sv[i] * yv[i]
		}
		dec := (fx - fn) / math.Max(math.Max(math.Abs(fx), math.Abs(fn)), 1)
		copy(x, xn)
		copy(g, gn)
		fx = fn
		if dec <= 1e7*2.220446049250313e-16 {
			break
		}
		if sy > 1e-12 {
			bfgsUpdate(h, sv, yv, sy, n)
		}
	}
	return x
}

// bfgsUpdate applies the inverse-Hessian update H ← (I−ρsyᵀ)H(I−ρysᵀ)+ρssᵀ.
func bfgsUpdate(h, s, y []float64, sy float64, n int) {
	rho := 1 / sy
	hy := make([]float64, n)
	yhy := 0.0
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			hy[i] += h[i*n+j] * y[j]
		}
		yhy += y[i] * hy[i]
	}
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			h[i*n+j] += -rho*(hy[i]*s[j]+s[i]*hy[j]) + (rho+rho*rho*yhy)*s[i]*s[j]
		}
	}
}
