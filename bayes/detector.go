package bayes

import (
	"fmt"
	"math"
)

// DetectorConfig parameterises a Detector. The zero value of a field means
// its default (DefaultDetectorConfig).
type DetectorConfig struct {
	// Hazard is H, the prior probability that any observation starts a new
	// segment (a constant hazard, Adams & MacKay 2007 §2.1); in (0, 1).
	Hazard float64
	// MaxRun is the longest run length kept. Longer runs share the last
	// cell, whose posterior forgets at the rate of a run of MaxRun
	// observations (see Observe). At least 2.
	MaxRun int
	// Prior is the Normal-Gamma prior of a new segment's log-throughput.
	// SetPriorMean moves its mean later.
	Prior NormalGamma
	// Window is how far back ChangeProb looks for an unannounced change, in
	// observations; at least 1.
	Window int
	// Prune drops run lengths whose posterior probability falls below it
	// (the rest is renormalised); in [0, 1e-3].
	Prune float64
	// FixedPrior keeps new segments centred on Prior.Mu. By default a new
	// segment's prior is centred on the current posterior mean (Mean), so
	// that a change is judged as a shift from the current level, whatever
	// the level's absolute value.
	FixedPrior bool
}

// DefaultDetectorConfig returns the defaults: H = 1/100, MaxRun 32, a prior
// with mean 0, κ0 = 0.01 (the first observation sets the mean), α0 = 1 and
// β0 = 1e-3 (a noise scale of about 3 % of the throughput), Window 5,
// Prune 1e-12.
func DefaultDetectorConfig() DetectorConfig {
	return DetectorConfig{
		Hazard: 0.01, MaxRun: 32,
		Prior:  NormalGamma{Mu: 0, Kappa: 0.01, Alpha: 1, Beta: 1e-3},
		Window: 5, Prune: 1e-12,
	}
}

// withDefaults fills zero fields and validates the result.
func (c DetectorConfig) withDefaults() (DetectorConfig, error) {
	d := DefaultDetectorConfig()
	if c.Hazard == 0 {
		c.Hazard = d.Hazard
	}
	if c.MaxRun == 0 {
		c.MaxRun = d.MaxRun
	}
	if c.Prior == (NormalGamma{}) {
		c.Prior = d.Prior
	}
	if c.Window == 0 {
		c.Window = d.Window
	}
	if c.Prune == 0 {
		c.Prune = d.Prune
	}
	switch {
	case !(c.Hazard > 0 && c.Hazard < 1):
		return c, fmt.Errorf("bayes: detector hazard %g must be in (0, 1)", c.Hazard)
	case c.MaxRun < 2 || c.MaxRun > 1<<16:
		return c, fmt.Errorf("bayes: detector max run %d must be in [2, 65536]", c.MaxRun)
	case c.Window < 1:
		return c, fmt.Errorf("bayes: detector window %d must be at least 1", c.Window)
	case !(c.Prune >= 0 && c.Prune <= 1e-3):
		return c, fmt.Errorf("bayes: detector prune %g must be in [0, 1e-3]", c.Prune)
	}
	if err := c.Prior.Validate(); err != nil {
		return c, fmt.Errorf("detector prior: %w", err)
	}
	return c, nil
}

// Detector is Bayesian online change-point detection (Adams & MacKay 2007)
// on one stream, with a Normal model of unknown mean and precision per
// segment (Normal-Gamma prior, Student-t predictive) and a constant hazard.
//
// Cell r of the run-length posterior holds the probability that the
// current segment has r observations (r = 0 only right after a start or a
// KnownChange) and the segment's Normal-Gamma posterior. Because κ and α of
// a segment depend only on its length, κ_r = κ0 + r and α_r = α0 + r/2 and
// the Gamma-function terms of the predictive are tabulated once; an
// observation costs one logarithm and one exponential per live cell. The
// tables and the scratch where Observe builds the next posterior can be
// shared between detectors (a Forecaster's are); the posterior's cells
// grow with the longest run held, to MaxRun+1, after which Observe does
// not allocate.
//
// A Detector is not safe for concurrent use.
type Detector struct {
	cfg DetectorConfig
	tab *detTables  // per run length; shared by the detectors of a configuration
	scr *detScratch // the next posterior; shared by detectors used one at a time

	// per cell (posterior), cells 0..hi; the slices hold cap cells,
	// grown as hi grows
	w, mu, beta, logBeta []float64

	hi         int // highest cell that may hold weight
	t          int // observations since the start or the last KnownChange
	changeProb float64
}

// detTables are a configuration's per-run-length constants: κ_r, α_r and
// the Gamma-function terms of the predictive, and the last cell's
// forgetting factor.
type detTables struct {
	kappa, alpha, konst []float64
	capShrink           float64 // α/(α+½) at the last cell, the forgetting factor of β
	logCapShrink        float64
}

// detScratch is where Observe builds the next posterior (and the log
// predictives) before copying it into the detector's cells.
type detScratch struct {
	nw, nmu, nbeta, nlogBeta, lp []float64
}

// NewDetector returns a detector in the "no data yet" state (run length 0
// with probability 1). It panics on an invalid configuration, like gonum's
// constructors; use ValidateDetectorConfig first for user input.
func NewDetector(cfg DetectorConfig) *Detector {
	c, err := cfg.withDefaults()
	if err != nil {
		panic(err)
	}
	return newDetector(c, newDetTables(c), newDetScratch(c))
}

// newDetector returns a detector of configuration c (defaults filled in)
// that shares tab and scr, which must be c's: a Forecaster's detectors
// share one of each, since it uses them one at a time.
func newDetector(c DetectorConfig, tab *detTables, scr *detScratch) *Detector {
	d := &Detector{cfg: c, tab: tab, scr: scr}
	d.grow(1)
	d.reset()
	return d
}

func newDetTables(c DetectorConfig) *detTables {
	n := c.MaxRun + 1
	buf := make([]float64, 3*n)
	t := &detTables{kappa: buf[:n:n], alpha: buf[n : 2*n : 2*n], konst: buf[2*n:]}
	p := c.Prior
	for r := range n {
		k := p.Kappa + float64(r)
		a := p.Alpha + float64(r)/2
		lg1, _ := math.Lgamma(a + 0.5)
		lg2, _ := math.Lgamma(a)
		t.kappa[r], t.alpha[r] = k, a
		t.konst[r] = lg1 - lg2 - 0.5*math.Log(2*math.Pi*(k+1)/k)
	}
	last := t.alpha[n-1]
	t.capShrink = last / (last + 0.5)
	t.logCapShrink = math.Log(t.capShrink)
	return t
}

func newDetScratch(c DetectorConfig) *detScratch {
	n := c.MaxRun + 1
	buf := make([]float64, 5*n)
	take := func() []float64 { s := buf[:n:n]; buf = buf[n:]; return s }
	return &detScratch{nw: take(), nmu: take(), nbeta: take(), nlogBeta: take(), lp: take()}
}

// detShared is what a Forecaster's detectors share: one configuration's
// tables and one scratch.
type detShared struct {
	tab *detTables
	scr *detScratch
}

func newDetShared(c DetectorConfig) detShared {
	c, _ = c.withDefaults() // validated with the forecaster's configuration
	return detShared{newDetTables(c), newDetScratch(c)}
}

// new returns a fresh detector sharing s.
func (s detShared) new(c DetectorConfig) *Detector {
	c, _ = c.withDefaults()
	return newDetector(c, s.tab, s.scr)
}

// grow makes room for cells 0..n−1, keeping the cells held. A detector
// that has seen few observations holds few cells: a job that waits holds
// one.
func (d *Detector) grow(n int) {
	if n <= len(d.w) {
		return
	}
	n = min(max(n, 2*len(d.w)), d.cfg.MaxRun+1)
	buf := make([]float64, 4*n)
	w, mu, beta, logBeta := buf[:n:n], buf[n:2*n:2*n], buf[2*n:3*n:3*n], buf[3*n:]
	copy(w, d.w)
	copy(mu, d.mu)
	copy(beta, d.beta)
	copy(logBeta, d.logBeta)
	d.w, d.mu, d.beta, d.logBeta = w, mu, beta, logBeta
}

// ValidateDetectorConfig reports what is wrong with a configuration (after
// defaults are applied), or nil.
func ValidateDetectorConfig(cfg DetectorConfig) error {
	_, err := cfg.withDefaults()
	return err
}

// Config returns the configuration in use, defaults filled in.
func (d *Detector) Config() DetectorConfig { return d.cfg }

func (d *Detector) reset() {
	clear(d.w[:d.hi+1])
	d.w[0] = 1
	d.mu[0], d.beta[0], d.logBeta[0] = d.cfg.Prior.Mu, d.cfg.Prior.Beta, math.Log(d.cfg.Prior.Beta)
	d.hi, d.t, d.changeProb = 0, 0, 0
}

// KnownChange records a reported change point: the next observation starts
// a new segment, with probability 1 (run length 0). Unless FixedPrior is
// set, the new segment's prior is centred on the old segment's mean (call
// SetPriorMean afterwards to centre it on a better guess).
func (d *Detector) KnownChange() {
	if !d.cfg.FixedPrior && d.t > 0 {
		d.cfg.Prior.Mu = d.Mean()
	}
	d.reset()
}

// SetPriorMean moves the mean of the prior used by new segments (and by the
// empty segment, if the detector is at run length 0).
func (d *Detector) SetPriorMean(mu float64) {
	if math.IsNaN(mu) || math.IsInf(mu, 0) {
		return
	}
	d.cfg.Prior.Mu = mu
	if d.w[0] > 0 {
		d.mu[0] = mu
	}
}

// Observe folds one observation x (log-throughput) into the run-length
// posterior (Adams & MacKay 2007, Algorithm 1, steps 3–7):
//
//	P(r_t = r+1, x_1:t) = P(r_t−1 = r, x_1:t−1) · π_r(x_t) · (1−H)
//	P(r_t = 1,   x_1:t) = Σ_r P(r_t−1 = r, x_1:t−1) · π_prior(x_t) · H
//
// where π_r is the Student-t predictive of a segment of length r. (The new
// segment is credited with x_t, so the change probability is informative
// rather than equal to H.) Runs that would exceed MaxRun stay in the last
// cell: its posterior is updated with β scaled by α/(α+½), so κ and α stay
// those of a MaxRun-long run (an exponential forgetting), and mass arriving
// from the cell below is merged into it by moment matching. Cells below
// Prune are dropped and the rest renormalised. A non-finite x is ignored.
// It returns ChangeProb.
func (d *Detector) Observe(x float64) (changeProb float64) {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return d.changeProb
	}
	n := d.cfg.MaxRun + 1
	hi := d.hi
	tab, sc := d.tab, d.scr
	// Log predictive of x under every live cell, and under the prior.
	p := d.cfg.Prior
	if !d.cfg.FixedPrior && d.t > 0 {
		p.Mu = d.Mean()
	}
	dp := x - p.Mu
	b0 := p.Beta + p.Kappa*dp*dp/(2*(p.Kappa+1))
	lb0 := math.Log(b0)
	lpPrior := tab.konst[0] + p.Alpha*math.Log(p.Beta) - (p.Alpha+0.5)*lb0
	m := lpPrior
	for r := 0; r <= hi; r++ {
		if d.w[r] == 0 {
			continue
		}
		k := tab.kappa[r]
		dr := x - d.mu[r]
		inc := k * dr * dr / (2 * (k + 1))
		nb := d.beta[r] + inc
		var lnb float64
		if u := inc / d.beta[r]; u < 0.03 {
			lnb = d.logBeta[r] + log1pSmall(u)
		} else {
			lnb = math.Log(nb)
		}
		sc.nbeta[r], sc.nlogBeta[r] = nb, lnb // updated β of cell r, stashed
		l := tab.konst[r] + tab.alpha[r]*d.logBeta[r] - (tab.alpha[r]+0.5)*lnb
		sc.lp[r] = l
		if l > m {
			m = l
		}
	}
	// Growth: cell r moves to r+1 (the last cell stays), from the top down
	// so the stashed β of cell r is read before cell r+1 is written.
	newHi := min(hi+1, n-1)
	clear(sc.nw[:newHi+1])
	total := 0.0
	h1 := 1 - d.cfg.Hazard
	for r := hi; r >= 0; r-- {
		wr := d.w[r]
		if wr == 0 {
			continue
		}
		total += wr
		g := wr * h1 * math.Exp(sc.lp[r]-m)
		k := tab.kappa[r]
		mu := d.mu[r] + (x-d.mu[r])/(k+1)
		nb, lnb := sc.nbeta[r], sc.nlogBeta[r]
		to := r + 1
		if r == n-1 {
			to = r
			nb *= tab.capShrink
			lnb += tab.logCapShrink
		}
		if to == n-1 && sc.nw[to] > 0 {
			d.mergeCap(g, mu, nb)
			continue
		}
		sc.nw[to], sc.nmu[to], sc.nbeta[to], sc.nlogBeta[to] = g, mu, nb, lnb
	}
	// Change point: x starts a new segment (cell 1, prior updated with x).
	c := total * d.cfg.Hazard * math.Exp(lpPrior-m)
	mu1 := p.Mu + dp/(p.Kappa+1)
	if sc.nw[1] > 0 { // growth of the empty segment: same posterior
		sc.nw[1] += c
	} else {
		sc.nw[1], sc.nmu[1], sc.nbeta[1], sc.nlogBeta[1] = c, mu1, b0, lb0
	}
	sc.nw[0] = 0
	d.grow(newHi + 1)
	copy(d.w, sc.nw[:newHi+1])
	copy(d.mu, sc.nmu[:newHi+1])
	copy(d.beta, sc.nbeta[:newHi+1])
	copy(d.logBeta, sc.nlogBeta[:newHi+1])
	d.hi = newHi
	d.normalize()
	d.t++
	d.changeProb = d.within(d.cfg.Window)
	return d.changeProb
}

// log1pSmall is log(1+u) for 0 ≤ u < 0.03 by its Taylor series to u⁷
// (truncation error below u⁸/8 < 1e-13), cheaper than math.Log; most
// cells of a settled posterior take this path.
func log1pSmall(u float64) float64 {
	return u * (1 - u*(1.0/2-u*(1.0/3-u*(1.0/4-u*(1.0/5-u*(1.0/6-u*(1.0/7)))))))
}

// mergeCap merges weight g with posterior (mu, beta) into the last cell of
// the scratch buffers, matching the first two moments of the mean and
// pooling the scale (both share κ and α of a MaxRun-long run).
func (d *Detector) mergeCap(g, mu, beta float64) {
	last := d.cfg.MaxRun
	sc := d.scr
	a := sc.nw[last]
	s := a + g
	if s == 0 {
		return
	}
	m1, b1 := sc.nmu[last], sc.nbeta[last]
	dm := m1 - mu
	k := d.tab.kappa[last]
	nb := (a*b1+g*beta)/s + k*a*g*dm*dm/(2*s*s)
	sc.nw[last] = s
	sc.nmu[last] = (a*m1 + g*mu) / s
	sc.nbeta[last] = nb
	sc.nlogBeta[last] = math.Log(nb)
}

// normalize rescales the posterior to sum to 1 and prunes negligible cells.
func (d *Detector) normalize() {
	s := 0.0
	for _, v := range d.w[:d.hi+1] {
		s += v
	}
	if !(s > 0) || math.IsInf(s, 0) { // everything underflowed: restart from the prior
		d.reset()
		return
	}
	inv := 1 / s
	s2 := 0.0
	top := 0
	for r := 0; r <= d.hi; r++ {
		v := d.w[r] * inv
		if v < d.cfg.Prune {
			v = 0
		} else {
			top = r
		}
		d.w[r] = v
		s2 += v
	}
	d.hi = top
	if s2 != 1 {
		inv = 1 / s2
		for r := 0; r <= top; r++ {
			d.w[r] *= inv
		}
	}
}

// within is the probability that the current segment started with one of
// the last k observations after the last known change point: Σ_{1≤r≤min(k,
// t−1)} P(r_t = r). (A segment of length t began at the known change.)
func (d *Detector) within(k int) float64 {
	top := min(k, d.t-1, d.hi)
	s := 0.0
	for r := 1; r <= top; r++ {
		s += d.w[r]
	}
	return s
}

// ChangeProb is the posterior probability that an unannounced change point
// occurred within the last Window observations (since the last known one).
func (d *Detector) ChangeProb() float64 { return d.changeProb }

// ChangeWithin is the posterior probability that the current segment began
// with one of the last k observations, after the last known change point.
func (d *Detector) ChangeWithin(k int) float64 { return d.within(k) }

// RunLength is the MAP run length: the most probable number of
// observations in the current segment (capped at MaxRun).
func (d *Detector) RunLength() int {
	best, arg := -1.0, 0
	for r := 0; r <= d.hi; r++ {
		if d.w[r] > best {
			best, arg = d.w[r], r
		}
	}
	return arg
}

// RunLengthProb is P(r_t = r | x_1:t), 0 outside [0, MaxRun].
func (d *Detector) RunLengthProb(r int) float64 {
	if r < 0 || r > d.hi {
		return 0
	}
	return d.w[r]
}

// Observations is the number of observations since the start or the last
// KnownChange.
func (d *Detector) Observations() int { return d.t }

// Mean is the posterior mean of the current segment's level, averaged over
// the run-length posterior (the prior mean before any observation).
func (d *Detector) Mean() float64 {
	s := 0.0
	for r := 0; r <= d.hi; r++ {
		if d.w[r] > 0 {
			s += d.w[r] * d.mu[r]
		}
	}
	return s
}

// MeanVariance is the posterior variance of the current segment's level:
// the run-length mixture of the segments' posterior variances of μ,
// β/(κ(α−1)), plus the spread of their means. Cells with α ≤ 1 count with
// the prior's predictive scale β(κ+1)/(ακ) instead (their variance is
// infinite).
func (d *Detector) MeanVariance() float64 {
	_, v := d.meanAndVariance()
	return v
}

// meanAndVariance is Mean and MeanVariance, the mean computed once.
func (d *Detector) meanAndVariance() (mean, variance float64) {
	mean = d.Mean()
	s := 0.0
	for r := 0; r <= d.hi; r++ {
		w := d.w[r]
		if w == 0 {
			continue
		}
		k, a := d.tab.kappa[r], d.tab.alpha[r]
		v := d.beta[r] * (k + 1) / (a * k)
		if a > 1 {
			v = d.beta[r] / (k * (a - 1))
		}
		dm := d.mu[r] - mean
		s += w * (v + dm*dm)
	}
	return mean, s
}
