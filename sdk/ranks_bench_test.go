package sdk_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/sdk"
	"github.com/shockwave-sched/shockwave/sdk/sdktest"
)

// BenchmarkRankSuspension measures the suspension agreement of an 8-rank
// job whose steps take 50 ms and end in an all-reduce (as DDP's do): the
// time from a SUSPEND lease published to the moment the last rank stopped
// (entered its suspend hook). Each iteration is one suspension at a
// random phase of a step, then a resumption. It reports the median, p99
// and maximum in milliseconds and in steps. Run it with a fixed count:
//
//	go test -run XXX -bench RankSuspension -benchtime 100x ./sdk
func BenchmarkRankSuspension(b *testing.B) {
	const world, step = 8, 50 * time.Millisecond
	c := sdktest.Start(b, sdktest.Config{GPUs: world, Round: time.Hour})
	var stopped [world]atomic.Int64 // unix ns of each rank's latest stop
	jobs := registerRanks(b, world, func(r int) []sdk.Option {
		return append(rankOptions(c, "bench8", r, world, 1<<20),
			sdk.WithOnSuspend(func(context.Context, protocol.Lease) error {
				stopped[r].Store(time.Now().UnixNano())
				return nil
			}))
	})
	ctx, cancel := context.WithCancel(context.Background())
	coll := newCollective(world, time.Minute)
	var wg sync.WaitGroup
	for r := range world {
		wg.Go(func() {
			k := int64(-1)
			for _, err := range sdk.Steps(ctx, jobs[r], sdk.SourceFunc[int](func(context.Context) (int, error) { return 0, nil })) {
				if err != nil {
					return
				}
				if k < 0 {
					k = jobs[r].StepsDone()
				}
				if _, err := coll.allReduce(r, k, 1); err != nil {
					b.Error(err)
					return
				}
				k++
				time.Sleep(step)
			}
		})
	}
	l := newLeaser(b, c, "bench8")
	rng := rand.New(rand.NewPCG(3, 4))
	lat := make([]time.Duration, 0, b.N)
	var gaps int64 // steps rank 0 ran between the SUSPEND and the stop
	b.ResetTimer()
	for range b.N {
		l.run(0, 1, 2, 3, 4, 5, 6, 7)
		waitFor(ctx, func() bool { return allRunning(jobs) })
		time.Sleep(2*step + time.Duration(rng.Int64N(int64(step))))
		for r := range world {
			stopped[r].Store(0)
		}
		sent := time.Now()
		at := jobs[0].StepsDone()
		l.suspend()
		var last int64
		waitFor(ctx, func() bool {
			last = 0
			for r := range world {
				s := stopped[r].Load()
				if s == 0 {
					return false
				}
				last = max(last, s)
			}
			return true
		})
		lat = append(lat, time.Duration(last-sent.UnixNano()))
		gaps += jobs[0].StepsDone() - at
	}
	b.StopTimer()
	cancel()
	for _, j := range jobs {
		_ = j.Close()
	}
	wg.Wait()
	slices.Sort(lat)
	q := func(p float64) time.Duration { return lat[int(p*float64(len(lat)-1))] }
	b.ReportMetric(float64(q(0.5))/1e6, "p50-ms")
	b.ReportMetric(float64(q(0.99))/1e6, "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1])/1e6, "max-ms")
	b.ReportMetric(float64(q(0.99))/float64(step), "p99-steps")
	b.ReportMetric(float64(gaps)/float64(len(lat)), "steps-to-stop")
}

// BenchmarkStepTwoRanks is BenchmarkStep for rank 0 of a 2-rank job whose
// other rank trains alongside: the per-step path with the rank agreement's
// gate (rank 0 raises the release every few milliseconds of steps).
func BenchmarkStepTwoRanks(b *testing.B) {
	c := sdktest.Start(b, sdktest.Config{GPUs: 2, Round: time.Hour})
	jobs := registerRanks(b, 2, func(r int) []sdk.Option { return rankOptions(c, "step2", r, 2, 1<<33) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	l := newLeaser(b, c, "step2")
	src := sdk.SourceFunc[int](func(context.Context) (int, error) { return 1, nil })
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		for _, err := range sdk.Steps(ctx, jobs[1], src) {
			if err != nil {
				return
			}
		}
	})
	l.run(0, 1) // rank 0 registered, so it hears it; the generation starts with its loop
	b.ReportAllocs()
	b.ResetTimer()
	n := 0
	for _, err := range sdk.Steps(ctx, jobs[0], src) {
		if err != nil {
			b.Fatal(err)
		}
		if n++; n == b.N {
			break
		}
	}
}
