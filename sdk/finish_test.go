package sdk_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/sdk"
	"github.com/shockwave-sched/shockwave/sdk/sdktest"
)

// flood publishes single-event batches on job's events subject with a
// job's rights (the embedded server's none mode lets any job client do
// so): first burst of them at once, then one every 333 µs or so until stop
// closes. Every event spends the job's budget in the coordinator's fold
// (2,000 at once, 200 a second), so after the burst it never holds the two
// events of a batch for long; the events themselves are stale (seq 1) and
// change nothing else. It returns when the flood has ended.
func flood(t *testing.T, nc *nats.Conn, subject, job string, burst int, started, stop chan struct{}) {
	t.Helper()
	data := []byte(fmt.Sprintf(`{"v":1,"job":%q,"events":[{"v":1,"type":"progress","job":%q,"seq":1,"steps_done":0,"total_steps":1000,"epoch":0,"batch_size":8}]}`, job, job))
	for i := range burst {
		if err := nc.Publish(subject, data); err != nil {
			t.Error(err)
			return
		}
		if i%500 == 499 {
			_ = nc.Flush()
		}
	}
	_ = nc.Flush()
	close(started)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			_ = nc.Flush()
			return
		case <-tick.C:
			for range 3 {
				_ = nc.Publish(subject, data)
			}
		}
	}
}

func TestFinish_ADoneEventTheCoordinatorDidNotFoldIsSentAgainUntilItIs(t *testing.T) {
	c := sdktest.Start(t, sdktest.Config{GPUs: 1, Round: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	job, err := sdk.Register(ctx, append(baseOptions(c, "victim"), sdk.WithEpochs(1000))...)
	if err != nil {
		t.Fatal(err)
	}
	defer job.Close()
	job.RecordSteps(5, 50*time.Millisecond)
	if err := job.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	sdktest.Eventually(t, 10*time.Second, "the job's first events folded", func() bool {
		row, ok := c.Job("victim")
		return ok && row.StepsDone == 5
	})

	// Another client spends the job's event budget and keeps it spent, so
	// the coordinator rejects the batch that carries done although the
	// server took it.
	started, stop, flooded := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(flooded)
		flood(t, c.JobClient(), c.Subj.Events("victim"), "victim", 2500, started, stop)
	}()
	<-started
	job.RecordSteps(3, 30*time.Millisecond)
	fctx, fcancel := context.WithTimeout(ctx, 30*time.Second)
	defer fcancel()
	finished := make(chan error, 1)
	go func() { finished <- job.Finish(fctx) }()

	time.Sleep(2 * time.Second) // the flood goes on while the job finishes
	if row, ok := c.Job("victim"); ok && row.State == "completed" {
		// A starved machine can leave gaps in the flood long enough for a
		// batch to pass; then this run proves less, but nothing is wrong.
		t.Logf("the job completed while the flood went on: it did not hold the done back this time")
	}
	close(stop)
	<-flooded
	if err := <-finished; err != nil {
		t.Fatalf("Finish: %v", err)
	}
	// Finish returns once the coordinator has the done event.
	row, ok := c.Job("victim")
	if !ok || row.State != "completed" || row.StepsDone != 8 {
		t.Errorf("after Finish returned, the coordinator shows %+v", row)
	}
	if n := job.Buffered(); n != 0 {
		t.Errorf("%d events still buffered after Finish", n)
	}
}

func TestFinish_NoEventFollowsDone(t *testing.T) {
	c := sdktest.Start(t, sdktest.Config{GPUs: 1, Round: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := &wireCount{subject: []byte(c.Subj.Events("quiet"))}
	job, err := sdk.Register(ctx, append(baseOptions(c, "quiet"), sdk.WithEpochs(1000),
		sdk.WithSampleInterval(20*time.Millisecond), sdk.WithNATSOptions(nats.SetCustomDialer(w)))...)
	if err != nil {
		t.Fatal(err)
	}
	defer job.Close()
	job.RecordSteps(5, 50*time.Millisecond)
	if err := job.Finish(ctx); err != nil {
		t.Fatal(err)
	}
	if row, ok := c.Job("quiet"); !ok || row.State != "completed" {
		t.Fatalf("after Finish: %+v", row)
	}
	_, before := w.counts()
	time.Sleep(time.Second) // ten heartbeat intervals at 0.2 s rounds
	job.RecordSteps(1, time.Millisecond)
	if err := job.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, after := w.counts(); after != before {
		t.Errorf("%d batches published after done", after-before)
	}
}
