package policy

import (
	"math"
	"strings"
	"testing"
)

func onlineJob(id string, dataset int, declared bool) *Job {
	j := &Job{ID: id, Model: "ResNet-18", Mode: "gns", Workers: 1, Priority: 1,
		InitialBatchSize: 32, BatchSize: 32, DatasetSize: dataset, TotalSteps: 5000, LastRun: -1}
	if declared { // a wildly wrong declaration: online mode must not read it
		j.Throughput = 1000
		j.PlannedBatchSizes = []int{32, 64, 128}
		j.PlannedEpochSeconds = []float64{1, 1, 1}
		j.IsolatedSeconds = 3
	}
	return j
}

func allocateOnce(t *testing.T, jobs ...*Job) *Plan {
	t.Helper()
	p, err := NewShockwave(DefaultShockwaveConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		p.Admit(j)
	}
	plan, err := p.Allocate(&Snapshot{GPUs: 1, RoundSeconds: 120, Jobs: jobs})
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

// TestOnline_RefusedJobIsPlannedFromTheLoggedDefault checks that a job the
// online forecaster cannot admit (here: no dataset size) is planned from
// the documented default — its total steps at 1 step/s before any
// measurement — and not from the schedule it declared, and that the plan
// says so.
func TestOnline_RefusedJobIsPlannedFromTheLoggedDefault(t *testing.T) {
	plan := allocateOnce(t, onlineJob("bad", 0, true))
	if !strings.Contains(plan.Note, "job bad is planned from the default") {
		t.Fatalf("plan note does not log the default: %q", plan.Note)
	}
	e := plan.Explain[0]
	if e.ForecastPrior != "default" || e.ForecastRemaining != 5000 {
		t.Fatalf("refused job explained as %+v, want the default prior and 5000 s", e)
	}
}

// TestOnline_DeclaredScheduleAndThroughputAreNotRead checks that two jobs
// that differ only in what they declared (schedule, throughput, isolated
// time) get identical online forecasts.
func TestOnline_DeclaredScheduleAndThroughputAreNotRead(t *testing.T) {
	a := allocateOnce(t, onlineJob("a", 50000, false)).Explain[0]
	b := allocateOnce(t, onlineJob("a", 50000, true)).Explain[0]
	if a.ForecastRemaining != b.ForecastRemaining || a.ForecastP10 != b.ForecastP10 || a.ForecastP90 != b.ForecastP90 ||
		math.IsNaN(a.ForecastRemaining) {
		t.Fatalf("declarations changed the online forecast: %+v vs %+v", a, b)
	}
}

// TestShockwaveConfig_FairnessKey checks the fairness rule's config key:
// the two rules are accepted, anything else is refused with the key named,
// and the default follows the information mode.
func TestShockwaveConfig_FairnessKey(t *testing.T) {
	for _, raw := range []string{`{"fairness":"tightest"}`, `{"fairness":"relax"}`, `{"ignore_mode":true}`} {
		if _, err := ParseShockwaveConfig([]byte(raw)); err != nil {
			t.Errorf("%s: %v", raw, err)
		}
	}
	if _, err := ParseShockwaveConfig([]byte(`{"fairness":"loose"}`)); err == nil || !strings.Contains(err.Error(), "fairness") {
		t.Errorf("unknown rule: %v", err)
	}
	on, _ := NewShockwave(DefaultShockwaveConfig())
	cfg := DefaultShockwaveConfig()
	cfg.Info = InfoProfile
	prof, _ := NewShockwave(cfg)
	if on.settings.Fairness.String() != "tightest" || prof.settings.Fairness.String() != "relax" {
		t.Errorf("defaults: online %v, profile %v", on.settings.Fairness, prof.settings.Fairness)
	}
}
