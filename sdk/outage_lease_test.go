package sdk_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/sdk"
	"github.com/shockwave-sched/shockwave/sdk/sdktest"
)

// TestOutage_ALeaseOfSeveralRoundsCarriesTheJobThroughAShortOutage: a
// coordinator (server and service) that dies just after renewing a job's
// lease and is back 3 s later, on 2 s rounds: with leases of one round the
// job suspends (its lease ends 2.5 s after the round's start); with leases
// of four rounds (8.5 s) the restarted coordinator renews it in time and
// the job never stops training.
func TestOutage_ALeaseOfSeveralRoundsCarriesTheJobThroughAShortOutage(t *testing.T) {
	for _, tc := range []struct {
		rounds   int
		suspends bool
	}{{1, true}, {4, false}} {
		c := sdktest.Start(t, sdktest.Config{GPUs: 1, Round: 2 * time.Second, JobTimeout: 30 * time.Second, LeaseRounds: tc.rounds})
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		var suspended atomic.Int64
		var why atomic.Value
		job, err := sdk.Register(ctx, append(baseOptions(c, "carried"), sdk.WithEpochs(100_000),
			sdk.WithReconnectBackoff(50*time.Millisecond, 200*time.Millisecond),
			sdk.WithOnSuspend(func(_ context.Context, l protocol.Lease) error {
				suspended.Add(1)
				why.Store(fmt.Sprintf("%+v; %s", l, time.Now().Format("15:04:05.000")))
				return nil
			}))...)
		if err != nil {
			t.Fatal(err)
		}
		loopErr := make(chan error, 1)
		go func() {
			for _, err := range sdk.Steps(ctx, job, &epochSource{perEpoch: 8, work: 200 * time.Microsecond}) {
				if err != nil {
					loopErr <- err
					return
				}
			}
			loopErr <- nil
		}()
		// Just after a lease was sent: the job holds close to its whole length.
		length := time.Duration(tc.rounds)*2*time.Second + 500*time.Millisecond
		sdktest.Eventually(t, 30*time.Second, "a fresh lease", func() bool {
			return job.LeaseState() == sdk.Running && time.Until(job.LeaseDeadline()) > length-700*time.Millisecond
		})
		t.Logf("down at %s, lease to %s", time.Now().Format("15:04:05.000"), job.LeaseDeadline().Format("15:04:05.000"))
		c.Down()
		time.Sleep(3 * time.Second)
		c.Up()
		steps := job.StepsDone()
		sdktest.Eventually(t, 20*time.Second, "training after the restart", func() bool {
			return job.LeaseState() == sdk.Running && job.StepsDone() > steps+100
		})
		if got := suspended.Load() > 0; got != tc.suspends {
			t.Errorf("leases of %d round(s): suspended %v, want %v (by %v)", tc.rounds, got, tc.suspends, why.Load())
		}
		cancel()
		<-loopErr
		job.Close()
		c.Down()
	}
}
