package sdk_test

import (
	"context"
	"testing"
	"time"

	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/sdk"
	"github.com/shockwave-sched/shockwave/sdk/sdktest"
)

func TestLease_ALeaseOfAnOlderLeaderEpochIsIgnored(t *testing.T) {
	c := sdktest.Start(t, sdktest.Config{Round: time.Hour}) // no round of its own during the test
	j, err := sdk.Register(context.Background(), append(baseOptions(c, "fenced"), sdk.WithEpochs(100))...)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	nc := c.Client()
	now := float64(time.Now().UnixNano()) / 1e9
	c.PublishLease(nc, protocol.Lease{Job: "fenced", Round: 10, Action: protocol.Run, Workers: []int{0}, Epoch: 5, Start: now, Expiry: now + 60})
	sdktest.Eventually(t, 5*time.Second, "running", func() bool { return j.LeaseState() == sdk.Running })
	// A deposed leader (epoch 4) suspends the job in a later round: ignored.
	c.PublishLease(nc, protocol.Lease{Job: "fenced", Round: 11, Action: protocol.Suspend, Epoch: 4, Start: now, Expiry: now + 1})
	time.Sleep(200 * time.Millisecond)
	if st := j.LeaseState(); st != sdk.Running {
		t.Fatalf("a lease of epoch 4 after epoch 5 changed the state to %v", st)
	}
	c.PublishLease(nc, protocol.Lease{Job: "fenced", Round: 11, Action: protocol.Suspend, Epoch: 5, Start: now, Expiry: now + 1})
	sdktest.Eventually(t, 5*time.Second, "suspended by the current leader", func() bool { return j.LeaseState() == sdk.Waiting })
}
