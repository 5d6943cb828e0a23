package sdk_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/sdk"
	"github.com/shockwave-sched/shockwave/sdk/sdktest"
)

// quiet discards the SDK's logs in tests.
var quiet = slog.New(slog.DiscardHandler)

// epochSource yields perEpoch batches (their index) and then io.EOF, for
// ever; each Next costs work of the given duration (the emulated step).
type epochSource struct {
	perEpoch int
	i        int
	work     time.Duration
}

func (s *epochSource) Next(context.Context) (int, error) {
	if s.i == s.perEpoch {
		s.i = 0
		return 0, io.EOF
	}
	s.i++
	if s.work > 0 {
		spin(s.work)
	}
	return s.i, nil
}

// spin busy-waits d: a step's compute, without the timer slack of Sleep.
func spin(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
	}
}

// tracked is a job run through Steps that counts what its loop really did.
type tracked struct {
	job        *sdk.Job
	ran        atomic.Int64 // loop bodies executed
	late       atomic.Int64 // bodies that started without a RUN lease
	suspends   atomic.Int64
	resumes    atomic.Int64
	maxLatePer atomic.Int64 // most late bodies between two suspensions
}

func baseOptions(c *sdktest.Coordinator, id string) []sdk.Option {
	return []sdk.Option{sdk.WithURL(c.URL()), sdk.WithJobID(id), sdk.WithModel("test-model"),
		sdk.WithBatchSize(8), sdk.WithDatasetSize(64), sdk.WithThroughput(1000), sdk.WithLogger(quiet)}
}

func TestSteps_SuspendsAtTheNextBoundaryResumesAndReportsExactProgress(t *testing.T) {
	c := sdktest.Start(t, sdktest.Config{GPUs: 1, Round: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	const epochs = 120
	var wg sync.WaitGroup
	jobs := make([]*tracked, 2)
	for i, id := range []string{"alpha", "beta"} {
		tr := &tracked{}
		var lateSince atomic.Int64
		opts := append(baseOptions(c, id), sdk.WithEpochs(epochs),
			sdk.WithOnSuspend(func(context.Context, protocol.Lease) error {
				tr.suspends.Add(1)
				if n := lateSince.Swap(0); n > tr.maxLatePer.Load() {
					tr.maxLatePer.Store(n)
				}
				return nil
			}),
			sdk.WithOnResume(func(_ context.Context, l protocol.Lease) error {
				if l.Action != protocol.Run || len(l.Workers) != 1 {
					t.Errorf("%s resumed with lease %+v", id, l)
				}
				tr.resumes.Add(1)
				return nil
			}))
		job, err := sdk.Register(ctx, opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer job.Close()
		tr.job, jobs[i] = job, tr
		wg.Go(func() {
			for _, err := range sdk.Steps(ctx, job, &epochSource{perEpoch: 8, work: time.Millisecond}) {
				if err != nil {
					t.Errorf("%s: %v", id, err)
					return
				}
				if job.LeaseState() != sdk.Running {
					tr.late.Add(1)
					lateSince.Add(1)
				}
				tr.ran.Add(1)
			}
		})
	}
	wg.Wait()
	for _, tr := range jobs {
		id := tr.job.ID()
		if tr.suspends.Load() == 0 || tr.resumes.Load() == 0 {
			t.Errorf("%s: %d suspensions, %d resumptions; two jobs on one GPU must take turns", id, tr.suspends.Load(), tr.resumes.Load())
		}
		if m := tr.maxLatePer.Load(); m > 1 {
			t.Errorf("%s: %d steps started after a revocation before suspending; want at most the one in flight", id, m)
		}
		var row protocol.JobInfo
		sdktest.Eventually(t, 5*time.Second, id+" is completed", func() bool {
			row, _ = c.Job(id)
			return row.State == "completed"
		})
		if row.State != "completed" || row.StepsDone != tr.ran.Load() || row.Epoch != epochs {
			t.Errorf("%s: coordinator has state %s, %d steps, epoch %d; the loop ran %d steps in %d epochs",
				id, row.State, row.StepsDone, row.Epoch, tr.ran.Load(), epochs)
		}
		if tr.ran.Load() != 8*epochs {
			t.Errorf("%s: ran %d steps, want %d epochs × 8", id, tr.ran.Load(), epochs)
		}
		t.Logf("%s: %d steps, %d suspensions, %d late steps", id, tr.ran.Load(), tr.suspends.Load(), tr.late.Load())
	}
}

func TestRegister_ErrorsNameTheirCause(t *testing.T) {
	c := sdktest.Start(t, sdktest.Config{GPUs: 1})
	ctx := context.Background()
	_, err := sdk.Register(ctx, sdk.WithURL(c.URL()), sdk.WithJobID("x"))
	if err == nil || !contains(err.Error(), "WithModel") {
		t.Errorf("missing model: %v", err)
	}
	wide := append(baseOptions(c, "wide"), sdk.WithWorkers(4), sdk.WithEpochs(1))
	_, err = sdk.Register(ctx, wide...)
	if !errors.Is(err, sdk.ErrRegister) || !contains(err.Error(), "rejected") {
		t.Errorf("a gang wider than the cluster: %v", err)
	}
	_, err = sdk.Register(ctx, sdk.WithURL("nats://127.0.0.1:1"), sdk.WithJobID("x"), sdk.WithModel("m"),
		sdk.WithBatchSize(1), sdk.WithDatasetSize(1), sdk.WithEpochs(1))
	if !errors.Is(err, sdk.ErrRegister) || !contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("no server: %v", err)
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
