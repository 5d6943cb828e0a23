package sdk_test

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/sdk"
	"github.com/shockwave-sched/shockwave/sdk/sdktest"
)

func TestImports_TheSDKNeverImportsTheServerOrTheCoordinator(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/shockwave-sched/shockwave/sdk").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		switch {
		case strings.HasPrefix(dep, "github.com/nats-io/nats-server"),
			strings.HasPrefix(dep, "github.com/shockwave-sched/shockwave/") &&
				dep != "github.com/shockwave-sched/shockwave/protocol" && dep != "github.com/shockwave-sched/shockwave/sdk":
			t.Errorf("sdk depends on %s", dep)
		}
	}
}

// BenchmarkStep measures the iterator's overhead per step: a source that
// returns a constant and an empty loop body, so everything measured is the
// SDK (lease check, step timing, counters).
func BenchmarkStep(b *testing.B) {
	c := sdktest.Start(b, sdktest.Config{GPUs: 1, Round: time.Second})
	ctx := context.Background()
	job, err := sdk.Register(ctx, append(baseOptions(c, "bench"), sdk.WithDatasetSize(1<<30), sdk.WithTotalSteps(1<<40))...)
	if err != nil {
		b.Fatal(err)
	}
	defer job.Close()
	if _, err := job.WaitRun(ctx); err != nil {
		b.Fatal(err)
	}
	src := sdk.SourceFunc[int](func(context.Context) (int, error) { return 1, nil })
	b.ReportAllocs()
	b.ResetTimer()
	n := 0
	for _, err := range sdk.Steps(ctx, job, src) {
		if err != nil {
			b.Fatal(err)
		}
		n++
		if n == b.N {
			break
		}
	}
}

// BenchmarkRecordSteps is the low-level per-step call alone.
func BenchmarkRecordSteps(b *testing.B) {
	c := sdktest.Start(b, sdktest.Config{GPUs: 1, Round: time.Second})
	job, err := sdk.Register(context.Background(), append(baseOptions(c, "rec"), sdk.WithEpochs(1))...)
	if err != nil {
		b.Fatal(err)
	}
	defer job.Close()
	b.ReportAllocs()
	for b.Loop() {
		job.RecordSteps(1, time.Microsecond)
		if job.Boundary() == sdk.Stop {
			b.Fatal("stopped")
		}
	}
}

// TestRevocationLatency measures the time from a SUSPEND lease published on
// the job's lease subject to the training loop stopping at its next step
// boundary, excluding the step itself (steps here are empty). It reports
// percentiles and asserts nothing about them.
func TestRevocationLatency(t *testing.T) {
	if testing.Short() {
		t.Skip("latency measurement")
	}
	// A long round: the coordinator stays out of the way and the test
	// grants and revokes leases itself, as the coordinator would.
	c := sdktest.Start(t, sdktest.Config{GPUs: 1, Round: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stopped atomic.Int64 // unix ns of the last suspension
	job, err := sdk.Register(ctx, append(baseOptions(c, "latency"), sdk.WithDatasetSize(1<<30), sdk.WithTotalSteps(1<<40),
		sdk.WithOnSuspend(func(context.Context, protocol.Lease) error {
			stopped.Store(time.Now().UnixNano())
			return nil
		}))...)
	if err != nil {
		t.Fatal(err)
	}
	defer job.Close()
	nc := c.Client()
	now := func() float64 { return float64(time.Now().UnixNano()) / 1e9 }
	round := 1
	grant := func() {
		c.PublishLease(nc, protocol.Lease{Job: "latency", Round: round, Action: protocol.Run, Workers: []int{0},
			Start: now(), Expiry: now() + 3600})
		round++
	}
	grant()
	go func() {
		for _, err := range sdk.Steps(ctx, job, sdk.SourceFunc[int](func(context.Context) (int, error) { return 0, nil })) {
			if err != nil {
				return
			}
		}
	}()
	const trials = 200
	lat := make([]time.Duration, 0, trials)
	for range trials {
		base := job.StepsDone()
		sdktest.Eventually(t, 5*time.Second, "the job trains", func() bool { return job.StepsDone() > base })
		stopped.Store(0)
		sent := time.Now()
		c.PublishLease(nc, protocol.Lease{Job: "latency", Round: round, Action: protocol.Suspend, Start: now(), Expiry: now() + 1})
		round++
		sdktest.Eventually(t, 5*time.Second, fmt.Sprintf("the job stops (trial %d, state %v, %s)", len(lat), job.LeaseState(), job.Reason()), func() bool { return stopped.Load() != 0 })
		lat = append(lat, time.Duration(stopped.Load()-sent.UnixNano()))
		grant()
	}
	slices.Sort(lat)
	p := func(q float64) time.Duration { return lat[int(q*float64(len(lat)-1))] }
	t.Logf("revocation to stop, %d trials over TCP loopback: p50 %v, p90 %v, p99 %v, max %v",
		trials, p(0.5), p(0.9), p(0.99), lat[len(lat)-1])
}
