package sdk_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/sdk"
	"github.com/shockwave-sched/shockwave/sdk/sdktest"
)

// TestRanks_WhileAGenerationRunsNoRankAnswersAnotherOnesMessage counts what
// the ranks of a running 3-rank job send on their ranks subject: rank 0 its
// releases (at most one a step) and its heartbeats, the other ranks only
// their heartbeats. When each rank answered every message with its own
// state, the ranks echoed each other as fast as the server carried them
// (about 10 messages a step from rank 0 at a step a millisecond, 7,000 to
// 9,600 a second), and on a fast machine the embedded server's flood guard
// (10,000 a second) disconnected rank 0 and the job broke.
func TestRanks_WhileAGenerationRunsNoRankAnswersAnotherOnesMessage(t *testing.T) {
	const world, job = 3, "quiet3"
	c := sdktest.Start(t, sdktest.Config{GPUs: 4, Round: time.Hour})
	jobs := registerRanks(t, world, func(r int) []sdk.Option { return rankOptions(c, job, r, world, 1<<20) })
	var sent [world]atomic.Int64
	sub, err := c.JobClient().Subscribe(c.Subj.Ranks(job), func(msg *nats.Msg) {
		if m, err := protocol.DecodeRankMessage(msg.Data, protocol.DefaultMaxMessageBytes); err == nil && m.Rank >= 0 && m.Rank < world {
			sent[m.Rank].Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	ctx, cancel := context.WithCancel(context.Background())
	wait := trainRanks(ctx, jobs)
	newLeaser(t, c, job).run(0, 1, 2)
	sdktest.Eventually(t, 10*time.Second, "every rank trains", func() bool { return allRunning(jobs) })
	time.Sleep(500 * time.Millisecond) // rank 0 has measured its rate and releases its lookahead

	var before [world]int64
	for r := range world {
		before[r] = sent[r].Load()
	}
	steps0 := jobs[0].StepsDone()
	const window = 2 * time.Second
	time.Sleep(window)
	steps := jobs[0].StepsDone() - steps0
	var during [world]int64
	for r := range world {
		during[r] = sent[r].Load() - before[r]
	}
	cancel()
	for r, err := range wait() {
		if err != nil && ctx.Err() == nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}

	// rankOptions' rank timeout is 2 s, so the heartbeat is 250 ms: 8 in
	// the window; a few more for the ticker's phase and the window's edges.
	beats := int64(window/(250*time.Millisecond)) + 4
	t.Logf("in %v: %d steps; messages by rank %v (heartbeats at most %d)", window, steps, during, beats)
	if steps < 100 {
		t.Fatalf("only %d steps in %v: the ranks did not train", steps, window)
	}
	if during[0] > steps+beats {
		t.Errorf("rank 0 sent %d messages in %d steps: more than one release a step and its heartbeats", during[0], steps)
	}
	for r := 1; r < world; r++ {
		if during[r] > beats {
			t.Errorf("rank %d sent %d messages in %v, want only its heartbeats (at most %d)", r, during[r], window, beats)
		}
	}
}
