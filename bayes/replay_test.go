package bayes_test

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/shockwave-sched/shockwave/bayes"
	"github.com/shockwave-sched/shockwave/sim/workload"
)

// This file replays a workload job by job in isolation with the
// simulator's run-time rules (spec §2.5, §3.3) and feeds a Forecaster on a
// shared clock, so that jobs that finish early teach the priors of the
// jobs that are still running.

const (
	roundSeconds   = 120.0 // Δ
	restartPenalty = 20.0  // spec §3.3 step 2.2
	replayShare    = 0.3   // fraction of time a job runs (N/G ≈ 3.5 in the traces)
)

// checkpoints are the progress fractions at which forecasts are scored.
var checkpoints = []float64{0.10, 0.25, 0.50, 0.75, 0.90}

// replayRound is one executed round of a job: the observations it sends
// and the execution time done after it.
type replayRound struct {
	obs     []bayes.Observation
	elapsed float64 // cumulative isolated seconds after this round
	epoch   int     // completed epochs after the round (at the round's end)
	thr     float64 // measured steps/s in the round
	bs      int     // batch size of the round's slice
}

// replayJob is a job's whole isolated trajectory.
type replayJob struct {
	spec   workload.Spec
	id     string
	prof   workload.Profile
	rounds []replayRound
	total  float64 // isolated seconds to the end
}

// trajectory runs one job alone: each round runs n = min(int(θΔ), total −
// done) steps; a random half of the rounds pay the restart penalty
// (n·(ε−20)/ε steps in ε−20 s, as a preempted job would; none when rng
// is nil); a pending
// rescale applies after the slice; flags are set at the round's end.
func trajectory(sp workload.Spec, thr *workload.Throughputs, rng *rand.Rand) (replayJob, bool) {
	st, err := workload.NewState(sp, thr)
	if err != nil || st.Throughput <= 0 {
		return replayJob{}, false
	}
	prof, err := workload.NewProfile(sp, thr)
	if err != nil {
		return replayJob{}, false
	}
	rj := replayJob{spec: sp, id: strconv.Itoa(sp.ID), prof: prof}
	limit := float64(int(float64(int(prof.IsolatedSeconds)) * 1.5)) // spec §3.6
	elapsed := 0.0
	for k := 0; k < 100000; k++ {
		n := min(int64(st.Throughput*roundSeconds), st.TotalSteps-st.Done)
		if n <= 0 {
			break // the failure path of §3.5: nothing left to run
		}
		eps := float64(n) / st.Throughput
		if rng != nil && k > 0 && eps > roundSeconds-5 && rng.IntN(2) == 0 {
			n = int64(float64(n) * (eps - restartPenalty) / eps)
			eps -= restartPenalty
		}
		st.Done += n
		elapsed += eps
		ipe := workload.IterationsPerEpoch(sp.Model, st.BatchSize)
		r := replayRound{elapsed: elapsed, thr: float64(n) / eps, bs: st.BatchSize}
		r.obs = append(r.obs, bayes.Observation{
			StepsDone: st.Done, TotalSteps: st.TotalSteps, Epoch: int(st.Done / int64(ipe)),
			BatchSize: st.BatchSize, Throughput: float64(n) / eps, Elapsed: eps,
		})
		done := st.TotalSteps-st.Done <= 0 || elapsed > limit
		if st.Rescale(sp, thr) {
			ipe = workload.IterationsPerEpoch(sp.Model, st.BatchSize)
			r.obs = append(r.obs, bayes.Observation{
				StepsDone: st.Done, TotalSteps: st.TotalSteps, Epoch: int(st.Done / int64(ipe)),
				BatchSize: st.BatchSize,
			})
			done = done || st.TotalSteps-st.Done <= 0
		}
		r.epoch = int(st.Done / int64(ipe))
		rj.rounds = append(rj.rounds, r)
		if done {
			break
		}
		st.SetFlags(sp)
	}
	rj.total = elapsed
	return rj, len(rj.rounds) > 0
}

// scored is one forecast at one checkpoint.
type scored struct {
	checkpoint int // index into checkpoints
	truth      float64
	online     bayes.Forecast
	profile    float64
	job        string
	mode       workload.Mode
}

// replayOptions choose what a replay records.
type replayOptions struct {
	seed    uint64
	cfg     bayes.ForecastConfig
	declare bool // pass the trace's throughput at admission
	// onForecast, when set, sees every forecast made at a checkpoint.
	onForecast func(s scored)
}

// replay runs the workload and returns the scored forecasts in a fixed
// order.
func replay(specs []workload.Spec, thr *workload.Throughputs, opt replayOptions) []scored {
	rng := rand.New(rand.NewPCG(opt.seed, 0x62617965))
	var jobs []replayJob
	for _, sp := range specs {
		if rj, ok := trajectory(sp, thr, rng); ok {
			jobs = append(jobs, rj)
		}
	}
	type event struct {
		t    float64
		job  int
		kind int // 0 admit, 1 round, 2 complete
		k    int
	}
	var evs []event
	for i, rj := range jobs {
		a := rj.spec.Arrival
		evs = append(evs, event{a, i, 0, 0})
		for k, r := range rj.rounds {
			evs = append(evs, event{a + r.elapsed/replayShare, i, 1, k})
		}
		evs = append(evs, event{a + rj.total/replayShare, i, 2, 0})
	}
	slices.SortStableFunc(evs, func(x, y event) int {
		if c := cmp.Compare(x.t, y.t); c != 0 {
			return c
		}
		if c := cmp.Compare(x.kind, y.kind); c != 0 {
			return c
		}
		if c := cmp.Compare(x.job, y.job); c != 0 {
			return c
		}
		return cmp.Compare(x.k, y.k)
	})
	f := bayes.NewForecaster(opt.cfg)
	profiles := make([]*profileEstimator, len(jobs))
	next := make([]int, len(jobs)) // next checkpoint per job
	var out []scored
	for _, ev := range evs {
		rj := &jobs[ev.job]
		switch ev.kind {
		case 0:
			js := bayes.JobSpec{
				ID: rj.id, Model: rj.spec.Model, Mode: string(rj.spec.Mode), Workers: rj.spec.ScaleFactor,
				InitialBatchSize: rj.spec.BatchSize, DatasetSize: workload.DatasetSize(rj.spec.Model),
				TotalSteps: rj.spec.TotalSteps,
			}
			if opt.declare {
				js.Throughput, _ = thr.Lookup(rj.spec.JobType, rj.spec.ScaleFactor)
			}
			if err := f.Admit(js); err != nil {
				panic(err)
			}
			profiles[ev.job] = newProfileEstimator(rj.prof, workload.DatasetSize(rj.spec.Model))
		case 1:
			r := rj.rounds[ev.k]
			for _, o := range r.obs {
				if err := f.Observe(rj.id, o); err != nil {
					panic(err)
				}
			}
			pe := profiles[ev.job]
			pe.observe(ev.k+1, r.thr, r.bs, r.epoch)
			truth := rj.total - r.elapsed
			for next[ev.job] < len(checkpoints) && r.elapsed >= checkpoints[next[ev.job]]*rj.total {
				cp := next[ev.job]
				next[ev.job]++
				if truth <= 0 {
					continue
				}
				fc, err := f.Forecast(rj.id)
				if err != nil {
					panic(err)
				}
				s := scored{checkpoint: cp, truth: truth, online: fc, profile: pe.remaining(), job: rj.id, mode: rj.spec.Mode}
				out = append(out, s)
				if opt.onForecast != nil {
					opt.onForecast(s)
				}
			}
		case 2:
			f.Complete(rj.id)
		}
	}
	return out
}

// apeStats is the median and 90th percentile of absolute percentage errors.
type apeStats struct{ median, p90 float64 }

func percentiles(xs []float64) apeStats {
	if len(xs) == 0 {
		return apeStats{math.NaN(), math.NaN()}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	at := func(q float64) float64 {
		pos := q * float64(len(s)-1)
		lo := int(pos)
		hi := min(lo+1, len(s)-1)
		return s[lo] + (pos-float64(lo))*(s[hi]-s[lo])
	}
	return apeStats{at(0.5), at(0.9)}
}

func ape(pred, truth float64) float64 { return math.Abs(pred-truth) / truth }

// profileEstimator is a copy of the original's profile-based estimate
// (spec §4.1–4.3, policy/shockwave_meta.go): preprofiled epoch durations
// from the planned schedule, the 40 % throughput calibration, and the
// Dirichlet-posterior remaining runtime R̂(c).
type profileEstimator struct {
	planned []int
	pre     []float64
	dur     []float64
	dataset int
	modes   []int
	alpha   float64
	epoch   int
	meas    []measurement
}

type measurement struct {
	round, bs int
	thr       float64
}

func newProfileEstimator(p workload.Profile, dataset int) *profileEstimator {
	pe := &profileEstimator{planned: p.BatchSizes, dataset: dataset}
	for _, d := range p.EpochSeconds {
		pe.pre = append(pe.pre, math.Max(1, math.RoundToEven(d)))
	}
	pe.dur = slices.Clone(pe.pre)
	pe.modes = slices.Compact(slices.Sorted(slices.Values(p.BatchSizes)))
	pe.alpha = float64(len(p.BatchSizes)) / float64(len(pe.modes))
	return pe
}

// observe records the round's measurement (keyed by the job's own round
// count, as if it ran every round) and its completed epochs.
func (pe *profileEstimator) observe(round int, thr float64, bs, epoch int) {
	pe.meas = append(pe.meas, measurement{round, bs, thr})
	pe.epoch = min(epoch, len(pe.planned))
	pe.calibrate()
}

// calibrate is spec §4.2.
func (pe *profileEstimator) calibrate() {
	E := len(pe.pre)
	meas, prev := 0.0, 0
	for _, m := range pe.meas {
		meas += m.thr * roundSeconds * float64(m.round-prev) * float64(m.bs)
		prev = m.round
	}
	tau := roundSeconds * float64(pe.meas[len(pe.meas)-1].round)
	acc, pre := 0.0, 0.0
	e := 0
	for ; e < E; e++ {
		if acc+pe.pre[e] > tau {
			break
		}
		acc += pe.pre[e]
		pre += float64(pe.dataset)
	}
	if e == E {
		e = E - 1
	}
	if tau-acc > 0 {
		pre += float64(pe.dataset) * (tau - acc) / pe.dur[e]
	}
	if meas <= 0 || pre <= 0 || math.Abs(meas-pre)/pre <= 0.4 {
		return
	}
	for i := range pe.dur {
		pe.dur[i] = pe.pre[i] * (pre / meas)
	}
}

// remaining is R̂(c), spec §4.3.
func (pe *profileEstimator) remaining() float64 {
	E := len(pe.planned)
	obs := pe.planned[:min(pe.epoch, E-1)+1]
	post := map[int]float64{}
	total := 0.0
	for _, b := range pe.modes {
		post[b] = pe.alpha
	}
	for _, b := range obs {
		post[b]++
	}
	for _, b := range pe.modes {
		total += post[b]
	}
	n := map[int]float64{}
	for _, b := range pe.modes {
		n[b] = float64(E) * post[b] / total
	}
	for _, b := range obs {
		if n[b] >= 1 {
			n[b]--
		}
	}
	rem := E - pe.epoch
	sumN := 0.0
	for _, b := range pe.modes {
		sumN += n[b]
	}
	infl := math.Floor(sumN + 1)
	if infl < float64(rem) {
		infl = float64(rem)
	}
	if infl <= 0 || rem <= 0 {
		return 1
	}
	est := 0.0
	for _, b := range pe.modes {
		s, k := 0.0, 0
		for e, pb := range pe.planned {
			if pb == b {
				s += pe.dur[e]
				k++
			}
		}
		if k > 0 {
			est += n[b] * s / float64(k)
		}
	}
	return est * float64(rem) / infl
}
