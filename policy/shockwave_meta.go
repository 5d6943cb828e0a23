package policy

import (
	"math"
	"slices"
)

// Constants of the original Shockwave policy (spec §4.9, "fixed constants").
const (
	swReoptRounds      = 8   // REOPT_ROUNDS: forced re-solve period
	swMomentum         = 0.9 // weight of the averaged fair-share target
	swNewest           = 0.1 // weight of the newest estimate
	swCalibrationSlack = 0.4 // relative deviation that triggers calibration
)

// swMeta is the policy's per-job state (spec §4.1).
type swMeta struct {
	epochs  int       // E
	workers int       // w
	planned []int     // P[e], planned batch size per epoch (read-only: may be the Job's)
	pre     []float64 // D^pre[e], preprofiled epoch durations (whole seconds, ≥ 1)
	dur     []float64 // D[e], the calibrated working copy; nil while it is pre (durs)
	dataset int       // S
	epoch   int       // c, completed epochs
	submit  float64
	modes   []int     // sorted distinct planned batch sizes
	alpha   []float64 // Dirichlet prior α_b = E/|M|, by mode index
	// means[k] is modeMean(modes[k]), valid while meansOK; calibrate,
	// the only writer of dur after construction, clears it.
	means   []float64
	meansOK bool
	// remaining's state by mode index: the posterior α + counts and the
	// counts of the first obsN planned epochs (extended as c grows, so
	// the posterior takes the same sum of ones in the same order), and
	// scratch for the expected counts.
	post, n []float64
	cnt     []int
	obsN    int
	// Running sums of dur[:i] for epochSeconds and doneSeconds, extended
	// as the epoch grows; calibrate resets them.
	upTo, done prefix

	targets []swTarget // fair-share finish estimates
	guessed bool       // the targets rest on an uninformed online forecast
}

type swTarget struct {
	round int
	value float64
}

// newSWMeta builds the metadata of a job from its declared schedule, or,
// when it declared none, from a constant schedule at its initial batch size.
func newSWMeta(j *Job, submit float64) *swMeta {
	planned, secs := j.PlannedBatchSizes, j.PlannedEpochSeconds
	if len(planned) == 0 || len(secs) != len(planned) {
		planned, secs = constantSchedule(j)
	}
	// planned shares the declared schedule's array instead of copying it:
	// a snapshot's jobs are read-only to policies, and the Core replaces a
	// job's schedule, never writes into one. At 9,000 jobs of ~1,000
	// epochs a copy is 70 MB.
	m := &swMeta{
		epochs: len(planned), workers: j.Workers, planned: slices.Clip(planned),
		dataset: j.DatasetSize, submit: submit,
	}
	m.pre = make([]float64, len(secs))
	for e, d := range secs {
		m.pre[e] = math.Max(1, math.RoundToEven(d))
	}
	m.modes = distinct(planned)
	m.alpha = make([]float64, len(m.modes))
	for k := range m.modes {
		m.alpha[k] = float64(m.epochs) / float64(len(m.modes))
	}
	m.derive()
	return m
}

// derive sets up the caches kept beside the metadata (the per-mode means,
// remaining's posterior, the running epoch sums) from the metadata alone:
// for a new job, and for one restored from a state snapshot.
func (m *swMeta) derive() {
	m.means, m.meansOK = make([]float64, len(m.modes)), false
	m.post = slices.Clone(m.alpha)
	m.n = make([]float64, len(m.modes))
	m.cnt = make([]int, len(m.modes))
	m.obsN = 0
	m.upTo, m.done = prefix{}, prefix{}
}

// constantSchedule is the profile of a job that declared no schedule: every
// epoch at the initial batch size, at the registered throughput.
func constantSchedule(j *Job) ([]int, []float64) {
	ipe := ceilDiv(int64(j.DatasetSize), int64(j.InitialBatchSize))
	e := int(max(1, ceilDiv(j.TotalSteps, ipe)))
	planned := make([]int, e)
	secs := make([]float64, e)
	thr := j.Throughput
	if thr <= 0 {
		thr = 1
	}
	for i := range planned {
		planned[i] = j.InitialBatchSize
		secs[i] = float64(j.DatasetSize) / float64(j.InitialBatchSize) / thr
	}
	return planned, secs
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// distinct returns the distinct values of xs, sorted, in a slice of their
// own size (a job's schedule has thousands of epochs and a few modes).
func distinct(xs []int) []int {
	var out []int
	for _, x := range xs {
		if len(out) > 0 && out[len(out)-1] == x {
			continue // the common case: a run of epochs at one batch size
		}
		if i, found := slices.BinarySearch(out, x); !found {
			out = slices.Insert(out, i, x)
		}
	}
	return slices.Clip(out)
}

// durs is D, the calibrated epoch durations: pre until calibrate first
// rescales them, so that a job that never needs calibrating keeps one
// copy of its schedule's durations, not two.
func (m *swMeta) durs() []float64 {
	if m.dur == nil {
		return m.pre
	}
	return m.dur
}

// calibrate rescales the working epoch durations when the measured samples
// deviate from the preprofiled ones by more than 40 % (spec §4.2).
func (m *swMeta) calibrate(ms []Measurement, roundSeconds float64) {
	if len(ms) == 0 {
		return
	}
	meas, prev := 0.0, 0
	for _, x := range ms {
		meas += x.Throughput * roundSeconds * float64(x.Round-prev) * float64(x.BatchSize)
		prev = x.Round
	}
	tau := roundSeconds * float64(ms[len(ms)-1].Round)
	acc, pre := 0.0, 0.0
	e := 0
	for ; e < m.epochs; e++ {
		if acc+m.pre[e] > tau {
			break
		}
		acc += m.pre[e]
		pre += float64(m.dataset)
	}
	if e == m.epochs {
		e = m.epochs - 1
	}
	if tau-acc > 0 {
		pre += float64(m.dataset) * (tau - acc) / m.durs()[e]
	}
	if meas <= 0 || pre <= 0 || math.Abs(meas-pre)/pre <= swCalibrationSlack {
		return
	}
	if m.dur == nil {
		m.dur = make([]float64, len(m.pre))
	}
	for i := range m.dur {
		m.dur[i] = m.pre[i] * (pre / meas)
	}
	m.meansOK = false
	m.upTo, m.done = prefix{}, prefix{}
}

// prefix is a running sum of a slice's first n elements.
type prefix struct {
	n   int
	sum float64
}

// of returns Σ d[:n], added left to right: extended from the last call,
// or summed again from 0 when n is smaller.
func (p *prefix) of(d []float64, n int) float64 {
	if n < p.n {
		*p = prefix{}
	}
	for _, v := range d[p.n:n] {
		p.sum += v
	}
	p.n = n
	return p.sum
}

// remaining is the Dirichlet-posterior estimate R̂ of the job's remaining
// run time in seconds, with observed planned epochs 0..p (spec §4.3).
//
// It costs O(|M|) per call, not O(p), and allocates nothing, with the bits
// of the textbook form (α' = α + one per observation; n = E·α'/Σα'; then
// one off n_b per observation of b while n_b ≥ 1): the posterior is kept
// from call to call and extended by the newly observed epochs, one
// increment at a time as before; the observations' decrements are one
// subtraction of min(count, ⌊n_b⌋), since x − 1 is exact for 1 ≤ x < 2^53.
func (m *swMeta) remaining(p int) float64 {
	obs := min(p, m.epochs-1) + 1
	if obs < m.obsN {
		copy(m.post, m.alpha)
		clear(m.cnt)
		m.obsN = 0
	}
	for _, b := range m.planned[m.obsN:obs] {
		k := m.modeIndex(b)
		m.post[k]++
		m.cnt[k]++
	}
	m.obsN = obs
	total := 0.0
	for k := range m.post {
		total += m.post[k]
	}
	n := m.n
	for k := range n {
		n[k] = float64(m.epochs) * m.post[k] / total
		if n[k] >= 1 {
			n[k] -= min(float64(m.cnt[k]), math.Floor(n[k]))
		}
	}
	rem := m.epochs - m.epoch
	sumN := 0.0
	for k := range n {
		sumN += n[k]
	}
	infl := math.Floor(sumN + 1)
	if infl < float64(rem) {
		infl = float64(rem)
	}
	if infl <= 0 || rem <= 0 {
		return 1
	}
	m.cacheMeans()
	est := 0.0
	for k := range n {
		est += n[k] * m.means[k]
	}
	return est * float64(rem) / infl
}

// modeIndex is the index of planned batch size b in m.modes.
func (m *swMeta) modeIndex(b int) int {
	if len(m.modes) <= 8 {
		for k, v := range m.modes {
			if v == b {
				return k
			}
		}
	}
	k, _ := slices.BinarySearch(m.modes, b)
	return k
}

// cacheMeans fills m.means, the mean calibrated duration of the epochs
// planned at each mode, when calibrate has changed the durations.
func (m *swMeta) cacheMeans() {
	if m.meansOK {
		return
	}
	for k, b := range m.modes {
		m.means[k] = m.modeMean(b)
	}
	m.meansOK = true
}

// modeMean is the mean calibrated duration of the epochs planned at b.
func (m *swMeta) modeMean(b int) float64 {
	s, k := 0.0, 0
	dur := m.durs()
	for e, pb := range m.planned {
		if pb == b {
			s += dur[e]
			k++
		}
	}
	if k == 0 {
		return 0
	}
	return s / float64(k)
}

// epochSeconds is the interpolated epoch duration d: the mean calibrated
// duration of epochs 0..c (spec §4.3).
func (m *swMeta) epochSeconds() float64 {
	hi := min(m.epoch, m.epochs-1)
	return m.upTo.of(m.durs(), hi+1) / float64(hi+1)
}

// doneSeconds is Σ_{e<c} D[e].
func (m *swMeta) doneSeconds() float64 {
	return m.done.of(m.durs(), min(m.epoch, m.epochs))
}

// target is the momentum-averaged fair-share finish time F at round r
// (spec §4.4). It allocates nothing: each estimate's weight is computed
// where it is used, the same value in the same order.
func (m *swMeta) target(r int) float64 {
	ts := m.targets
	if len(ts) == 0 {
		return 0
	}
	weight := func(i int) float64 {
		if i+1 < len(ts) {
			return float64(ts[i+1].round - ts[i].round)
		}
		return float64(r - ts[i].round)
	}
	sum := 0.0
	for i := range ts {
		sum += weight(i)
	}
	last := ts[len(ts)-1].value
	if sum == 0 {
		return swMomentum*last + swNewest*last // one estimate of weight 1
	}
	avg := 0.0
	for i := range ts {
		avg += weight(i) / sum * ts[i].value
	}
	return swMomentum*avg + swNewest*last
}
