package sdk_test

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shockwave-sched/shockwave/sdk"
	"github.com/shockwave-sched/shockwave/sdk/sdktest"
)

// A job that changes its batch size thousands of times a second while it
// steps (four goroutines changing it, two stepping) sends far more events
// than the coordinator's budget folds. Before the SDK paced itself the
// coordinator refused all but about 2,000 of them as rate_limited, with
// the steps and seconds they carried: a run of 1.07 s of recorded steps
// reached the coordinator as 0.04 s of run time. Paced, with the fast
// changes coalesced, every step and second arrives, the last batch size
// stands, and Finish confirms the done event.
func TestEvents_AJobChangingItsBatchSizeFasterThanItsBudgetLosesNoStepOrSecond(t *testing.T) {
	c := sdktest.Start(t, sdktest.Config{GPUs: 1, Round: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	job, err := sdk.Register(ctx, append(baseOptions(c, "hammer"), sdk.WithTotalSteps(100_000))...)
	if err != nil {
		t.Fatal(err)
	}
	defer job.Close()
	var stop atomic.Bool
	var changes atomic.Int64
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for n := 0; !stop.Load(); n++ {
				if err := job.SetBatchSize(16 * (1 + (i+n)%4)); err != nil {
					t.Error(err)
					return
				}
				changes.Add(1)
			}
		})
	}
	for range 2 {
		wg.Go(func() {
			for !stop.Load() {
				job.RecordSteps(1, time.Millisecond)
				time.Sleep(time.Millisecond)
			}
		})
	}
	time.Sleep(time.Second)
	stop.Store(true)
	wg.Wait()
	if err := job.SetBatchSize(40); err != nil {
		t.Fatal(err)
	}
	st := job.Stats()
	fctx, fcancel := context.WithTimeout(ctx, 30*time.Second)
	defer fcancel()
	if err := job.Finish(fctx); err != nil {
		t.Fatalf("finish: %v", err)
	}
	info, ok := c.Job("hammer")
	if !ok {
		t.Fatal("the coordinator does not know the job")
	}
	t.Logf("%d size changes, %d events numbered, %d steps; the coordinator: run time %.3f s, last seq %d",
		changes.Load(), st.Seq, st.StepsDone, info.RunTime, info.LastSeq)
	if changes.Load() < 5*2000 {
		t.Fatalf("only %d size changes: the test did not exceed the budget", changes.Load())
	}
	if info.State != "completed" || info.StepsDone != st.StepsDone || info.BatchSize != 40 {
		t.Errorf("the coordinator has %s, %d steps at batch size %d; want completed, %d steps at 40", info.State, info.StepsDone, info.BatchSize, st.StepsDone)
	}
	if want := float64(st.StepsDone) * 1e-3; math.Abs(info.RunTime-want) > 1e-6 {
		t.Errorf("the coordinator's run time %.6f s, the job recorded %.6f s", info.RunTime, want)
	}
}
