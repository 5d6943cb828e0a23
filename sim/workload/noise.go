package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Noise makes the workload model stochastic: how a real job deviates from
// its recipe. The zero value is the deterministic model of the original
// (spec §2.5): every job of a recipe switches batch size at the same
// epochs and runs at the table's throughput. Draws are seeded: the same
// Noise and trace give the same realizations, whatever the policy, because
// each job draws from its own streams keyed by (Seed, job id).
type Noise struct {
	Seed uint64
	// ScheduleJitter shifts each switch point of a job's batch-size
	// schedule by its own uniform draw in [−J, J] epochs (so accordion
	// regime lengths vary too), keeping the switches in order.
	ScheduleJitter int
	// ThroughputNoise is σ of a per-job log-normal speed factor exp(σ·z)
	// applied to every throughput of the job (its hardware, input pipeline
	// and neighbours, fixed for its lifetime).
	ThroughputNoise float64
	// RoundNoise is σ of a per-micro-task log-normal factor on the speed
	// of one round's work (interference); the SDK measures what happened.
	RoundNoise float64
	// CancelRate is the probability that a job ends early, at a uniformly
	// drawn fraction of its steps: half of them are cancelled by their
	// owner, half crash and fail every later lease until the coordinator
	// ends them (spec §3.5's failure path).
	CancelRate float64
}

// Enabled reports whether any source of noise is on.
func (n Noise) Enabled() bool {
	return n.ScheduleJitter > 0 || n.ThroughputNoise > 0 || n.RoundNoise > 0 || n.CancelRate > 0
}

// Validate checks the ranges: jitter in [0, 1000] epochs, σs in [0, 2],
// the cancel rate in [0, 1].
func (n Noise) Validate() error {
	switch {
	case n.ScheduleJitter < 0 || n.ScheduleJitter > 1000:
		return fmt.Errorf("workload: schedule jitter %d epochs out of range [0, 1000]", n.ScheduleJitter)
	case !(n.ThroughputNoise >= 0 && n.ThroughputNoise <= 2):
		return fmt.Errorf("workload: throughput noise σ %g out of range [0, 2]", n.ThroughputNoise)
	case !(n.RoundNoise >= 0 && n.RoundNoise <= 2):
		return fmt.Errorf("workload: round noise σ %g out of range [0, 2]", n.RoundNoise)
	case !(n.CancelRate >= 0 && n.CancelRate <= 1):
		return fmt.Errorf("workload: cancel rate %g out of range [0, 1]", n.CancelRate)
	}
	return nil
}

// Streams of a job's draws (the PCG's second word is id·8 + stream).
const (
	streamStatic = iota + 1
	streamJitter
	streamRound
)

// Ending is how a job with a drawn early end stops.
type Ending int

// Endings of Realization.
const (
	RunsToEnd Ending = iota // the job completes its work
	Cancelled               // its owner withdraws it
	Crashes                 // it fails every lease from then on
)

// Realization is one job's draws: its speed factor, its schedule warp,
// its early end, and the stream of its per-round factors.
type Realization struct {
	// Speed multiplies every throughput of the job (1 without noise).
	Speed float64
	// EndAt is the fraction of its steps after which the job ends early
	// as End says (0 with End = RunsToEnd).
	EndAt float64
	End   Ending

	shifts     []int // the k-th switch point moves by shifts[k] epochs
	jitter     int
	roundSigma float64
	round      *rand.Rand
}

// Realize draws the realization of job sp. A nil result means the
// deterministic model (no noise configured).
func (n Noise) Realize(sp Spec) *Realization {
	if !n.Enabled() {
		return nil
	}
	id := uint64(sp.ID) * 8
	st := rand.New(rand.NewPCG(n.Seed, id+streamStatic))
	r := &Realization{Speed: 1, jitter: n.ScheduleJitter, roundSigma: n.RoundNoise}
	// Always draw in the same order, so that turning one source on does
	// not change the draws of another.
	z := st.NormFloat64()
	if n.ThroughputNoise > 0 {
		r.Speed = math.Exp(n.ThroughputNoise * z)
	}
	u, at, kind := st.Float64(), st.Float64(), st.Float64()
	if u < n.CancelRate {
		r.EndAt, r.End = 0.02+0.96*at, Cancelled
		if kind < 0.5 {
			r.End = Crashes
		}
	}
	if n.ScheduleJitter > 0 {
		js := rand.New(rand.NewPCG(n.Seed, id+streamJitter))
		r.shifts = make([]int, 64)
		for k := range r.shifts {
			r.shifts[k] = js.IntN(2*n.ScheduleJitter+1) - n.ScheduleJitter
		}
	}
	if n.RoundNoise > 0 {
		r.round = rand.New(rand.NewPCG(n.Seed, id+streamRound))
	}
	return r
}

// RoundFactor draws the speed factor of the job's next micro-task (1
// without round noise).
func (r *Realization) RoundFactor() float64 {
	if r == nil || r.round == nil {
		return 1
	}
	return math.Exp(r.roundSigma * r.round.NormFloat64())
}

func (r *Realization) speed() float64 {
	if r == nil {
		return 1
	}
	return r.Speed
}

// shift is the displacement of the k-th switch point.
func (r *Realization) shift(k int) int {
	if r == nil || len(r.shifts) == 0 {
		return 0
	}
	return r.shifts[k%len(r.shifts)]
}

// warp maps epochs of a jittered schedule to epochs of the nominal one. A
// nominal schedule value(e) changes at points c_0 < c_1 < …; the jittered
// schedule changes at c'_k = c_k + shift(k), kept increasing and ≥ 1, and
// epoch e in [c'_k, c'_{k+1}) behaves like c_k + (e − c'_k), held below
// c_{k+1}: the same regimes in the same order, each moved and stretched or
// shortened.
type warp struct {
	orig, moved []int
}

// newWarp finds the switch points of value over epochs [0, horizon).
func newWarp(r *Realization, horizon int, value func(e int) int) *warp {
	if r == nil || r.jitter == 0 {
		return nil
	}
	w := &warp{}
	prev := value(0)
	for e := 1; e < horizon; e++ {
		v := value(e)
		if v == prev {
			continue
		}
		prev = v
		k := len(w.orig)
		m := max(1, e+r.shift(k))
		if k > 0 {
			m = max(m, w.moved[k-1]+1)
		}
		w.orig, w.moved = append(w.orig, e), append(w.moved, m)
	}
	return w
}

// at maps epoch e of the jittered schedule to the nominal epoch whose
// value it takes.
func (w *warp) at(e int) int {
	if w == nil || len(w.orig) == 0 || e < 0 {
		return e
	}
	k := -1
	for k+1 < len(w.moved) && w.moved[k+1] <= e {
		k++
	}
	if k < 0 {
		return min(e, w.orig[0]-1)
	}
	m := w.orig[k] + (e - w.moved[k])
	if k+1 < len(w.orig) {
		m = min(m, w.orig[k+1]-1)
	}
	return m
}

// RealizedProfile is the profile of the job as it really runs: the
// planned batch sizes (spec §2.3) on the jittered schedule, every epoch at
// the job's speed. Its IsolatedSeconds is the job's own isolated run time,
// the denominator of its finish-time fairness. A nil r gives NewProfile.
func RealizedProfile(sp Spec, thr *Throughputs, r *Realization) (Profile, error) {
	p, err := NewProfile(sp, thr)
	if err != nil || r == nil {
		return p, err
	}
	planned := p.BatchSizes
	w := newWarp(r, p.Epochs, func(e int) int { return planned[e] })
	out := Profile{Epochs: p.Epochs, BatchSizes: make([]int, p.Epochs), EpochSeconds: make([]float64, p.Epochs)}
	for e := range out.BatchSizes {
		k := min(max(w.at(e), 0), p.Epochs-1)
		bs := planned[k]
		out.BatchSizes[e] = bs
		out.EpochSeconds[e] = p.EpochSeconds[k] / r.speed()
		out.IsolatedSeconds += out.EpochSeconds[e]
	}
	return out, nil
}
