package sdk_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/sdk"
	"github.com/shockwave-sched/shockwave/sdk/sdktest"
)

// leaser publishes leases for one job as the coordinator would, so that a
// test decides when the job runs (the coordinator's rounds are an hour).
type leaser struct {
	t     testing.TB
	c     *sdktest.Coordinator
	nc    *nats.Conn
	job   string
	round int
}

func newLeaser(t testing.TB, c *sdktest.Coordinator, job string) *leaser {
	return &leaser{t: t, c: c, nc: c.Client(), job: job, round: 1000}
}

func unixNow() float64 { return float64(time.Now().UnixNano()) / 1e9 }

func (l *leaser) run(workers ...int) {
	l.round++
	now := unixNow()
	l.c.PublishLease(l.nc, protocol.Lease{Job: l.job, Round: l.round, Action: protocol.Run, Workers: workers,
		Start: now, Expiry: now + 3600})
}

func (l *leaser) runOn(devices []protocol.NodeDevices, workers ...int) {
	l.round++
	now := unixNow()
	l.c.PublishLease(l.nc, protocol.Lease{Job: l.job, Round: l.round, Action: protocol.Run, Workers: workers,
		Devices: devices, Start: now, Expiry: now + 3600})
}

func (l *leaser) suspend() {
	l.round++
	now := unixNow()
	l.c.PublishLease(l.nc, protocol.Lease{Job: l.job, Round: l.round, Action: protocol.Suspend, Start: now, Expiry: now + 1,
		Reason: "test"})
}

// collective is an in-process all-reduce over the ranks' goroutines: every
// rank contributes a value for a step and gets the sum in rank order. A
// rank that arrives with another step than the others gets an error, and
// a rank that waits longer than the timeout gets one (the hang a
// disagreement would cause, bounded).
type collective struct {
	mu      sync.Mutex
	world   int
	timeout time.Duration
	cur     *reduction
}

type reduction struct {
	step   int64
	vals   []float64
	n      int
	done   chan struct{}
	result float64
}

func newCollective(world int, timeout time.Duration) *collective {
	return &collective{world: world, timeout: timeout}
}

func (c *collective) allReduce(rank int, step int64, v float64) (float64, error) {
	c.mu.Lock()
	r := c.cur
	if r == nil {
		r = &reduction{step: step, vals: make([]float64, c.world), done: make(chan struct{})}
		c.cur = r
	}
	if r.step != step {
		c.mu.Unlock()
		return 0, fmt.Errorf("rank %d entered the all-reduce of step %d while others are in step %d", rank, step, r.step)
	}
	r.vals[rank] = v
	r.n++
	if r.n == c.world {
		for _, x := range r.vals {
			r.result += x
		}
		c.cur = nil
		close(r.done)
	}
	c.mu.Unlock()
	select {
	case <-r.done:
		return r.result, nil
	case <-time.After(c.timeout):
		return 0, fmt.Errorf("rank %d waited %v in the all-reduce of step %d (%d of %d ranks arrived): a hang", rank, c.timeout, step, r.n, c.world)
	}
}

// rankOptions are the options of rank rank of a test job.
func rankOptions(c *sdktest.Coordinator, id string, rank, world int, steps int64) []sdk.Option {
	return []sdk.Option{sdk.WithURL(c.URL()), sdk.WithJobID(id), sdk.WithModel("ranks-test"), sdk.WithBatchSize(8),
		sdk.WithDatasetSize(1 << 20), sdk.WithTotalSteps(steps), sdk.WithRank(rank, world),
		sdk.WithRankTimeout(2*time.Second, 20*time.Second), sdk.WithRegisterTimeout(10 * time.Second),
		sdk.WithSampleInterval(50 * time.Millisecond)}
}

// registerRanks registers the ranks of a job concurrently.
func registerRanks(t testing.TB, world int, opts func(rank int) []sdk.Option) []*sdk.Job {
	t.Helper()
	jobs := make([]*sdk.Job, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := range world {
		wg.Go(func() { jobs[r], errs[r] = sdk.Register(context.Background(), opts(r)...) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	t.Cleanup(func() {
		for _, j := range jobs {
			_ = j.Close()
		}
	})
	return jobs
}

// trainRanks runs each job's loop (a millisecond a step, no data) on a
// goroutine of its own until ctx ends or the loop does; wait waits for
// them all and returns each rank's error.
func trainRanks(ctx context.Context, jobs []*sdk.Job) (wait func() []error) {
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for r := range jobs {
		wg.Go(func() {
			for _, err := range sdk.Steps(ctx, jobs[r], sdk.SourceFunc[int](func(context.Context) (int, error) { return 0, nil })) {
				if err != nil {
					errs[r] = err
					return
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	return func() []error { wg.Wait(); return errs }
}
