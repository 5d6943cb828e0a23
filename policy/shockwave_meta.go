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

// swMeta is the policy's per-job state (spec §4.1). The declared schedule
// (planned batch size P[e] and preprofiled duration D^pre[e] per epoch) is
// kept run-length encoded: schedules change batch size a few times in
// thousands of epochs, and a job that declared none has one run. Every
// computation below still visits the epochs one by one where the textbook
// form adds per-epoch values, so that the sums keep their bits.
type swMeta struct {
	epochs  int     // E
	workers int     // w
	segs    []swSeg // P and D^pre, as runs of equal epochs
	// dur is D, the calibrated duration of each run's epochs; nil while
	// it equals D^pre (durs)
	dur     []float64
	dataset int // S
	epoch   int // c, completed epochs
	submit  float64
	modes   []int     // sorted distinct planned batch sizes
	alpha   []float64 // Dirichlet prior α_b = E/|M|, by mode index
	// est holds the profile estimate's caches, allocated when one is
	// first made (the profile mode; in online mode, only explanations of
	// jobs that declared a schedule make one).
	est *swEst
	on  *swOnlineJob // the job's online entry, once looked up (onlineForecast)

	targets []swTarget // fair-share finish estimates
	guessed bool       // the targets rest on an uninformed online forecast

	// at is the job's index in the snapshot of Allocate call stamp
	// (Shockwave.stamp), and ran that call's stamp if the job runs: one
	// map lookup a round finds the job, its index and whether it runs.
	stamp, ran uint64
	at         int
}

// swEst is what the profile estimate keeps between calls, rebuilt from the
// metadata alone.
type swEst struct {
	// means[k] is modeMean(k), valid while meansOK; calibrate, the only
	// writer of dur after construction, clears it.
	means   []float64
	meansOK bool
	// remaining's state by mode index: the posterior α + counts and the
	// counts of the first obsN planned epochs (extended as c grows, so
	// the posterior takes the same sum of ones in the same order), and
	// scratch for the expected counts.
	post, n []float64
	cnt     []int
	obsN    int
	// Running sums of D[:i] for epochSeconds and doneSeconds, extended
	// as the epoch grows; calibrate resets them.
	upTo, done prefix
}

// caches returns the estimate's caches, allocating them at the first call.
func (m *swMeta) caches() *swEst {
	if m.est == nil {
		m.est = &swEst{
			means: make([]float64, len(m.modes)), post: slices.Clone(m.alpha),
			n: make([]float64, len(m.modes)), cnt: make([]int, len(m.modes)),
		}
	}
	return m.est
}

// swSeg is a run of epochs [previous run's end, end) planned at batch size
// modes[mode], each with the preprofiled duration pre.
type swSeg struct {
	end, mode int32
	pre       float64
}

type swTarget struct {
	round int
	value float64
}

// newSWMeta builds the metadata of a job from its declared schedule, or,
// when it declared none, from a constant schedule at its initial batch size.
func newSWMeta(j *Job, submit float64) *swMeta {
	m := &swMeta{workers: j.Workers, dataset: j.DatasetSize, submit: submit}
	planned, secs := j.PlannedBatchSizes, j.PlannedEpochSeconds
	if len(planned) == 0 || len(secs) != len(planned) {
		bs, e, d := constantSchedule(j)
		m.epochs, m.modes = e, []int{bs}
		m.segs = []swSeg{{end: int32(e), pre: math.Max(1, math.RoundToEven(d))}}
	} else {
		m.epochs, m.modes = len(planned), distinct(planned)
		m.segs = encodeSchedule(planned, secs, m.modes)
	}
	m.alpha = make([]float64, len(m.modes))
	for k := range m.modes {
		m.alpha[k] = float64(m.epochs) / float64(len(m.modes))
	}
	m.derive()
	return m
}

// encodeSchedule is the run-length encoding of a declared schedule whose
// distinct batch sizes are modes: a run ends where the batch size or the
// rounded duration changes.
func encodeSchedule(planned []int, secs []float64, modes []int) []swSeg {
	var segs []swSeg
	for e, b := range planned {
		k, _ := slices.BinarySearch(modes, b)
		d := math.Max(1, math.RoundToEven(secs[e]))
		if n := len(segs); n > 0 && int(segs[n-1].mode) == k && math.Float64bits(segs[n-1].pre) == math.Float64bits(d) {
			segs[n-1].end++
			continue
		}
		segs = append(segs, swSeg{end: int32(e + 1), mode: int32(k), pre: d})
	}
	return slices.Clip(segs)
}

// derive resets the caches kept beside the metadata (the per-mode means,
// remaining's posterior, the running epoch sums), which are rebuilt from
// the metadata alone: for a new job, and for one restored from a state
// snapshot.
func (m *swMeta) derive() { m.est, m.on = nil, nil }

// constantSchedule is the profile of a job that declared no schedule: its
// epochs all at the initial batch size, each of the seconds the registered
// throughput gives.
func constantSchedule(j *Job) (bs, epochs int, secs float64) {
	ipe := ceilDiv(int64(j.DatasetSize), int64(j.InitialBatchSize))
	e := int(max(1, ceilDiv(j.TotalSteps, ipe)))
	thr := j.Throughput
	if thr <= 0 {
		thr = 1
	}
	return j.InitialBatchSize, e, float64(j.DatasetSize) / float64(j.InitialBatchSize) / thr
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

// durOf is D of run s.
func (m *swMeta) durOf(s int) float64 {
	if m.dur == nil {
		return m.segs[s].pre
	}
	return m.dur[s]
}

// segOf is the index of the run holding epoch e (0 ≤ e < E).
func (m *swMeta) segOf(e int) int {
	s, _ := slices.BinarySearchFunc(m.segs, e, func(x swSeg, e int) int {
		if int(x.end) <= e {
			return -1
		}
		return 1
	})
	return s
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
	e, s := 0, 0
	for ; e < m.epochs; e++ {
		for int(m.segs[s].end) <= e {
			s++
		}
		if acc+m.segs[s].pre > tau {
			break
		}
		acc += m.segs[s].pre
		pre += float64(m.dataset)
	}
	if e == m.epochs {
		e, s = m.epochs-1, len(m.segs)-1
	}
	if tau-acc > 0 {
		pre += float64(m.dataset) * (tau - acc) / m.durOf(s)
	}
	if meas <= 0 || pre <= 0 || math.Abs(meas-pre)/pre <= swCalibrationSlack {
		return
	}
	if m.dur == nil {
		m.dur = make([]float64, len(m.segs))
	}
	for i := range m.dur {
		m.dur[i] = m.segs[i].pre * (pre / meas)
	}
	if m.est != nil {
		m.est.meansOK = false
		m.est.upTo, m.est.done = prefix{}, prefix{}
	}
}

// prefix is a running sum of D over the first n epochs.
type prefix struct {
	n   int
	sum float64
}

// of returns Σ D[:n], added epoch by epoch from the left: extended from
// the last call, or summed again from 0 when n is smaller.
func (p *prefix) of(m *swMeta, n int) float64 {
	if n < p.n {
		*p = prefix{}
	}
	if p.n < n {
		s := m.segOf(p.n)
		for e := p.n; e < n; e++ {
			for int(m.segs[s].end) <= e {
				s++
			}
			p.sum += m.durOf(s)
		}
	}
	p.n = n
	return p.sum
}

// remaining is the Dirichlet-posterior estimate R̂ of the job's remaining
// run time in seconds, with observed planned epochs 0..p (spec §4.3).
//
// It costs O(|M|) per call, not O(p), with the bits of the textbook form
// (α' = α + one per observation; n = E·α'/Σα'; then one off n_b per
// observation of b while n_b ≥ 1): the posterior is kept from call to call
// and extended by the newly observed epochs, one increment at a time as
// before; the observations' decrements are one subtraction of
// min(count, ⌊n_b⌋), since x − 1 is exact for 1 ≤ x < 2^53.
func (m *swMeta) remaining(p int) float64 {
	c := m.caches()
	obs := min(p, m.epochs-1) + 1
	if obs < c.obsN {
		copy(c.post, m.alpha)
		clear(c.cnt)
		c.obsN = 0
	}
	if c.obsN < obs {
		s := m.segOf(c.obsN)
		for e := c.obsN; e < obs; e++ {
			for int(m.segs[s].end) <= e {
				s++
			}
			k := m.segs[s].mode
			c.post[k]++
			c.cnt[k]++
		}
	}
	c.obsN = obs
	total := 0.0
	for k := range c.post {
		total += c.post[k]
	}
	n := c.n
	for k := range n {
		n[k] = float64(m.epochs) * c.post[k] / total
		if n[k] >= 1 {
			n[k] -= min(float64(c.cnt[k]), math.Floor(n[k]))
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
		est += n[k] * c.means[k]
	}
	return est * float64(rem) / infl
}

// cacheMeans fills m.means, the mean calibrated duration of the epochs
// planned at each mode, when calibrate has changed the durations.
func (m *swMeta) cacheMeans() {
	c := m.caches()
	if c.meansOK {
		return
	}
	for k := range m.modes {
		c.means[k] = m.modeMean(k)
	}
	c.meansOK = true
}

// modeMean is the mean calibrated duration of the epochs planned at
// modes[k], their durations added in epoch order.
func (m *swMeta) modeMean(k int) float64 {
	sum, n, start := 0.0, 0, 0
	for i, sg := range m.segs {
		if int(sg.mode) == k {
			d := m.durOf(i)
			for range int(sg.end) - start {
				sum += d
			}
			n += int(sg.end) - start
		}
		start = int(sg.end)
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// epochSeconds is the interpolated epoch duration d: the mean calibrated
// duration of epochs 0..c (spec §4.3).
func (m *swMeta) epochSeconds() float64 {
	hi := min(m.epoch, m.epochs-1)
	return m.caches().upTo.of(m, hi+1) / float64(hi+1)
}

// doneSeconds is Σ_{e<c} D[e].
func (m *swMeta) doneSeconds() float64 {
	return m.caches().done.of(m, min(m.epoch, m.epochs))
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
