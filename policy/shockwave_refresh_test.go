package policy

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/shockwave-sched/shockwave/bayes"
	"github.com/shockwave-sched/shockwave/internal/wire"
)

// teachAHistoryJob completes a job of the live shape's model that doubled
// its batch size after epoch k+1 in the forecaster: the model's families
// change, and with them the forecast of every job not yet past that epoch.
func teachAHistoryJob(t *testing.T, fc *bayes.Forecaster, k int) {
	t.Helper()
	id := fmt.Sprintf("history-%d", k)
	sp := bayes.JobSpec{ID: id, Model: "ResNet-18", Mode: "gns", Workers: 1, InitialBatchSize: 32, DatasetSize: 50000, TotalSteps: liveTotalSteps}
	if err := fc.Admit(sp); err != nil {
		t.Fatal(err)
	}
	steps := int64(1+k) * 50000 / 32
	for _, o := range []bayes.Observation{
		{BatchSize: 32, StepsDone: steps, TotalSteps: liveTotalSteps, Elapsed: 60, Throughput: 100},
		{BatchSize: 64, StepsDone: steps / 2, TotalSteps: liveTotalSteps / 2, Elapsed: 1, Throughput: 60},
		{BatchSize: 64, StepsDone: liveTotalSteps / 2, TotalSteps: liveTotalSteps / 2, Elapsed: 60, Throughput: 60},
	} {
		if err := fc.Observe(id, o); err != nil {
			t.Fatal(err)
		}
	}
	fc.Complete(id)
}

// TestShockwaveRefresh_OverTheBudgetTheJobsTakeTurns: 200 jobs of the
// live shape with a budget of one step. Between rounds a completed job
// teaches the families (every fresh forecast then differs from the last)
// and two jobs report progress. The first round over the budget forecasts
// the first job of the snapshot only; every later round forecasts exactly
// one in refreshShare of the jobs due a forecast (those that reported
// something new since their last one), consecutive in the snapshot's order
// from where the last round stopped, and one in refreshShare of the
// others, the same way. So a job with nothing new is refreshed within a
// refreshShare + 1 rounds, and the due flags are exactly the jobs that
// reported since their last forecast. With a budget of 5,000 steps, more
// than the jobs that reported take, those are forecast in every round
// that follows one over it; with no
// bound, every job is forecast every round.
func TestShockwaveRefresh_OverTheBudgetTheJobsTakeTurns(t *testing.T) {
	for _, budget := range []int64{1, 5000, -1} {
		t.Run(fmt.Sprint("budget ", budget), func(t *testing.T) {
			p, jobs, snap, metas := informedLiveJobs(t, budget)
			o := p.online
			for _, j := range jobs {
				if o.jobs[j.ID].forecast.Uninformed {
					t.Fatalf("job %s's forecast is uninformed: its turns would not wait", j.ID)
				}
			}
			last := map[string]int{}  // the round of each job's last refresh
			due := map[string]bool{}  // reported since its last refresh
			cursor, dueCursor := 0, 0 // where the last round stopped
			overRounds := 0           // rounds after one over the budget
			const rounds = 150
			for r := 1; r <= rounds; r++ {
				before := map[string]bayes.Forecast{}
				for _, j := range jobs {
					before[j.ID] = o.jobs[j.ID].forecast
				}
				teachAHistoryJob(t, o.fc, r)
				for _, k := range []int{(7 * r) % len(jobs), (13*r + 5) % len(jobs)} {
					jobs[k].StepsDone += 1563 // an epoch
					due[jobs[k].ID] = true
				}
				wasOver := o.over
				if _, err := o.refresh(snap, metas); err != nil {
					t.Fatal(err)
				}
				var refreshed, refreshedDue []int
				for k, j := range jobs {
					e := o.jobs[j.ID]
					fresh, _ := o.fc.Forecast(j.ID)
					if fresh == before[j.ID] {
						t.Fatalf("round %d: job %s's fresh forecast equals its last: the test cannot tell a refresh", r, j.ID)
					}
					switch {
					case e.forecast == before[j.ID]: // skipped
						if budget < 0 {
							t.Fatalf("round %d: job %s was not forecast with no bound", r, j.ID)
						}
					case due[j.ID]:
						refreshedDue = append(refreshedDue, k)
					default:
						refreshed = append(refreshed, k)
					}
				}
				if budget > 1 && wasOver {
					overRounds++
					if len(refreshedDue) != len(due) {
						t.Fatalf("round %d: on a budget of %d steps %d of %d jobs due refreshed", r, budget, len(refreshedDue), len(due))
					}
				}
				if budget == 1 {
					switch {
					case !wasOver: // the exact pass: the first job, then the budget ran out
						if all := append(refreshed, refreshedDue...); fmt.Sprint(all) != "[0]" || !o.over {
							t.Fatalf("round %d: the first pass over the budget refreshed %v, over %v", r, all, o.over)
						}
						wantCursor, wantDue := -1, -1 // the first skipped of each kind
						for k := 1; k < len(jobs); k++ {
							if due[jobs[k].ID] && wantDue < 0 {
								wantDue = k
							} else if !due[jobs[k].ID] && wantCursor < 0 {
								wantCursor = k
							}
						}
						if o.cursor != wantCursor || o.dueCursor != wantDue {
							t.Fatalf("round %d: the first pass over the budget stopped at %d and %d (due), want %d and %d", r, o.cursor, o.dueCursor, wantCursor, wantDue)
						}
					default:
						var dueJobs, others []int
						for k, j := range jobs {
							if due[j.ID] {
								dueJobs = append(dueJobs, k)
							} else {
								others = append(others, k)
							}
						}
						for _, c := range []struct {
							name      string
							got, from []int
							cursor    int
						}{{"due", refreshedDue, dueJobs, dueCursor}, {"other", refreshed, others, cursor}} {
							want := takeTurns(c.from, c.cursor)
							if fmt.Sprint(want) != fmt.Sprint(c.got) {
								t.Fatalf("round %d: refreshed %s jobs %v, want %v (from %d of %v)", r, c.name, c.got, want, c.cursor, c.from)
							}
						}
					}
				}
				for _, k := range append(refreshed, refreshedDue...) {
					last[jobs[k].ID] = r
					delete(due, jobs[k].ID)
				}
				for _, j := range jobs {
					if o.jobs[j.ID].due != due[j.ID] {
						t.Fatalf("round %d: job %s due %v, want %v", r, j.ID, o.jobs[j.ID].due, due[j.ID])
					}
				}
				cursor, dueCursor = o.cursor, o.dueCursor
			}
			if budget < 0 {
				return
			}
			if budget > 1 && overRounds < 20 {
				t.Fatalf("on a budget of %d steps only %d rounds followed one over it", budget, overRounds)
			}
			// A job due a forecast waits for the turns of the due ones,
			// whose number grows while two report and one is forecast a
			// round (budget 1; checked turn by turn above).
			bound := refreshShare + 1 // rounds to go around, and the first one over
			for _, j := range jobs {
				if !due[j.ID] && rounds-last[j.ID] > bound {
					t.Fatalf("job %s last refreshed in round %d of %d: older than %d rounds", j.ID, last[j.ID], rounds, bound)
				}
			}
		})
	}
}

// shockwaveWithBudget is a Shockwave policy of the default configuration
// with the forecast budget budget.
func shockwaveWithBudget(t *testing.T, budget int64) *Shockwave {
	t.Helper()
	cfg := DefaultShockwaveConfig()
	cfg.ForecastBudget = budget
	p, err := NewShockwave(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// informedLiveJobs is a policy with the forecast budget budget that has
// admitted 200 jobs of the live shape, each with a throughput measurement
// (so their forecasts are informed), and forecast them once; with the
// snapshot and its metadata for the next refreshes.
func informedLiveJobs(t *testing.T, budget int64) (*Shockwave, []*Job, *Snapshot, []*swMeta) {
	t.Helper()
	p := shockwaveWithBudget(t, budget)
	jobs := liveScaleJobs(200)
	for _, j := range jobs {
		j.Measurements = []Measurement{{Round: 0, Throughput: 100, BatchSize: 32}}
		p.Admit(j)
	}
	snap := &Snapshot{Jobs: jobs}
	metas := make([]*swMeta, len(jobs))
	if _, err := p.online.refresh(snap, metas); err != nil {
		t.Fatal(err)
	}
	return p, jobs, snap, metas
}

// takeTurns is the snapshot indexes a round over a budget of one step
// forecasts from the sorted list from: one in refreshShare of them,
// consecutive from the first at or after cursor, wrapping, sorted.
func takeTurns(from []int, cursor int) []int {
	if len(from) == 0 {
		return nil
	}
	least := (len(from) + refreshShare - 1) / refreshShare
	i, _ := slices.BinarySearch(from, cursor)
	var want []int
	for t := range least {
		want = append(want, from[(i+t)%len(from)])
	}
	slices.Sort(want)
	return want
}

// TestShockwaveRefresh_AFirstMeasurementIsForecastAtOnce: over a budget
// of one step, with ten jobs due a forecast waiting for their turns, a job
// whose forecast knew no throughput and that measured its first is
// forecast in that round, not in its turn, and the round reports the
// forecast informed (a re-solve).
func TestShockwaveRefresh_AFirstMeasurementIsForecastAtOnce(t *testing.T) {
	p := shockwaveWithBudget(t, 1)
	jobs := liveScaleJobs(200)
	for k, j := range jobs {
		if k < 10 { // informed jobs that report every round: due ones waiting for their turns
			j.Measurements = []Measurement{{Round: 0, Throughput: 100, BatchSize: 32}}
		}
		if k == len(jobs)-1 {
			j.Model = "Transformer" // no peer's throughput informs it
		}
		p.Admit(j)
	}
	o := p.online
	snap := &Snapshot{Jobs: jobs}
	metas := make([]*swMeta, len(jobs))
	for r := range 3 { // the first forecasts, then rounds over the budget
		teachAHistoryJob(t, o.fc, r)
		for _, j := range jobs[:10] {
			j.StepsDone += 1563
		}
		if _, err := o.refresh(snap, metas); err != nil {
			t.Fatal(err)
		}
	}
	j := jobs[len(jobs)-1] // the last in the snapshot's order
	if !o.over || !o.jobs[j.ID].forecast.Uninformed {
		t.Fatalf("over %v, job %s's forecast uninformed %v: the test needs both", o.over, j.ID, o.jobs[j.ID].forecast.Uninformed)
	}
	j.Measurements = []Measurement{{Round: 3, Throughput: 100, BatchSize: 32}}
	informed, err := o.refresh(snap, metas)
	if err != nil {
		t.Fatal(err)
	}
	if f := o.jobs[j.ID].forecast; !informed || f.Uninformed || o.jobs[j.ID].due {
		t.Fatalf("after its first measurement: informed %v, forecast uninformed %v, due %v", informed, f.Uninformed, o.jobs[j.ID].due)
	}
}

// TestShockwaveRefresh_AForecastWaitingItsTurnLosesTheRunTimeSince: over a
// budget of one step, a job that ran 600 s since its forecast and waits
// for its turn is planned and explained from that forecast less 600 s (its
// P10 and P90 too); once its turn comes, from its fresh forecast.
func TestShockwaveRefresh_AForecastWaitingItsTurnLosesTheRunTimeSince(t *testing.T) {
	p, jobs, snap, metas := informedLiveJobs(t, 1)
	o := p.online
	j := jobs[len(jobs)-1] // the last in the snapshot's order: its turn comes last
	made := o.jobs[j.ID].forecast
	for r := 1; r <= 3; r++ {
		for _, k := range []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, len(jobs) - 1} { // running: due ones take turns
			jobs[k].StepsDone += 1000
			jobs[k].RunTime += 200
		}
		if _, err := o.refresh(snap, metas); err != nil {
			t.Fatal(err)
		}
	}
	if e := o.jobs[j.ID]; !e.due || e.forecast != made {
		t.Fatalf("job %s: due %v, forecast refreshed %v: the test needs it waiting", j.ID, e.due, e.forecast != made)
	}
	est := p.estimate(j, p.meta[j.ID])
	if want := made.Remaining.Mean - 600; want < 1000 || est.remaining != want || est.remainingHigh != made.Remaining.P90-600 {
		t.Fatalf("waiting: remaining %v (P90 %v), want the forecast's %v (P90 %v) less 600 s", est.remaining, est.remainingHigh, made.Remaining.Mean, made.Remaining.P90)
	}
	var ex Explanation
	p.explainForecast(&ex, &swView{s: p, snap: snap}, j, p.meta[j.ID])
	if ex.ForecastP10 != made.Remaining.P10-600 || ex.ForecastP90 != made.Remaining.P90-600 {
		t.Fatalf("explained band %v–%v, want the forecast's %v–%v less 600 s", ex.ForecastP10, ex.ForecastP90, made.Remaining.P10, made.Remaining.P90)
	}
	if !ex.ForecastWaiting || ex.ForecastRunSince != 600 {
		t.Fatalf("explained waiting %v, run since %v s, want waiting and 600 s", ex.ForecastWaiting, ex.ForecastRunSince)
	}
	for r := 0; o.jobs[j.ID].due; r++ {
		if r == 300 {
			t.Fatal("the job's turn never came")
		}
		if _, err := o.refresh(snap, metas); err != nil {
			t.Fatal(err)
		}
	}
	fresh, _ := o.fc.Forecast(j.ID)
	if est := p.estimate(j, p.meta[j.ID]); est.remaining != max(fresh.Remaining.Mean, 1) {
		t.Fatalf("after its turn: remaining %v, want its fresh forecast's %v", est.remaining, fresh.Remaining.Mean)
	}
	ex = Explanation{}
	p.explainForecast(&ex, &swView{s: p, snap: snap}, j, p.meta[j.ID])
	if ex.ForecastWaiting || ex.ForecastRunSince != 0 {
		t.Fatalf("after its turn: explained waiting %v, run since %v s", ex.ForecastWaiting, ex.ForecastRunSince)
	}
}

// TestShockwaveRefresh_UnderTheBudgetNothingChanges: 300 jobs of the live
// shape's dynamic mix on 64 GPUs for 30 rounds, with the default budget
// and with no bound: the same plans and saved states, byte for byte (the
// budget is never reached at this size).
func TestShockwaveRefresh_UnderTheBudgetNothingChanges(t *testing.T) {
	unbounded := DefaultShockwaveConfig()
	unbounded.ForecastBudget = -1
	runBoth(t, DefaultShockwaveConfig(), unbounded, 30, -1)
}

// TestShockwaveRefresh_ARestoredPolicyContinuesWhereTheRefreshesLeftOff:
// with a budget small enough that most rounds run over it, a policy
// restored from the state saved at round 12 plans the next 18 rounds and
// saves the states of the uninterrupted one.
func TestShockwaveRefresh_ARestoredPolicyContinuesWhereTheRefreshesLeftOff(t *testing.T) {
	cfg := DefaultShockwaveConfig()
	cfg.ForecastBudget = 2000
	if over := runBoth(t, cfg, cfg, 30, 12); over < 10 {
		t.Fatalf("only %d rounds ran over the budget", over)
	}
}

// runBoth drives two policies through the same rounds of 300 live-shape
// jobs (every other a gns job) on 64 GPUs, comparing plans and states each
// round; at round restoreAt (if ≥ 0) the second is replaced by a fresh
// policy restored from the first's state. It returns how many rounds left
// the first over its budget.
func runBoth(t *testing.T, cfgA, cfgB ShockwaveConfig, rounds, restoreAt int) (over int) {
	t.Helper()
	a, err := NewShockwave(cfgA)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewShockwave(cfgB)
	if err != nil {
		t.Fatal(err)
	}
	s := newLiveScale(t, 300, 64, true)
	for _, p := range []*Shockwave{a, b} {
		s.p = p
		s.teachHistory(t, 6)
	}
	byID := map[string]*Job{}
	for _, j := range s.jobs {
		byID[j.ID] = j
	}
	for r := range rounds {
		if r == restoreAt {
			fresh, err := NewShockwave(cfgB)
			if err != nil {
				t.Fatal(err)
			}
			if err := fresh.UnmarshalState(a.MarshalState()); err != nil {
				t.Fatal(err)
			}
			b = fresh
		}
		s.snap.Round, s.snap.Now = r, float64(r*liveRoundSeconds)
		if r == 0 {
			for _, j := range s.jobs {
				a.Admit(j)
				b.Admit(j)
			}
		}
		plan := sameRound(t, &s.snap, a, b)
		if a.online.over {
			over++
		}
		for _, id := range plan.Run {
			s.progress(byID[id], r)
		}
	}
	return over
}

// TestShockwaveRefresh_TheBudgetIsConfiguredAndChecked: "forecast_budget"
// reads as a positive bound, 0 (the default: a million steps less 50 a
// job of the round, at least 250,000) or -1 (no bound); anything below is
// refused naming the key.
func TestShockwaveRefresh_TheBudgetIsConfiguredAndChecked(t *testing.T) {
	for raw, want := range map[string]map[int]int64{
		`{}`:                            {0: 1_000_000, 900: 955_000, 10_000: 500_000, 15_000: 250_000, 100_000: 250_000},
		`{"forecast_budget": 5000}`:     {0: 5000, 10_000: 5000},
		`{"forecast_budget": -1}`:       {0: -1, 10_000: -1},
		`{"forecast_budget": 10000000}`: {100_000: 10_000_000},
	} {
		c, err := ParseShockwaveConfig([]byte(raw))
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		p, err := NewShockwave(c)
		if err != nil {
			t.Fatal(err)
		}
		for jobs, b := range want {
			if got := p.online.roundBudget(jobs); got != b {
				t.Fatalf("%s: budget %d at %d jobs, want %d", raw, got, jobs, b)
			}
		}
	}
	if _, err := ParseShockwaveConfig([]byte(`{"forecast_budget": -2}`)); err == nil || !strings.Contains(err.Error(), "forecast_budget -2") {
		t.Fatalf("a budget of -2: %v", err)
	}
}

// TestShockwaveRefresh_AVersion3StateLoadsWithNothingDue: a state of
// version 3 (before the jobs due a forecast were saved; a round then
// forecast every job that reported something new) loads with no job due,
// and its forecasts made at the run times last observed, and encodes as
// this version's state of the same policy. A due job the state gives no
// forecast is refused by name, and so are run times for other forecasts
// than the state's and run times that are not finite and non-negative.
func TestShockwaveRefresh_AVersion3StateLoadsWithNothingDue(t *testing.T) {
	p, err := NewShockwave(DefaultShockwaveConfig())
	if err != nil {
		t.Fatal(err)
	}
	s := newLiveScale(t, 50, 16, true)
	s.p = p
	for r := range 4 {
		s.round(t, r)
	}
	b := p.MarshalState()
	var ranAt []float64 // version 4's last list: the forecasts' run times
	for _, id := range sortedIDs(p.online.jobs) {
		if p.online.jobs[id].cached {
			ranAt = append(ranAt, p.online.jobs[id].ranAt)
		}
	}
	var tail, runTimes wire.Encoder
	tail.Int(0)    // the due jobs' cursor
	tail.Strs(nil) // no job due
	tail.F64s(ranAt)
	runTimes.F64s(ranAt)
	if !bytes.HasSuffix(b, tail.Bytes()) {
		t.Fatal("the state does not end with an empty due list and the forecasts' run times")
	}
	v3 := slices.Clone(b[:len(b)-len(tail.Bytes())])
	v3[len("shockwave")+8] = 3 // the version follows the name (a length and its bytes)
	r, _ := NewShockwave(DefaultShockwaveConfig())
	if err := r.UnmarshalState(v3); err != nil {
		t.Fatalf("a version-3 state: %v", err)
	}
	if !bytes.Equal(r.MarshalState(), b) {
		t.Fatal("a version-3 state loads into another state")
	}
	var bad wire.Encoder
	bad.Int(0)
	bad.Strs([]string{"no-such-job"})
	bad.F64s(ranAt)
	worse := append(slices.Clone(b[:len(b)-len(tail.Bytes())]), bad.Bytes()...)
	r, _ = NewShockwave(DefaultShockwaveConfig())
	if err := r.UnmarshalState(worse); err == nil || !strings.Contains(err.Error(), "job no-such-job is due a forecast but has none") {
		t.Fatalf("a due job with no forecast: %v", err)
	}
	for _, r := range []float64{math.NaN(), math.Inf(1), -1} {
		var odd wire.Encoder
		odd.F64s(append([]float64{r}, ranAt[1:]...))
		worse = append(slices.Clone(b[:len(b)-len(runTimes.Bytes())]), odd.Bytes()...)
		r2, _ := NewShockwave(DefaultShockwaveConfig())
		if err := r2.UnmarshalState(worse); err == nil || !strings.Contains(err.Error(), "forecast made at run time") {
			t.Fatalf("a forecast made at run time %v: %v", r, err)
		}
	}
	var short wire.Encoder
	short.F64s(ranAt[1:])
	worse = append(slices.Clone(b[:len(b)-len(runTimes.Bytes())]), short.Bytes()...)
	r, _ = NewShockwave(DefaultShockwaveConfig())
	if err := r.UnmarshalState(worse); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%d forecasts' run times for %d forecasts", len(ranAt)-1, len(ranAt))) {
		t.Fatalf("a run time short: %v", err)
	}
}
