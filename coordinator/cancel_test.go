package coordinator_test

import (
	"errors"
	"testing"

	"github.com/shockwave-sched/shockwave/coordinator"
	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
)

// TestCancel_EndsTheJobFreesItsGPUsAndRefusesItsEvents checks Core.Cancel:
// the job ends as cancelled, the next round gives its GPU to another job,
// its later events are refused, and cancelling again, an unknown job or
// without a reason is an error that changes nothing.
func TestCancel_EndsTheJobFreesItsGPUsAndRefusesItsEvents(t *testing.T) {
	pol, err := policy.New("gavel", policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := coordinator.NewCore(coordinator.Config{GPUs: 1, RoundSeconds: 10}, pol)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		reg := protocol.Register{V: protocol.Version, Job: id, Name: "x", Model: "m", Workers: 1, BatchSize: 8,
			DatasetSize: 80, TotalSteps: 1000, Priority: 1, Throughput: 1}
		if err := c.Register(0, &reg); err != nil {
			t.Fatal(err)
		}
	}
	rd, err := c.Tick(0)
	if err != nil {
		t.Fatal(err)
	}
	running := rd.Plan.Run[0]
	if err := c.Cancel(1, running, ""); !errors.Is(err, coordinator.ErrNoReason) {
		t.Fatalf("cancel without reason: %v", err)
	}
	if err := c.Cancel(1, "nobody", "x"); !errors.Is(err, coordinator.ErrUnknownJob) {
		t.Fatalf("cancel of an unknown job: %v", err)
	}
	if err := c.Cancel(1, running, "owner"); err != nil {
		t.Fatal(err)
	}
	if err := c.Cancel(2, running, "owner"); !errors.Is(err, coordinator.ErrJobEnded) {
		t.Fatalf("second cancel: %v", err)
	}
	e := protocol.Event{V: protocol.Version, Type: protocol.EventProgress, Job: running, Seq: 1, Steps: 1, Elapsed: 1, StepsDone: 1, TotalSteps: 1000, BatchSize: 8}
	if _, err := c.Apply(3, &e); !errors.Is(err, coordinator.ErrJobEnded) {
		t.Fatalf("event of a cancelled job: %v", err)
	}
	rd, err = c.Tick(10)
	if err != nil {
		t.Fatal(err)
	}
	if len(rd.Plan.Run) != 1 || rd.Plan.Run[0] == running {
		t.Fatalf("round after the cancel runs %v", rd.Plan.Run)
	}
	st, _ := c.Job(running)
	if st.State != string(coordinator.Cancelled) {
		t.Fatalf("state %s", st.State)
	}
}
