package sdk_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/sdk"
	"github.com/shockwave-sched/shockwave/sdk/sdktest"
)

// hammer changes j's batch size from four goroutines as fast as they can
// for d while a fifth records a step of 1 ms every millisecond; it returns
// the job's steps and the number of changes.
func hammer(j *sdk.Job, d time.Duration) (steps, changes int64) {
	var stop atomic.Bool
	var n atomic.Int64
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for k := 0; !stop.Load(); k++ {
				if j.SetBatchSize(16*(1+(i+k)%4)) == nil {
					n.Add(1)
				}
			}
		})
	}
	wg.Go(func() {
		for !stop.Load() {
			j.RecordSteps(1, time.Millisecond)
			time.Sleep(time.Millisecond)
		}
	})
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	return j.StepsDone(), n.Load()
}

// Through a node agent each batch is an uplink line, and the agent drops a
// process's lines past its rate: the same job sends no more lines than
// that rate allows (the test's agent counts them and drops none), and
// every step and second still reaches the coordinator.
func TestUplink_AJobChangingItsBatchSizeFastKeepsToTheAgentsLineRate(t *testing.T) {
	c := sdktest.Start(t, sdktest.Config{Round: 200 * time.Millisecond, JobTimeout: time.Hour})
	p, _ := startUplinkProc(t, c, "hammer-up")
	if got := p.line(t); got != "registered uplinked=true conn=false relayed=true" {
		t.Fatalf("child: %q", got)
	}
	activeJob(t, c, "hammer-up")
	var steps int64
	if _, err := fmt.Sscanf(p.do(t, "hammer 1500"), "hammered steps=%d", &steps); err != nil || steps == 0 {
		t.Fatalf("hammer: %v (%d steps)", err, steps)
	}
	if got := p.do(t, "finish"); got != "finish ok" {
		t.Fatalf("finish: %q", got)
	}
	var events []time.Time
	for _, l := range p.agent.lines() {
		if l.op == protocol.UplinkEvents {
			events = append(events, l.at)
		}
	}
	if len(events) == 0 {
		t.Fatal("no batch reached the agent")
	}
	// Over every stretch from one batch to a later one, no more lines than
	// the agent's burst and rate allow (a millisecond of slack per line).
	for i := range events {
		for k := i + 1; k < len(events); k++ {
			allowed := protocol.UplinkLineBurst + int(events[k].Sub(events[i]).Seconds()*protocol.UplinkLineRate) + 1
			if n := k - i + 1; n > allowed {
				t.Fatalf("%d batches in %v, the agent forwards %d", n, events[k].Sub(events[i]), allowed)
			}
		}
	}
	info, _ := c.Job("hammer-up")
	t.Logf("%d batches over %v; the coordinator: %s, %d steps, run time %.3f s", len(events), events[len(events)-1].Sub(events[0]), info.State, info.StepsDone, info.RunTime)
	if info.State != "completed" || info.StepsDone != steps || math.Abs(info.RunTime-float64(steps)*1e-3) > 1e-6 {
		t.Errorf("the coordinator has %s, %d steps in %.6f s; the job recorded %d steps of 1 ms", info.State, info.StepsDone, info.RunTime, steps)
	}
}

// A job that changes its batch size thousands of times a second while it
// steps (hammer) sends far more events
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
	_, changes := hammer(job, time.Second)
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
		changes, st.Seq, st.StepsDone, info.RunTime, info.LastSeq)
	if changes < 5*2000 {
		t.Fatalf("only %d size changes: the test did not exceed the budget", changes)
	}
	if info.State != "completed" || info.StepsDone != st.StepsDone || info.BatchSize != 40 {
		t.Errorf("the coordinator has %s, %d steps at batch size %d; want completed, %d steps at 40", info.State, info.StepsDone, info.BatchSize, st.StepsDone)
	}
	if want := float64(st.StepsDone) * 1e-3; math.Abs(info.RunTime-want) > 1e-6 {
		t.Errorf("the coordinator's run time %.6f s, the job recorded %.6f s", info.RunTime, want)
	}
}
