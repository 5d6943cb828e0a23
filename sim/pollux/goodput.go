package pollux

import "math"

// PerfParams is the AdaptDL agent's step-time model (spec §4.1):
// α_c, β_c (accumulation), α_n, β_n (inter-node sync), α_r, β_r (intra-node
// sync) and γ (the overlap exponent).
type PerfParams [7]float64

const (
	pAlphaC = iota
	pBetaC
	pAlphaN
	pBetaN
	pAlphaR
	pBetaR
	pGamma
)

func (p *PerfParams) tAcc(a float64) float64 { return p[pAlphaC] + p[pBetaC]*a }

func (p *PerfParams) tNet(n, r int) float64 {
	switch {
	case n > 1:
		return p[pAlphaN] + p[pBetaN]*math.Max(float64(r-2), 1e-8)
	case r > 1:
		return p[pAlphaR] + p[pBetaR]*math.Max(float64(r-2), 1e-8)
	}
	return 1e-8 + 1e-8*1e-8
}

// StepTime is the modelled seconds per optimiser step with s accumulation
// steps: s·T_acc + (T_acc^γ + T_net^γ)^(1/γ).
func (p *PerfParams) StepTime(n, r int, a float64, s int) float64 {
	acc := p.tAcc(a)
	g := p[pGamma]
	opt := math.Exp(math.Log(math.Pow(acc, g)+math.Pow(p.tNet(n, r), g)) / g)
	return float64(s)*acc + opt
}

// GradParams are the latest gradient statistics (|E g|², variance term).
type GradParams struct{ Sqr, Var float64 }

// Goodput is the agent's goodput function of one job (spec §4.3).
type Goodput struct {
	Perf     PerfParams
	Grad     GradParams
	InitBsz  int
	MaxBsz   int
	MinLocal int
	MaxLocal int
}

// Efficiency is the statistical efficiency of global batch size b.
func (g *Goodput) Efficiency(b float64) float64 {
	scale := b / float64(g.InitBsz)
	den := g.Grad.Var/scale + g.Grad.Sqr
	gain := 1.0
	if den > 0 {
		gain = (g.Grad.Var + g.Grad.Sqr) / den
	}
	return gain / scale
}

// Eval is the goodput at (n, r, a, s), init-bsz samples per second.
func (g *Goodput) Eval(n, r, a, s int) float64 {
	b := float64(r * a * (s + 1))
	return b / g.Perf.StepTime(n, r, float64(a), s) * g.Efficiency(b)
}

// Optimize returns the best goodput on n nodes and r replicas over 50
// global batch sizes spaced geometrically from max(init_bsz, min_local·r)
// to max_bsz, with accumulation, and its (a, s); the first maximum wins.
func (g *Goodput) Optimize(n, r int) (best float64, a, s int) {
	bmin := math.Max(float64(g.InitBsz), float64(g.MinLocal*r))
	bmax := float64(g.MaxBsz)
	l0, l1 := math.Log10(bmin), math.Log10(bmax)
	for i := 0; i < 50; i++ {
		var b float64
		switch i {
		case 0:
			b = bmin
		case 49:
			b = bmax
		default:
			b = math.Pow(10, l0+float64(i)*(l1-l0)/49)
		}
		local := b / float64(r)
		ss := int(math.Ceil(local/float64(g.MaxLocal)-eps)) - 1
		if r == 1 && local > float64(g.InitBsz)+eps {
			ss = max(ss, 1)
		}
		aa := int(math.Ceil(local/float64(ss+1) - eps))
		v := 0.0
		if aa >= g.MinLocal && aa <= g.MaxLocal {
			v = g.Eval(n, r, aa, ss)
		}
		if i == 0 || v > best {
			best, a, s = v, aa, ss
		}
	}
	return best, a, s
}
