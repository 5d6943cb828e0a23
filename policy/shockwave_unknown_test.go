package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
)

// placeholderJob is a submitted job as the coordinator registers it before
// its process starts (coordinator.Core.Submit).
func placeholderJob(id string, seq, workers int) *Job {
	return &Job{ID: id, Seq: seq, Model: PlaceholderModel, Workers: workers, Priority: 1,
		InitialBatchSize: 1, BatchSize: 1, DatasetSize: 1, TotalSteps: 1, LastRun: -1}
}

// knownJob is a registered job of steps steps at thr steps/s (declared).
func knownJob(id string, seq int, steps int64, thr float64) *Job {
	return &Job{ID: id, Seq: seq, Model: "ResNet-18", Workers: 1, Priority: 1,
		InitialBatchSize: 32, BatchSize: 32, DatasetSize: 3200, Throughput: thr, TotalSteps: steps, LastRun: -1}
}

func explainedBy(t *testing.T, p *Plan) map[string]Explanation {
	t.Helper()
	out := map[string]Explanation{}
	for _, e := range p.Explain {
		out[e.Job] = e
	}
	return out
}

func TestJob_LengthUnknownOnlyForAPlaceholderThatHasNotRun(t *testing.T) {
	ran := placeholderJob("a", 0, 1)
	ran.StepsDone = 5
	timed := placeholderJob("b", 0, 1)
	timed.RunTime = 3
	failed := placeholderJob("c", 0, 1) // a lease without progress: a zero measurement
	failed.Measurements = []Measurement{{Round: 1}}
	for _, tc := range []struct {
		name string
		j    *Job
		want bool
	}{
		{"placeholder", placeholderJob("p", 0, 1), true},
		{"placeholder whose process failed to start", failed, true},
		{"placeholder model that reported steps", ran, false},
		{"placeholder model that reported run time", timed, false},
		{"registered job", knownJob("k", 0, 1, 1), false},
	} {
		if got := tc.j.LengthUnknown(); got != tc.want {
			t.Errorf("%s: LengthUnknown() = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestShockwave_AJobOfUnknownLengthIsForecastAsTheMedianKnownJob: in both
// information modes, a placeholder's forecast is the median length of the
// jobs of known length beside it (the same, since none has run), not the
// one step it registered.
func TestShockwave_AJobOfUnknownLengthIsForecastAsTheMedianKnownJob(t *testing.T) {
	for _, info := range []string{InfoOnline, InfoProfile} {
		t.Run(info, func(t *testing.T) {
			cfg := DefaultShockwaveConfig()
			cfg.Info = info
			p, err := NewShockwave(cfg)
			if err != nil {
				t.Fatal(err)
			}
			jobs := []*Job{
				knownJob("k0", 0, 20_000, 10), knownJob("k1", 1, 200_000, 10), knownJob("k2", 2, 60_000, 10),
				placeholderJob("p0", 3, 1), placeholderJob("p1", 4, 2),
			}
			for _, j := range jobs {
				p.Admit(j)
			}
			plan, err := p.Allocate(&Snapshot{GPUs: 2, RoundSeconds: 60, Jobs: jobs})
			if err != nil {
				t.Fatal(err)
			}
			ex := explainedBy(t, plan)
			known := []float64{ex["k0"].ForecastRemaining, ex["k1"].ForecastRemaining, ex["k2"].ForecastRemaining}
			slices.Sort(known)
			if !(known[0] < known[1] && known[1] < known[2]) {
				t.Fatalf("the known jobs' forecasts do not differ: %v", known)
			}
			for _, id := range []string{"p0", "p1"} {
				e := ex[id]
				if e.ForecastRemaining != known[1] || e.ForecastPrior != swUnknownPrior {
					t.Errorf("%s forecast %g (%q), want the median known %g of %v", id, e.ForecastRemaining, e.ForecastPrior, known[1], known)
				}
			}
		})
	}
}

// TestShockwave_WithNoJobOfKnownLengthAJobOfUnknownLengthLastsOneWindow:
// the first submitted jobs of an empty cluster are forecast to last one
// planning window, and share the GPUs.
func TestShockwave_WithNoJobOfKnownLengthAJobOfUnknownLengthLastsOneWindow(t *testing.T) {
	p, err := NewShockwave(DefaultShockwaveConfig())
	if err != nil {
		t.Fatal(err)
	}
	var jobs []*Job
	for i := range 8 {
		jobs = append(jobs, placeholderJob(fmt.Sprintf("p%d", i), i, 1))
		p.Admit(jobs[i])
	}
	plan, err := p.Allocate(&Snapshot{GPUs: 4, RoundSeconds: 5, Jobs: jobs})
	if err != nil {
		t.Fatal(err)
	}
	want := 5 * float64(DefaultShockwaveConfig().FutureRounds)
	for _, e := range plan.Explain {
		if e.ForecastRemaining != want {
			t.Errorf("%s forecast %g, want one window, %g", e.Job, e.ForecastRemaining, want)
		}
	}
	if len(plan.Run) != 4 {
		t.Errorf("ran %v on 4 GPUs", plan.Run)
	}
}

// TestShockwave_AJobThatRanIsJudgedByWhatItReported: a registered job that
// declares the placeholder's model gains nothing from it once it runs: it
// is forecast from its own progress, like any job.
func TestShockwave_AJobThatRanIsJudgedByWhatItReported(t *testing.T) {
	p, err := NewShockwave(DefaultShockwaveConfig())
	if err != nil {
		t.Fatal(err)
	}
	a, b := knownJob("a", 0, 100_000, 10), knownJob("b", 1, 100_000, 10)
	sly := placeholderJob("sly", 2, 1)
	sly.TotalSteps, sly.StepsDone, sly.RunTime = 10, 9, 60
	sly.Measurements = []Measurement{{Round: 1, Throughput: 0.15, BatchSize: 1}}
	jobs := []*Job{a, b, sly}
	for _, j := range jobs {
		p.Admit(j)
	}
	plan, err := p.Allocate(&Snapshot{GPUs: 1, RoundSeconds: 60, Jobs: jobs})
	if err != nil {
		t.Fatal(err)
	}
	e := explainedBy(t, plan)["sly"]
	if e.ForecastPrior == swUnknownPrior || e.ForecastRemaining >= explainedBy(t, plan)["a"].ForecastRemaining {
		t.Errorf("a job that ran 9 of its 10 steps is forecast as of unknown length: %+v", e)
	}
}

// unknownScenarioRounds runs rounds [from, to) of a cluster of 4 GPUs with
// 3 registered jobs and 9 submitted ones: a placeholder granted GPUs is
// adopted (removed and admitted again with its real registration, as the
// Core does) and every granted job runs a round at its speed.
func unknownScenarioRounds(t *testing.T, p *Shockwave, jobs []*Job, from, to int) []*Plan {
	t.Helper()
	const roundSeconds = 60
	var plans []*Plan
	for r := from; r < to; r++ {
		var active []*Job
		for _, j := range jobs {
			if j.StepsDone < j.TotalSteps {
				active = append(active, j)
			}
		}
		plan, err := p.Allocate(&Snapshot{Round: r, Now: float64(r * roundSeconds), GPUs: 4, RoundSeconds: roundSeconds, Jobs: active})
		if err != nil {
			t.Fatal(err)
		}
		plans = append(plans, plan)
		for _, id := range plan.Run {
			i := slices.IndexFunc(jobs, func(j *Job) bool { return j.ID == id })
			j := jobs[i]
			if j.LengthUnknown() {
				p.Remove(id)
				a := knownJob(id, j.Seq, int64(3000+1000*(j.Seq%4)), 10)
				a.Workers = j.Workers
				jobs[i], j = a, a
				p.Admit(a)
			}
			j.StepsDone = min(j.TotalSteps, j.StepsDone+int64(j.Throughput*roundSeconds))
			j.RunTime += roundSeconds
			j.Epoch = int(j.StepsDone / 100)
			j.Measurements = append(j.Measurements, Measurement{Round: r + 1, Throughput: j.Throughput, BatchSize: j.BatchSize})
			j.LastRun = r
			if j.StepsDone >= j.TotalSteps {
				p.Complete(j)
			}
		}
	}
	return plans
}

// TestShockwaveState_JobsOfUnknownLengthRestoreAndContinueBitForBit: a
// policy restored from the state of one that plans placeholders beside
// known jobs makes the same next plans, explanations included, as the
// uninterrupted one, and every submitted job runs.
func TestShockwaveState_JobsOfUnknownLengthRestoreAndContinueBitForBit(t *testing.T) {
	for _, info := range []string{InfoOnline, InfoProfile} {
		t.Run(info, func(t *testing.T) {
			cfg := DefaultShockwaveConfig()
			cfg.Info = info
			p, _ := NewShockwave(cfg)
			jobs := []*Job{knownJob("k0", 0, 6000, 10), knownJob("k1", 1, 9000, 10), knownJob("k2", 2, 4000, 10)}
			for i := range 9 {
				jobs = append(jobs, placeholderJob(fmt.Sprintf("s%d", i), 3+i, 1+i%2))
			}
			for _, j := range jobs {
				p.Admit(j)
			}
			unknownScenarioRounds(t, p, jobs, 0, 6)
			if !slices.ContainsFunc(jobs, (*Job).LengthUnknown) {
				t.Fatal("every submitted job ran before the state was saved: the restore saves no placeholder")
			}
			r, _ := NewShockwave(cfg)
			if err := r.UnmarshalState(p.MarshalState()); err != nil {
				t.Fatal(err)
			}
			rjobs := cloneJobs(jobs)
			a, b := unknownScenarioRounds(t, p, jobs, 6, 40), unknownScenarioRounds(t, r, rjobs, 6, 40)
			for k := range a {
				ja, _ := json.Marshal(a[k])
				jb, _ := json.Marshal(b[k])
				if !bytes.Equal(ja, jb) {
					t.Fatalf("round %d: restored plan\n%s\nuninterrupted\n%s", 6+k, jb, ja)
				}
			}
			for _, j := range jobs {
				if j.LengthUnknown() {
					t.Errorf("submitted job %s never ran in 40 rounds", j.ID)
				}
			}
		})
	}
}

// TestBaselines_AJobOfUnknownLengthHasTheMedianTimeLeftAtTheAssumedRate:
// the Gavel-round baselines see a placeholder as a job with the median
// time left of the known jobs (in steps at unmeasuredThroughput), not one
// step, and one round's worth when no job's length is known; the
// snapshot they were given is not modified.
func TestBaselines_AJobOfUnknownLengthHasTheMedianTimeLeftAtTheAssumedRate(t *testing.T) {
	s := &Snapshot{GPUs: 2, RoundSeconds: 60, Jobs: []*Job{
		knownJob("a", 0, 1000, 10), knownJob("b", 1, 9000, 10), knownJob("c", 2, 4000, 20), placeholderJob("p", 3, 1),
	}}
	s.Jobs[0].StepsDone = 500 // a: 50 s left, b: 900 s, c: 200 s
	got := assumeUnmeasured(s).Jobs[3]
	if want := int64(200 * unmeasuredThroughput); got.TotalSteps != want || got.Throughput != unmeasuredThroughput {
		t.Errorf("placeholder seen with %d steps at %g/s, want %d at %d/s", got.TotalSteps, got.Throughput, want, unmeasuredThroughput)
	}
	if p := s.Jobs[3]; p.TotalSteps != 1 || p.Throughput != 0 {
		t.Errorf("the snapshot's placeholder was modified: %+v", p)
	}
	only := &Snapshot{GPUs: 2, RoundSeconds: 60, Jobs: []*Job{placeholderJob("p", 0, 1)}}
	if got := assumeUnmeasured(only).Jobs[0]; got.TotalSteps != 60*unmeasuredThroughput {
		t.Errorf("with no known job a placeholder is seen with %d steps, want one round's, %d", got.TotalSteps, 60*unmeasuredThroughput)
	}
}
