package policy

import (
	"math"
	"slices"

	"github.com/shockwave-sched/shockwave/bayes"
)

// Information modes of the Shockwave policy: what its forecasts may read.
const (
	// InfoOnline forecasts from the events the Core receives only
	// (package bayes): progress, batch size and measured throughput, plus
	// priors learned from finished jobs of the same model family. A
	// declared schedule, throughput or isolated time is not read; the
	// declared mode is a hint (it groups jobs into families and sets a new
	// job's prior hazard; ShockwaveConfig.IgnoreMode withholds it). A job
	// the forecaster refuses is planned from swDefaultRule, never from
	// what it declared.
	InfoOnline = "online"
	// InfoProfile is the original's mode (spec §4.1–4.3): each job's
	// declared planned batch-size schedule and epoch durations, calibrated
	// by measured throughput.
	InfoProfile = "profile"
)

// Completer is implemented by policies that learn from finished jobs. The
// Core calls Complete, instead of Remove, for a job that reported it
// finished its work; j is the job's final state.
type Completer interface {
	Complete(j *Job)
}

// swOnline is the online mode's state: one forecaster over every job, and
// what it was last told about each job and the job's latest forecast.
type swOnline struct {
	fc         *bayes.Forecaster
	ignoreMode bool
	jobs       map[string]*swOnlineJob
	// budget bounds the forecasting of jobs forecast before
	// (ShockwaveConfig.ForecastBudget; 0: the default, roundBudget; −1:
	// no bound). over records that the last round left some of them
	// unforecast, and cursor the snapshot index from which this round's
	// refreshes of the jobs with nothing new start (shockwave_refresh.go).
	budget    int64
	over      bool
	cursor    int
	dueCursor int // the same for the jobs due a forecast (swOnlineJob.due)
}

// swOnlineJob is one job's entry: one map lookup a round finds both.
type swOnlineJob struct {
	seen     swSeen
	tracked  bool           // seen is set: the forecaster tracks the job
	forecast bayes.Forecast // the latest round's forecast, when cached
	cached   bool
	// due: the job reported something new since its forecast was made (a
	// round over the budget may leave it for a later one).
	due bool
	// ranAt is the job's run time when its forecast was made: a forecast
	// that waits for its turn while the job runs is read less the run
	// time since (onlineForecast).
	ranAt float64
}

// entry returns id's entry, creating an empty one.
func (o *swOnline) entry(id string) *swOnlineJob {
	e := o.jobs[id]
	if e == nil {
		e = &swOnlineJob{}
		o.jobs[id] = e
	}
	return e
}

// swSeen is the last state of a job fed to the forecaster.
type swSeen struct {
	steps, total int64
	batch        int
	runTime      float64
	measRound    int // round of the last measurement fed
}

func newSWOnline(ignoreMode bool) *swOnline {
	return &swOnline{
		ignoreMode: ignoreMode,
		fc:         bayes.NewForecaster(bayes.DefaultForecastConfig()),
		jobs:       map[string]*swOnlineJob{},
	}
}

// admit starts forecasting j from its registration's shape alone. The
// registered total is counted at the initial batch size; a job admitted
// after a rescale (a restart) is converted back.
func (o *swOnline) admit(j *Job, p *bayes.Prepared, spare *swOnlineJob) error {
	err := o.fc.AdmitPrepared(o.spec(j), p)
	if err != nil {
		return err
	}
	e := o.jobs[j.ID]
	if e == nil {
		if e = spare; e == nil {
			e = &swOnlineJob{}
		}
		o.jobs[j.ID] = e
	}
	e.seen, e.tracked = swSeen{steps: -1, measRound: -1}, true
	return nil
}

// spec is what the forecaster is told of j at its admission.
func (o *swOnline) spec(j *Job) bayes.JobSpec {
	total := j.TotalSteps
	if j.BatchSize > 0 && j.BatchSize != j.InitialBatchSize {
		total = int64(math.Ceil(float64(total) * float64(j.BatchSize) / float64(j.InitialBatchSize)))
	}
	mode := j.Mode
	if o.ignoreMode {
		mode = ""
	}
	return bayes.JobSpec{
		ID: j.ID, Model: j.Model, Mode: mode, Workers: j.Workers,
		InitialBatchSize: j.InitialBatchSize, DatasetSize: j.DatasetSize, TotalSteps: max(total, 1),
	}
}

// observe feeds the forecaster what changed for j since the last round:
// progress, batch size, execution time, and the newest throughput
// measurement (a zero measurement is a failed lease and says nothing about
// speed).
func (o *swOnline) observe(j *Job, e *swOnlineJob) (fed bool, err error) {
	if e == nil || !e.tracked {
		return false, nil
	}
	last := e.seen
	obs := bayes.Observation{StepsDone: max(j.StepsDone, 0), TotalSteps: max(j.TotalSteps, 1), Epoch: j.Epoch, BatchSize: j.BatchSize}
	meas := last.measRound
	if n := len(j.Measurements); n > 0 {
		if m := j.Measurements[n-1]; m.Round > last.measRound && m.Throughput > 0 && m.BatchSize == j.BatchSize {
			obs.Throughput, meas = m.Throughput, m.Round
		}
	}
	obs.Elapsed = max(0, j.RunTime-last.runTime)
	if obs.StepsDone == last.steps && obs.TotalSteps == last.total && obs.BatchSize == last.batch && meas == last.measRound {
		return false, nil
	}
	if obs.StepsDone > obs.TotalSteps {
		obs.StepsDone = obs.TotalSteps // a rescale can round completed epochs past the total (spec §2.5)
	}
	if err := o.fc.Observe(j.ID, obs); err != nil {
		return false, err
	}
	e.seen = swSeen{steps: obs.StepsDone, total: obs.TotalSteps, batch: obs.BatchSize, runTime: j.RunTime, measRound: meas}
	return true, nil
}

// complete teaches the forecaster's family priors with a finished job.
func (o *swOnline) complete(j *Job) {
	e := o.jobs[j.ID]
	if e == nil || !e.tracked {
		return
	}
	_, _ = o.observe(j, e) // the final state; an error leaves the last good one
	o.fc.Complete(j.ID)
	delete(o.jobs, j.ID)
}

func (o *swOnline) remove(id string) {
	o.fc.Remove(id)
	delete(o.jobs, id)
}

// swEstimate is what the market needs of one job: E, c, d, R̂ and the
// seconds of work already done (spec §4.3–4.4).
type swEstimate struct {
	epochs, epoch       int
	epochSeconds        float64
	remaining, doneSecs float64
	remainingHigh       float64 // the P90 of the remaining time, online (0: none)
	uninformed          bool    // no throughput was known (online mode)
}

// estimate returns j's inputs to the market in the policy's information
// mode. The profile estimate expects calibrate to have run.
func (s *Shockwave) estimate(j *Job, m *swMeta) swEstimate {
	if s.online != nil {
		if f, ok := s.onlineForecast(j, m); ok {
			return swEstimate{
				epochs: f.Epochs, epoch: min(f.Epoch, f.Epochs), epochSeconds: f.EpochSeconds,
				remaining: math.Max(f.Remaining.Mean, 1), remainingHigh: f.Remaining.P90, doneSecs: j.RunTime, uninformed: f.Uninformed,
			}
		}
		return swDefault(j)
	}
	return swEstimate{
		epochs: m.epochs, epoch: min(m.epoch, m.epochs), epochSeconds: m.epochSeconds(),
		remaining: m.remaining(m.epoch), doneSecs: m.doneSeconds(),
	}
}

// onlineForecast is j's latest online forecast, less the run time since it
// was made (none, but for a forecast a round over the budget left for a
// later one: the time the job ran since is time its remaining time lost,
// to first order), through the link m keeps
// to the job's online entry (found once: an entry is created when the job
// is admitted or the state loaded, before any estimate, and deleted with
// the metadata).
func (s *Shockwave) onlineForecast(j *Job, m *swMeta) (bayes.Forecast, bool) {
	e := m.on
	if e == nil {
		e = s.online.jobs[j.ID]
		m.on = e
	}
	if e == nil || !e.cached {
		return bayes.Forecast{}, false
	}
	f := e.forecast
	if ran := j.RunTime - e.ranAt; ran > 0 { // the job ran since: its forecast waits for its turn
		r := &f.Remaining
		r.Mean, r.P10, r.P90 = max(r.Mean-ran, 0), max(r.P10-ran, 0), max(r.P90-ran, 0)
	}
	return f, true
}

// Complete teaches the online forecaster with a finished job, then removes
// it like Remove.
func (s *Shockwave) Complete(j *Job) {
	if s.online != nil {
		s.online.complete(j)
	}
	s.drop(j.ID)
}

// swDefaultRule describes swDefault, for the plan's note.
const swDefaultRule = "its total steps as a static job, at its latest measured rate or 1 step/s before one"

// swDefault is the estimate of a job the online forecaster refused: no
// declared schedule, throughput or isolated time, only its shape and what
// it reported. Its steps are split into up to 100 equal pseudo-epochs and
// run at the latest measured throughput (unmeasuredThroughput before the
// first measurement, as the baselines assume); it is uninformed until
// measured, so its fair-share target is redone then.
func swDefault(j *Job) swEstimate {
	thr, measured := float64(unmeasuredThroughput), false
	for _, m := range slices.Backward(j.Measurements) {
		if m.Throughput > 0 {
			thr, measured = m.Throughput, true
			break
		}
	}
	total := max(j.TotalSteps, 1)
	epochs := int(min(total, 100))
	per := float64(total) / float64(epochs)
	done := min(float64(max(j.StepsDone, 0)), float64(total))
	return swEstimate{
		epochs: epochs, epoch: min(int(done/per), epochs), epochSeconds: per / thr,
		remaining: math.Max((float64(total)-done)/thr, 1), doneSecs: j.RunTime, uninformed: !measured,
	}
}
