package sdk_test

import (
	"context"
	"testing"
	"time"

	"github.com/shockwave-sched/shockwave/sdk"
	"github.com/shockwave-sched/shockwave/sdk/sdktest"
)

// registerAfterRounds starts a coordinator, lets it run a few rounds with
// no job (its policy's first re-allocation happens then), and registers a
// job.
func registerAfterRounds(t *testing.T, cfg sdktest.Config) (*sdktest.Coordinator, *sdk.Job) {
	t.Helper()
	c := sdktest.Start(t, cfg)
	sdktest.Eventually(t, 10*time.Second, "5 rounds pass", func() bool { return c.Status().Round >= 5 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	job, err := sdk.Register(ctx, append(baseOptions(c, "late"), sdk.WithEpochs(5))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { job.Close() })
	return c, job
}

// A job that registers after an sdktest coordinator's first rounds runs on
// its idle GPU within a few rounds, whatever the policy: the Gavel-round
// policies (gandiva_fair, sdktest's default, among them) used to leave it
// waiting for their next re-allocation, 1,000 s later.
func TestRegister_AJobRegisteredAfterTheFirstRoundsRunsOnTheIdleGPU(t *testing.T) {
	for _, pol := range []string{"gandiva_fair", "gavel", "themis", "shockwave"} {
		t.Run(pol, func(t *testing.T) {
			c, job := registerAfterRounds(t, sdktest.Config{Policy: pol})
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second) // 10 rounds
			defer cancel()
			if _, err := job.WaitRun(ctx); err != nil {
				reason := ""
				if p := c.Status().Plan; p != nil && len(p.Explain) > 0 {
					reason = p.Explain[0].Reason
				}
				t.Fatalf("%v; the plan says %q", err, reason)
			}
		})
	}
}

// Config.OriginalResets keeps the original's rule: the late job has no
// allocation until the next re-allocation.
func TestRegister_WithOriginalResetsALateJobWaitsForTheNextReallocation(t *testing.T) {
	c, job := registerAfterRounds(t, sdktest.Config{OriginalResets: true})
	rounds := c.Status().Round
	sdktest.Eventually(t, 10*time.Second, "5 more rounds pass", func() bool { return c.Status().Round >= rounds+5 })
	if job.LeaseState() == sdk.Running {
		t.Fatal("the late job runs before the 1,000 s re-allocation")
	}
	p := c.Status().Plan
	if p == nil || len(p.Explain) != 1 || p.Explain[0].Reason != "no allocation yet: admitted after the last re-allocation" {
		t.Errorf("plan %+v", p)
	}
}
