package policy

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/shockwave-sched/shockwave/bayes"
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

// TestShockwaveRefresh_OverTheBudgetTheWaitingJobsTakeTurns: 200 jobs of
// the live shape with a budget of one step. Between rounds a completed job
// teaches the families (every fresh forecast then differs from the last)
// and two jobs report progress. Each round, the jobs that reported are
// forecast; of the others, the first round over the budget forecasts
// those before the budget ran out, and every later round exactly one in
// refreshShare of them, consecutive in the snapshot's order from where the
// last round stopped, so that every job is refreshed within
// ⌈waiting/least⌉ rounds. With no bound, every job is forecast every
// round.
func TestShockwaveRefresh_OverTheBudgetTheWaitingJobsTakeTurns(t *testing.T) {
	for _, budget := range []int64{1, -1} {
		t.Run(fmt.Sprint("budget ", budget), func(t *testing.T) {
			cfg := DefaultShockwaveConfig()
			cfg.ForecastBudget = budget
			p, err := NewShockwave(cfg)
			if err != nil {
				t.Fatal(err)
			}
			jobs := liveScaleJobs(200)
			for _, j := range jobs {
				p.Admit(j)
			}
			o := p.online
			snap := &Snapshot{Jobs: jobs}
			metas := make([]*swMeta, len(jobs))
			if _, err := o.refresh(snap, metas); err != nil {
				t.Fatal(err)
			}
			last := map[string]int{} // the round of each job's last refresh
			cursor := 0
			const rounds = 60
			for r := 1; r <= rounds; r++ {
				before := map[string]bayes.Forecast{}
				for _, j := range jobs {
					before[j.ID] = o.jobs[j.ID].forecast
				}
				teachAHistoryJob(t, o.fc, r)
				fed := map[string]bool{}
				for _, k := range []int{(7 * r) % len(jobs), (13*r + 5) % len(jobs)} {
					jobs[k].StepsDone += 1563 // an epoch
					fed[jobs[k].ID] = true
				}
				wasOver := o.over
				if _, err := o.refresh(snap, metas); err != nil {
					t.Fatal(err)
				}
				var refreshed []int
				for k, j := range jobs {
					e := o.jobs[j.ID]
					fresh, _ := o.fc.Forecast(j.ID)
					if fresh == before[j.ID] {
						t.Fatalf("round %d: job %s's fresh forecast equals its last: the test cannot tell a refresh", r, j.ID)
					}
					switch {
					case e.forecast == before[j.ID]: // skipped
						if fed[j.ID] || budget < 0 {
							t.Fatalf("round %d: job %s (reported: %v) was not forecast", r, j.ID, fed[j.ID])
						}
					case fed[j.ID]:
						last[j.ID] = r
					default:
						last[j.ID] = r
						refreshed = append(refreshed, k)
					}
				}
				if budget < 0 {
					continue
				}
				waiting := len(jobs) - len(fed)
				least := (waiting + refreshShare - 1) / refreshShare
				switch {
				case !wasOver && len(refreshed) >= waiting:
					t.Fatalf("round %d: every job was refreshed on a budget of one step", r)
				case !wasOver: // the exact pass: from the first job until the budget ran out
					if refreshed[0] != 0 || !o.over {
						t.Fatalf("round %d: the first pass over the budget refreshed %v, over %v", r, refreshed, o.over)
					}
				default:
					if len(refreshed) != least {
						t.Fatalf("round %d: %d waiting jobs refreshed, want %d", r, len(refreshed), least)
					}
					var want []int // consecutive from the cursor, wrapping, past the jobs that reported
					for k := cursor; len(want) < least; k = (k + 1) % len(jobs) {
						if !fed[jobs[k].ID] {
							want = append(want, k)
						}
					}
					if slices.Sort(want); fmt.Sprint(want) != fmt.Sprint(refreshed) {
						t.Fatalf("round %d: refreshed %v, want %v (from %d)", r, refreshed, want, cursor)
					}
				}
				cursor = o.cursor
			}
			if budget < 0 {
				return
			}
			least := (len(jobs) - 2 + refreshShare - 1) / refreshShare
			bound := (len(jobs)+least-1)/least + 1 // rounds to go around, and the first one over
			for _, j := range jobs {
				if rounds-last[j.ID] > bound {
					t.Fatalf("job %s last refreshed in round %d of %d: older than %d rounds", j.ID, last[j.ID], rounds, bound)
				}
			}
		})
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
// reads as a positive bound, 0 (the default) or -1 (no bound); anything
// below is refused naming the key.
func TestShockwaveRefresh_TheBudgetIsConfiguredAndChecked(t *testing.T) {
	for raw, want := range map[string]int64{`{}`: DefaultForecastBudget, `{"forecast_budget": 5000}`: 5000, `{"forecast_budget": -1}`: -1} {
		c, err := ParseShockwaveConfig([]byte(raw))
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		p, err := NewShockwave(c)
		if err != nil {
			t.Fatal(err)
		}
		if p.online.budget != want {
			t.Fatalf("%s: budget %d, want %d", raw, p.online.budget, want)
		}
	}
	if _, err := ParseShockwaveConfig([]byte(`{"forecast_budget": -2}`)); err == nil || !strings.Contains(err.Error(), "forecast_budget -2") {
		t.Fatalf("a budget of -2: %v", err)
	}
}
