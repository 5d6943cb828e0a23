package bayes_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/shockwave-sched/shockwave/bayes"
)

// logMarginal is the closed-form log marginal likelihood of data under a
// Normal-Gamma prior (Murphy 2007 eq. 95):
//
//	p(D) = Γ(αn)/Γ(α0) · β0^α0/βn^αn · (κ0/κn)^½ · (2π)^(−n/2).
func logMarginal(p bayes.NormalGamma, xs []float64) float64 {
	q := batchPosterior(p, xs)
	l1, _ := math.Lgamma(q.Alpha)
	l0, _ := math.Lgamma(p.Alpha)
	return l1 - l0 + p.Alpha*math.Log(p.Beta) - q.Alpha*math.Log(q.Beta) +
		0.5*math.Log(p.Kappa/q.Kappa) - float64(len(xs))/2*math.Log(2*math.Pi)
}

// batchPosterior is the closed-form posterior after n observations with
// mean x̄ and scatter S = Σ(x−x̄)² (Murphy 2007 eqs. 86–89): κn = κ0+n,
// μn = (κ0μ0 + n x̄)/κn, αn = α0 + n/2, βn = β0 + S/2 + κ0 n (x̄−μ0)²/(2κn).
func batchPosterior(p bayes.NormalGamma, xs []float64) bayes.NormalGamma {
	n := float64(len(xs))
	mean := 0.0
	for _, x := range xs {
		mean += x
	}
	mean /= n
	s := 0.0
	for _, x := range xs {
		s += (x - mean) * (x - mean)
	}
	kn := p.Kappa + n
	return bayes.NormalGamma{
		Mu:    (p.Kappa*p.Mu + n*mean) / kn,
		Kappa: kn,
		Alpha: p.Alpha + n/2,
		Beta:  p.Beta + s/2 + p.Kappa*n*(mean-p.Mu)*(mean-p.Mu)/(2*kn),
	}
}

func close(a, b, tol float64) bool { return math.Abs(a-b) <= tol*math.Max(1, math.Abs(b)) }

func TestNormalGamma_SequentialUpdatesMatchBatchClosedForm(t *testing.T) {
	p := bayes.NormalGamma{Mu: 0.5, Kappa: 2, Alpha: 3, Beta: 1.5}
	xs := []float64{1.2, -0.3, 0.8, 2.5, 0.1, 0.9, 1.7}
	q := p
	for _, x := range xs {
		q = q.Update(x)
	}
	want := batchPosterior(p, xs)
	for name, g := range map[string][2]float64{
		"mu": {q.Mu, want.Mu}, "kappa": {q.Kappa, want.Kappa}, "alpha": {q.Alpha, want.Alpha}, "beta": {q.Beta, want.Beta},
	} {
		if !close(g[0], g[1], 1e-12) {
			t.Errorf("%s = %.15g, closed form %.15g", name, g[0], g[1])
		}
	}
	// Hand-computed reference for one step from the prior:
	// μ' = (2·0.5+1.2)/3, β' = 1.5 + 2·0.7²/(2·3).
	one := p.Update(1.2)
	if !close(one.Mu, 2.2/3, 1e-15) || !close(one.Beta, 1.5+0.49/3, 1e-15) || one.Alpha != 3.5 || one.Kappa != 3 {
		t.Errorf("one update = %+v", one)
	}
}

func TestNormalGamma_PredictiveIsMarginalLikelihoodRatio(t *testing.T) {
	p := bayes.NormalGamma{Mu: -1, Kappa: 0.5, Alpha: 1.5, Beta: 0.7}
	xs := []float64{-0.8, -1.4, -0.2}
	q := batchPosterior(p, xs)
	for _, x := range []float64{-3, -1, 0, 0.4, 5} {
		got := q.LogPredictive(x)
		want := logMarginal(p, append(xs[:len(xs):len(xs)], x)) - logMarginal(p, xs)
		if !close(got, want, 1e-10) {
			t.Errorf("log predictive at %g = %.12g, marginal-likelihood ratio %.12g", x, got, want)
		}
	}
	// The predictive integrates to 1 (trapezoid on a wide grid).
	s, h := 0.0, 0.001
	for x := -200.0; x <= 200; x += h {
		s += math.Exp(q.LogPredictive(x)) * h
	}
	if !close(s, 1, 2e-3) {
		t.Errorf("predictive integrates to %g", s)
	}
}

func TestDetector_FirstObservationsMatchConjugatePosterior(t *testing.T) {
	prior := bayes.NormalGamma{Mu: 0, Kappa: 0.5, Alpha: 2, Beta: 0.3}
	d := bayes.NewDetector(bayes.DetectorConfig{Hazard: 0.01, MaxRun: 8, Prior: prior, FixedPrior: true})
	// After one observation all mass is at run length 1 with the
	// one-step posterior mean.
	d.Observe(1)
	if p := d.RunLengthProb(1); p != 1 {
		t.Fatalf("P(r=1) = %g after the first observation", p)
	}
	if want := prior.Update(1).Mu; !close(d.Mean(), want, 1e-15) {
		t.Errorf("mean %g, want %g", d.Mean(), want)
	}
	// After a second observation, P(r=1) ∝ H·π_prior(x2), P(r=2) ∝
	// (1−H)·π_1(x2) (Adams & MacKay 2007 eqs. 3–4, new segment credited
	// with x2).
	x2 := 1.3
	d.Observe(x2)
	a := 0.01 * math.Exp(prior.LogPredictive(x2))
	b := 0.99 * math.Exp(prior.Update(1).LogPredictive(x2))
	if !close(d.RunLengthProb(1), a/(a+b), 1e-12) || !close(d.RunLengthProb(2), b/(a+b), 1e-12) {
		t.Errorf("P(r=1) %g P(r=2) %g, want %g %g", d.RunLengthProb(1), d.RunLengthProb(2), a/(a+b), b/(a+b))
	}
}

// TestDetector_PosteriorSumsToOne checks the run-length posterior stays a
// distribution through growth, pruning, saturation at MaxRun and resets.
func TestDetector_PosteriorSumsToOne(t *testing.T) {
	d := bayes.NewDetector(bayes.DetectorConfig{MaxRun: 16})
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 500 {
		x := 2 + 0.05*rng.NormFloat64()
		if i%97 > 60 {
			x += 0.5
		}
		if i%131 == 0 {
			d.KnownChange()
		}
		d.Observe(x)
		s := 0.0
		for r := 0; r <= 16; r++ {
			p := d.RunLengthProb(r)
			if p < 0 || math.IsNaN(p) {
				t.Fatalf("step %d: P(r=%d) = %g", i, r, p)
			}
			s += p
		}
		if math.Abs(s-1) > 1e-12 {
			t.Fatalf("step %d: posterior sums to %.15g", i, s)
		}
	}
}

func TestDetector_KnownChangeStartsNewSegment(t *testing.T) {
	d := bayes.NewDetector(bayes.DetectorConfig{})
	for range 30 {
		d.Observe(3)
	}
	old := d.Mean()
	d.KnownChange()
	if d.RunLength() != 0 || d.RunLengthProb(0) != 1 || d.Observations() != 0 {
		t.Fatalf("after KnownChange: run length %d, P(0) %g", d.RunLength(), d.RunLengthProb(0))
	}
	d.Observe(4)
	if d.RunLength() != 1 || d.ChangeProb() != 0 {
		t.Errorf("first observation of a known segment: run length %d, change prob %g", d.RunLength(), d.ChangeProb())
	}
	// prior centred on the old mean (about 3) with κ0 = 0.01
	if want := (0.01*old + 4) / 1.01; !close(d.Mean(), want, 1e-12) {
		t.Errorf("mean after the known change %g, want %g", d.Mean(), want)
	}
}

// detectionStats runs streams of log-throughput with a shift every 40
// observations (relative size shift, noise sd noise) and reports the mean
// detection delay, the fraction of changes missed within 10 observations,
// and false alarms per 1,000 observations. An alarm is ChangeProb rising
// above 0.5; it is a detection when it comes within 10 observations after
// a true change point.
func detectionStats(t *testing.T, shift, noise float64, seed uint64) (delay, missed, falsePerK float64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	const segLen, segs = 40, 50
	d := bayes.NewDetector(bayes.DetectorConfig{})
	level := math.Log(100.0)
	var delays []float64
	alarms, falseAlarms := 0, 0
	detected := make([]bool, segs)
	above := false
	for i := range segLen * segs {
		if i > 0 && i%segLen == 0 {
			if rng.IntN(2) == 0 {
				level += shift
			} else {
				level -= shift
			}
		}
		p := d.Observe(level + noise*rng.NormFloat64())
		if p > 0.5 && !above {
			alarms++
			seg, k := i/segLen, i%segLen
			if seg > 0 && k < 10 && !detected[seg] {
				detected[seg] = true
				delays = append(delays, float64(k))
			} else {
				falseAlarms++
			}
		}
		above = p > 0.5
	}
	sum := 0.0
	for _, v := range delays {
		sum += v
	}
	return sum / float64(max(1, len(delays))), 1 - float64(len(delays))/float64(segs-1), 1000 * float64(falseAlarms) / float64(segLen*segs)
}

// TestDetector_DetectsShiftsQuicklyWithFewFalseAlarms: with 2 % noise on
// throughput, a 20 % shift is detected at the shifted observation itself
// (delay 0: the first shifted observation already carries the change), a
// 6 % shift within about 1–2 observations, and stationary stretches raise
// almost no alarms.
func TestDetector_DetectsShiftsQuicklyWithFewFalseAlarms(t *testing.T) {
	for _, c := range []struct {
		shift, noise        float64
		maxDelay, maxMiss   float64
		maxFalsePerThousand float64
	}{
		{math.Log(1.2), 0.02, 0.5, 0.02, 2},
		{math.Log(1.06), 0.02, 2.5, 0.10, 2},
		{math.Log(2), 0.05, 0.5, 0.02, 2},
	} {
		delay, miss, fa := detectionStats(t, c.shift, c.noise, 11)
		t.Logf("shift %.0f%%, noise %.0f%%: mean delay %.2f obs, missed %.1f%%, false alarms %.2f per 1000 obs",
			100*(math.Exp(c.shift)-1), 100*c.noise, delay, 100*miss, fa)
		if delay > c.maxDelay || miss > c.maxMiss || fa > c.maxFalsePerThousand {
			t.Errorf("shift %.3f noise %.2f: delay %.2f (max %.2f), missed %.2f (max %.2f), false alarms %.2f/1000 (max %.2f)",
				c.shift, c.noise, delay, c.maxDelay, miss, c.maxMiss, fa, c.maxFalsePerThousand)
		}
	}
}

// TestDetector_StationaryStreamRaisesNoAlarms: 10,000 observations of a
// stationary stream with 3 % noise.
func TestDetector_StationaryStreamRaisesNoAlarms(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	d := bayes.NewDetector(bayes.DetectorConfig{})
	alarms := 0
	above := false
	for range 10000 {
		p := d.Observe(math.Log(50) + 0.03*rng.NormFloat64())
		if p > 0.5 && !above {
			alarms++
		}
		above = p > 0.5
	}
	t.Logf("false alarms on 10,000 stationary observations: %d", alarms)
	if alarms > 10 {
		t.Errorf("%d false alarms on a stationary stream, want at most 10", alarms)
	}
}

func TestDetector_IgnoresNonFinite(t *testing.T) {
	d := bayes.NewDetector(bayes.DetectorConfig{})
	d.Observe(1)
	m := d.Mean()
	d.Observe(math.NaN())
	d.Observe(math.Inf(1))
	if d.Mean() != m || d.Observations() != 1 {
		t.Errorf("non-finite observations changed the detector")
	}
}

func TestDetectorConfig_RejectsBadValues(t *testing.T) {
	for _, c := range []bayes.DetectorConfig{
		{Hazard: 1.5}, {Hazard: -0.1}, {MaxRun: 1}, {Window: -1}, {Prune: 0.5},
		{Prior: bayes.NormalGamma{Mu: math.NaN(), Kappa: 1, Alpha: 1, Beta: 1}},
		{Prior: bayes.NormalGamma{Kappa: 1, Alpha: 1, Beta: -1}},
	} {
		if err := bayes.ValidateDetectorConfig(c); err == nil {
			t.Errorf("config %+v accepted", c)
		}
	}
}

// TestDetector_MatchesExactLogarithms compares the detector (which uses a
// series for log(1+u) on small increments) with a reference recursion
// that calls math.Log everywhere, on a noisy stream with shifts.
func TestDetector_MatchesReferenceImplementation(t *testing.T) {
	cfg := bayes.DefaultDetectorConfig()
	cfg.MaxRun = 500 // no saturation within the stream
	d := bayes.NewDetector(cfg)
	rng := rand.New(rand.NewPCG(8, 8))
	// reference: explicit run-length posterior with NormalGamma values
	type cell struct {
		r int
		w float64
		p bayes.NormalGamma
	}
	ref := []cell{{0, 1, cfg.Prior}}
	mean := func() float64 {
		s := 0.0
		for _, c := range ref {
			s += c.w * c.p.Mu
		}
		return s
	}
	for i := range 300 {
		x := 1 + 0.02*rng.NormFloat64()
		if i >= 150 {
			x += 0.3
		}
		prior := cfg.Prior
		if i > 0 {
			prior.Mu = mean()
		}
		total := 0.0
		for _, c := range ref {
			total += c.w
		}
		next := []cell{{1, total * cfg.Hazard * math.Exp(prior.LogPredictive(x)), prior.Update(x)}}
		for _, c := range ref {
			g := c.w * (1 - cfg.Hazard) * math.Exp(c.p.LogPredictive(x))
			if c.r == 0 { // the empty segment grows into the same posterior
				next[0].w += g
				continue
			}
			next = append(next, cell{c.r + 1, g, c.p.Update(x)})
		}
		z := 0.0
		for _, c := range next {
			z += c.w
		}
		for k := range next {
			next[k].w /= z
		}
		ref = next
		d.Observe(x)
		for _, c := range ref {
			if got := d.RunLengthProb(c.r); math.Abs(got-c.w) > 1e-9 {
				t.Fatalf("step %d: P(r=%d) = %.12g, reference %.12g", i, c.r, got, c.w)
			}
		}
		if math.Abs(d.Mean()-mean()) > 1e-9 {
			t.Fatalf("step %d: mean %.12g, reference %.12g", i, d.Mean(), mean())
		}
	}
}
