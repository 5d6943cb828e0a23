package sdk_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/sdk"
	"github.com/shockwave-sched/shockwave/sdk/sdktest"
)

// model is the "model" of the EXIT-mode test: the sum of the batch indices
// it trained on, which a correct resume reproduces exactly.
type model struct {
	Sum  int64          `json:"sum"`
	Prog sdk.Checkpoint `json:"progress"`
}

func TestExitMode_RestartedProcessesResumeFromTheCheckpoint(t *testing.T) {
	c := sdktest.Start(t, sdktest.Config{GPUs: 1, Round: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	const epochs, perEpoch = 80, 8

	// A competitor in suspend mode makes the coordinator take turns.
	other, err := sdk.Register(ctx, append(baseOptions(c, "other"), sdk.WithEpochs(epochs))...)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	otherDone := make(chan error, 1)
	go func() {
		for _, err := range sdk.Steps(ctx, other, &epochSource{perEpoch: perEpoch, work: time.Millisecond}) {
			if err != nil {
				otherDone <- err
				return
			}
		}
		otherDone <- nil
	}()

	path := filepath.Join(t.TempDir(), "ckpt.json")
	processes, ran := 0, int64(0)
	for finished := false; !finished; {
		processes++
		if processes > 50 {
			t.Fatal("more than 50 restarts")
		}
		finished, ran = runExitProcess(ctx, t, c, path, ran)
	}
	if err := <-otherDone; err != nil {
		t.Fatal(err)
	}
	var m model
	raw, _ := os.ReadFile(path)
	_ = json.Unmarshal(raw, &m)
	want := int64(epochs) * perEpoch * (perEpoch + 1) / 2
	if m.Sum != want || ran != epochs*perEpoch {
		t.Errorf("after %d processes: sum %d (want %d), %d steps (want %d)", processes, m.Sum, want, ran, epochs*perEpoch)
	}
	if processes < 2 {
		t.Errorf("the job was never preempted (%d process)", processes)
	}
	var row protocol.JobInfo
	sdktest.Eventually(t, 5*time.Second, "exiter is completed", func() bool {
		row, _ = c.Job("exiter")
		return row.State == "completed"
	})
	if row.State != "completed" || row.StepsDone != ran || row.Epoch != epochs {
		t.Errorf("coordinator row %+v; the processes ran %d steps", row, ran)
	}
}

// runExitProcess is one process of an EXIT-mode job: it loads the
// checkpoint, registers, trains until preempted or done, and saves.
func runExitProcess(ctx context.Context, t *testing.T, c *sdktest.Coordinator, path string, ran int64) (bool, int64) {
	t.Helper()
	var m model
	opts := append(baseOptions(c, "exiter"), sdk.WithEpochs(80), sdk.ExitOnSuspend())
	if raw, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		opts = append(opts, sdk.WithResume(m.Prog))
	}
	var job *sdk.Job
	save := func(context.Context, protocol.Lease) error {
		m.Prog = job.Checkpoint()
		data, _ := json.Marshal(m)
		return os.WriteFile(path, data, 0o600)
	}
	job, err := sdk.Register(ctx, append(opts, sdk.WithOnSuspend(save))...)
	if err != nil {
		t.Fatal(err)
	}
	defer job.Close()
	if processes := m.Prog.StepsDone; processes > 0 && !job.Resumed() {
		t.Error("a restarted process was not resumed")
	}
	src := &epochSource{perEpoch: 8, i: int(m.Prog.SamplesInEpoch / 8), work: time.Millisecond}
	for b, err := range sdk.Steps(ctx, job, src) {
		switch {
		case errors.Is(err, sdk.ErrPreempted):
			return false, ran
		case err != nil:
			t.Fatal(err)
		}
		m.Sum += int64(b)
		ran++
	}
	if err := save(ctx, protocol.Lease{}); err != nil {
		t.Fatal(err)
	}
	return true, ran
}

func TestOutage_TrainsUntilExpirySuspendsAndDeliversBufferedEventsInOrder(t *testing.T) {
	// No snapshot during the test: it reads every event back from the log,
	// which snapshots compact.
	c := sdktest.Start(t, sdktest.Config{GPUs: 1, Round: 300 * time.Millisecond, JobTimeout: 30 * time.Second, SnapshotRounds: 1 << 20})
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	var suspendedAt atomic.Pointer[time.Time]
	var resumed atomic.Int64
	job, err := sdk.Register(ctx, append(baseOptions(c, "steady"), sdk.WithEpochs(100_000),
		sdk.WithReconnectBackoff(50*time.Millisecond, 200*time.Millisecond),
		sdk.WithOnSuspend(func(context.Context, protocol.Lease) error {
			now := time.Now()
			suspendedAt.Store(&now)
			return nil
		}),
		sdk.WithOnResume(func(context.Context, protocol.Lease) error { resumed.Add(1); return nil }))...)
	if err != nil {
		t.Fatal(err)
	}
	defer job.Close()
	loopErr := make(chan error, 1)
	go func() {
		// An epoch every 16 ms: about 75 events a second with the samples,
		// within the job's event budget, so that the SDK merges none of
		// them while it waits to publish (the test wants every one).
		for _, err := range sdk.Steps(ctx, job, &epochSource{perEpoch: 8, work: 2 * time.Millisecond}) {
			if err != nil {
				loopErr <- err
				return
			}
		}
		loopErr <- nil
	}()
	sdktest.Eventually(t, 10*time.Second, "the job trains and the coordinator has its events", func() bool {
		r, _ := c.Job("steady")
		return r.StepsDone > 100
	})

	c.Down()
	down := time.Now()
	deadline := job.LeaseDeadline()
	stepsAtDown := job.StepsDone()
	if deadline.IsZero() || deadline.Before(down) {
		t.Fatalf("no valid lease when the coordinator went away (deadline %v)", deadline)
	}
	sdktest.Eventually(t, 5*time.Second, "the job suspends", func() bool { return suspendedAt.Load() != nil })
	at := *suspendedAt.Load()
	if at.Before(deadline) || at.After(deadline.Add(100*time.Millisecond)) {
		t.Errorf("suspended %v after the lease deadline; want within [0, 100ms]", at.Sub(deadline))
	}
	if job.StepsDone() <= stepsAtDown {
		t.Error("the job stopped training when the coordinator went away, before its lease expired")
	}
	if !contains(job.Reason(), "expired") {
		t.Errorf("reason %q does not say the lease expired", job.Reason())
	}
	buffered, seqAtOutage := job.Buffered(), job.Stats().Seq
	if buffered == 0 {
		t.Error("nothing was buffered during the outage")
	}
	t.Logf("ran %v past the outage, %d steps; suspended %v after the deadline; %d events buffered",
		at.Sub(down), job.StepsDone()-stepsAtDown, at.Sub(deadline), buffered)

	c.Up()
	sdktest.Eventually(t, 15*time.Second, "the job resumes", func() bool { return resumed.Load() > 0 })
	cancel()
	<-loopErr
	if err := job.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	sdktest.Eventually(t, 5*time.Second, "the coordinator has every step", func() bool {
		r, _ := c.Job("steady")
		return r.StepsDone == job.StepsDone() && r.LastSeq == job.Stats().Seq
	})
	// A batch may be stored twice: a registration's reply counts what the
	// coordinator folded, not what the log's ingest still holds, so the SDK
	// sends again what the reply says is missing and the fold drops the
	// repeats as out of order. What must hold is the order of each event's
	// first copy.
	seqs := storedSeqs(t, c, "steady")
	uniq := map[uint64]bool{}
	var last uint64
	for _, s := range seqs {
		if uniq[s] {
			continue
		}
		if s < last {
			t.Fatalf("event %d first stored after %d", s, last)
		}
		uniq[s], last = true, s
	}
	for s := uint64(1); s <= seqAtOutage; s++ {
		if !uniq[s] {
			t.Fatalf("event %d of %d never arrived", s, seqAtOutage)
		}
	}
}

// storedSeqs reads the sequence numbers of job's events in the order the
// coordinator's log stored them.
func storedSeqs(t *testing.T, c *sdktest.Coordinator, job string) []uint64 {
	t.Helper()
	js, err := jetstream.New(c.Client())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// How many records the log holds on the job's subject, then exactly
	// those, each fetch waiting for them: a fetch that returns nothing at
	// once does not prove the log has no more. (Reading until an empty
	// FetchNoWait, one CI run on a loaded machine found events 1–43 and
	// "event 44 of 607 never arrived" while the coordinator's state had
	// every step; reading a counted number, a lost event still fails.)
	stream, err := js.Stream(ctx, "SHOCKWAVE_LOG")
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(c.Subj.Events(job)))
	if err != nil {
		t.Fatal(err)
	}
	want := info.State.Subjects[c.Subj.Events(job)]
	cons, err := js.OrderedConsumer(ctx, "SHOCKWAVE_LOG", jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{c.Subj.Events(job)}})
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for got := uint64(0); got < want; {
		batch, err := cons.Fetch(int(min(want-got, 500)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			b, err := protocol.DecodeBatch(m.Data(), 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range b.Events {
				seqs = append(seqs, e.Seq)
			}
		}
		if n == 0 {
			t.Fatalf("read %d of the %d records the log holds on %s: no more came in 5 s", got, want, c.Subj.Events(job))
		}
		got += uint64(n)
	}
	return seqs
}
