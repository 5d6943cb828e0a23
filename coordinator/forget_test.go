package coordinator

import (
	"testing"

	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
)

// TestCore_AnEndedJobKeepsNeitherItsScheduleNorItsMeasurements: a job that
// completed (active, with measurements) and one that ended while pending
// keep no per-epoch schedule and no measurements, so the Core and its
// snapshots grow with the live jobs only; their status rows still say how
// they ended and how far they got.
func TestCore_AnEndedJobKeepsNeitherItsScheduleNorItsMeasurements(t *testing.T) {
	pol, err := policy.New("shockwave", policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCore(Config{GPUs: 4, RoundSeconds: 10}, pol)
	if err != nil {
		t.Fatal(err)
	}
	sched := &protocol.Schedule{BatchSizes: make([]int, 200), EpochSeconds: make([]float64, 200)}
	for i := range sched.BatchSizes {
		sched.BatchSizes[i], sched.EpochSeconds[i] = 32, 60
	}
	a := newJob("a", 1)
	a.Schedule = sched
	if err := c.Register(0, &a); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Tick(0); err != nil {
		t.Fatal(err)
	}
	ev := progress(1, 100, 100, 10)
	ev.V, ev.Job = protocol.Version, "a"
	if _, err := c.Apply(10, &ev); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Tick(10); err != nil {
		t.Fatal(err)
	}
	late := newJob("late", 1)
	late.Schedule = sched
	if err := c.Register(11, &late); err != nil {
		t.Fatal(err)
	}
	if v := c.jobs["a"].view; len(v.PlannedBatchSizes) != 200 || len(v.Measurements) == 0 {
		t.Fatalf("the running job has no schedule or measurements to forget: %d epochs, %d measurements", len(v.PlannedBatchSizes), len(v.Measurements))
	}
	for _, id := range []string{"a", "late"} {
		done := protocol.Event{V: protocol.Version, Type: protocol.EventDone, Job: id, Seq: 2, StepsDone: 100, TotalSteps: 1_000_000, BatchSize: 32}
		if _, err := c.Deliver(12, &done); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	for _, id := range []string{"a", "late"} {
		v := c.jobs[id].view
		if v.PlannedBatchSizes != nil || v.PlannedEpochSeconds != nil || v.Measurements != nil {
			t.Errorf("ended job %s keeps %d planned epochs and %d measurements", id, len(v.PlannedBatchSizes), len(v.Measurements))
		}
		st, ok := c.Job(id)
		if !ok || st.State != string(Completed) {
			t.Errorf("ended job %s: status %+v", id, st)
		}
	}
	if st, _ := c.Job("a"); st.StepsDone != 100 {
		t.Errorf("the completed job's status lost its progress: %+v", st)
	}
}
