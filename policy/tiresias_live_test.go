package policy_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/sdk"
	"github.com/shockwave-sched/shockwave/sdk/sdktest"
)

// liveJob is a job of the Go SDK that steps until cancelled and counts its
// suspensions and resumptions.
type liveJob struct {
	job               *sdk.Job
	steps             atomic.Int64
	suspends, resumes atomic.Int64
}

func startLiveJob(ctx context.Context, t *testing.T, wg *sync.WaitGroup, url, id string, workers int) *liveJob {
	t.Helper()
	lj := &liveJob{}
	job, err := sdk.Register(ctx, sdk.WithURL(url), sdk.WithJobID(id), sdk.WithModel("test-model"), sdk.WithWorkers(workers),
		sdk.WithBatchSize(8), sdk.WithDatasetSize(1<<20), sdk.WithTotalSteps(1<<30), sdk.WithLogger(slog.New(slog.DiscardHandler)),
		sdk.WithOnSuspend(func(context.Context, protocol.Lease) error { lj.suspends.Add(1); return nil }),
		sdk.WithOnResume(func(context.Context, protocol.Lease) error { lj.resumes.Add(1); return nil }))
	if err != nil {
		t.Fatal(err)
	}
	lj.job = job
	t.Cleanup(func() { job.Close() })
	wg.Go(func() {
		src := sdk.SourceFunc[int](func(context.Context) (int, error) { time.Sleep(2 * time.Millisecond); return 1, nil })
		for _, err := range sdk.Steps(ctx, job, src) {
			if err != nil {
				return
			}
			lj.steps.Add(1)
		}
	})
	return lj
}

// planLog records the distinct consecutive run sets of the coordinator's
// plans, polled every 20 ms until stop.
type planLog struct {
	mu   sync.Mutex
	seq  []string
	quit chan struct{}
	done chan struct{}
	once sync.Once
}

func watchPlans(c *sdktest.Coordinator) *planLog {
	l := &planLog{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		last := ""
		for {
			select {
			case <-l.quit:
				return
			case <-time.After(20 * time.Millisecond):
			}
			st := c.Status()
			if st.Plan == nil {
				continue
			}
			if k := strings.Join(slices.Sorted(slices.Values(st.Plan.Run)), "+"); k != last && k != "" {
				l.mu.Lock()
				l.seq = append(l.seq, k)
				l.mu.Unlock()
				last = k
			}
		}
	}()
	return l
}

// Seq returns the run sets so far.
func (l *planLog) Seq() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.seq)
}

// Stop ends the polling and waits for it (before the coordinator stops).
func (l *planLog) Stop() {
	l.once.Do(func() { close(l.quit) })
	<-l.done
}

// TestTiresias_LiveCoordinatorBackfillsDemotesAndPreempts runs the
// tiresias policy on a real coordinator (embedded NATS and JetStream) with
// real SDK jobs on 2 GPUs and 3 GPU-second demotion: the first job runs;
// a 2-GPU job registered next waits behind it in queue 0 while a 1-GPU
// job registered after it backfills the free GPU; when the first job
// passes 3 GPU-seconds it moves to queue 1, and the 2-GPU job, now first
// in queue 0, takes both GPUs and preempts the backfilled job; when it too
// passes the threshold, the two 1-GPU jobs run again.
func TestTiresias_LiveCoordinatorBackfillsDemotesAndPreempts(t *testing.T) {
	c := sdktest.Start(t, sdktest.Config{GPUs: 2, Round: 200 * time.Millisecond, Policy: "tiresias", JobTimeout: 5 * time.Second,
		PolicyOptions: policy.Options{Config: json.RawMessage(`{"thresholds_gpu_seconds":[3]}`)}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	plans := watchPlans(c)
	defer plans.Stop()
	old := startLiveJob(ctx, t, &wg, c.URL(), "old", 1)
	sdktest.Eventually(t, 10*time.Second, "old runs", func() bool { return old.steps.Load() > 0 })
	startLiveJob(ctx, t, &wg, c.URL(), "wide", 2)
	sdktest.Eventually(t, 10*time.Second, "wide waits with a reason", func() bool {
		plan := c.Status().Plan
		if plan == nil {
			return false
		}
		for _, e := range plan.Explain {
			if e.Job == "wide" && !e.Run && strings.Contains(e.Reason, "queue 0") && strings.Contains(e.Reason, "does not fit") {
				return true
			}
		}
		return false
	})
	small := startLiveJob(ctx, t, &wg, c.URL(), "small", 1)
	want := []string{"old", "old+small", "wide", "old+small"}
	deadline := time.Now().Add(30 * time.Second)
	for len(plans.Seq()) < len(want) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(time.Second) // queue 1 is now stable: nothing may change
	plans.Stop()
	if seq := plans.Seq(); !slices.Equal(seq, want) {
		t.Fatalf("run sets over time %v, want %v", seq, want)
	}
	// the jobs saw it: both 1-GPU jobs were suspended for the 2-GPU job and resumed
	sdktest.Eventually(t, 10*time.Second, "old and small are suspended and resumed", func() bool {
		return old.suspends.Load() >= 1 && old.resumes.Load() >= 1 && small.suspends.Load() >= 1 && small.resumes.Load() >= 1
	})
	seq := plans.Seq()
	t.Logf("run sets %v; old %d steps, small %d steps", seq, old.steps.Load(), small.steps.Load())
}
