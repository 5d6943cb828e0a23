package bayes

import (
	"math"
	"slices"
)

// Band calibration. The P10–P90 band of Forecast comes from a log-normal
// matched to the model's mean and variance; whether it holds the truth 80 %
// of the time depends on how well the model's uncertainty matches the
// workload's, which no prior knows (on deterministic traces it is too
// wide, under throughput noise about right). So the forecaster calibrates
// it online, split-conformal style, from the jobs that completed: at fixed
// fractions of each job's progress it keeps the raw band (mean m, P10,
// P90) and its execution seconds so far; when the job completes, each kept
// band meets the truth T (the execution seconds it really still needed)
// and yields the score
//
//	s = ln(T/m) / ln(P90/m)  if T ≥ m,   s = ln(m/T) / ln(m/P10)  otherwise,
//
// the factor by which the band's half-width in log space must be scaled to
// reach T. With the scores of the last calWindow points, the band becomes
// m·(P10/m)^c … m·(P90/m)^c, c the 80th percentile of the scores: the
// share of past truths that the scaled band would have held is 80 %. Until
// calMin scores exist, c = 1. Only completed jobs teach (a cancelled job
// has no truth), and nothing but the job's own events is read.
const (
	calWindow = 512 // scores kept (the newest)
	calMin    = 20  // scores needed before the band is scaled
	calLevel  = 0.8 // the nominal coverage of [P10, P90]
	// calScoreMax caps each score. Jobs report their own execution
	// seconds, so a tenant's jobs can make their truths anything: 40 jobs
	// that claimed 10^9 s at their end once set the factor to 3,605 for
	// every model's bands (a P90 20 % above its mean then overflows to
	// +Inf, and the market refuses the problem). A band that must widen
	// eightfold in log space to hold the truth says nothing anyway.
	calScoreMax = 8
)

// calMarks are the progress fractions at which a job's raw band is kept.
var calMarks = [...]float64{0.1, 0.25, 0.5, 0.75, 0.9}

// calPoint is one kept band: execution seconds at the mark, the raw mean
// and the raw band of the remaining time.
type calPoint struct {
	exec, mean, p10, p90 float64
}

// calibrator holds the newest scores in a ring and their percentile.
type calibrator struct {
	scores []float64
	next   int
	scale  float64 // c; 1 until calMin scores exist
}

// sample keeps the job's raw band when its progress crossed the next mark.
func (f *Forecaster) sample(j *job) {
	if j.ncal >= len(calMarks) || j.total <= 0 || float64(j.steps) < calMarks[j.ncal]*float64(j.total) {
		return
	}
	fc, err := f.forecastRaw(j)
	if err != nil || fc.Uninformed || !(fc.Remaining.Mean > 0) {
		j.ncal++ // nothing usable at this mark
		return
	}
	for j.ncal < len(calMarks) && float64(j.steps) >= calMarks[j.ncal]*float64(j.total) {
		j.cal[j.ncal] = calPoint{exec: j.exec, mean: fc.Remaining.Mean, p10: fc.Remaining.P10, p90: fc.Remaining.P90}
		j.ncal++
	}
}

// learnBand scores a completed job's kept bands against the truth.
func (f *Forecaster) learnBand(j *job) {
	c := &f.cal
	for _, p := range j.cal[:j.ncal] {
		t := j.exec - p.exec
		if p.mean <= 0 || t <= 0 {
			continue
		}
		var s float64
		switch {
		case t >= p.mean && p.p90 > p.mean:
			s = math.Log(t/p.mean) / math.Log(p.p90/p.mean)
		case t < p.mean && p.p10 > 0 && p.p10 < p.mean:
			s = math.Log(p.mean/t) / math.Log(p.mean/p.p10)
		default:
			continue
		}
		s = min(s, calScoreMax)
		if len(c.scores) < calWindow {
			c.scores = append(c.scores, s)
		} else {
			c.scores[c.next] = s
			c.next = (c.next + 1) % calWindow
		}
	}
	c.scale = 1
	if len(c.scores) >= calMin {
		sorted := slices.Sorted(slices.Values(c.scores))
		c.scale = sorted[int(math.Ceil(calLevel*float64(len(sorted))))-1]
	}
}

// calibrate scales a raw band around its mean by the learned factor.
func (c *calibrator) calibrate(d Dist) Dist {
	if c.scale == 0 || c.scale == 1 || !(d.Mean > 0) {
		return d
	}
	raw := d
	if d.P10 > 0 && d.P10 < d.Mean {
		d.P10 = d.Mean * math.Pow(d.P10/d.Mean, c.scale)
	}
	if d.P90 > d.Mean {
		d.P90 = d.Mean * math.Pow(d.P90/d.Mean, c.scale)
	}
	if math.IsInf(d.P90, 0) || math.IsNaN(d.P90) || math.IsNaN(d.P10) {
		return raw // past float64 even at a capped factor: the raw band
	}
	return d
}

// BandScale is the factor the forecaster currently applies to the
// log-space half-widths of its P10–P90 bands (1 until calibrated).
func (f *Forecaster) BandScale() float64 {
	if f.cal.scale == 0 {
		return 1
	}
	return f.cal.scale
}
