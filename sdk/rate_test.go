package sdk_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/shockwave-sched/shockwave/sdk"
	"github.com/shockwave-sched/shockwave/sdk/sdktest"
)

// Steps a caller could not time (a binding's sampler that saw the loop
// start or resume between two samples, or train on under a lease that was
// no longer RUN) are progress, not speed: the measured rate is the timed
// steps over their time. Before, 500 untimed steps in the sample of one
// 10 ms step made the rate about 15,000 steps a second, and rank 0 of a
// multi-process job would release that many times its lookahead. (The
// samples here are the epoch ends: the periodic sampler waits an hour.)
func TestRate_StepsRecordedWithoutTimeCountAsProgressNotSpeed(t *testing.T) {
	c := sdktest.Start(t, sdktest.Config{GPUs: 1, Round: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	job, err := sdk.Register(ctx, append(baseOptions(c, "untimed"), sdk.WithEpochs(1000), sdk.WithSampleInterval(time.Hour))...)
	if err != nil {
		t.Fatal(err)
	}
	defer job.Close()
	job.RecordSteps(10, 100*time.Millisecond) // 100 steps a second
	job.EndEpoch()
	if got := job.Stats().StepsPerSecond; math.Abs(got-100) > 1e-9 {
		t.Fatalf("rate after 10 steps in 100 ms: %v, want 100", got)
	}
	job.RecordSteps(500, 0)
	job.Record(8, 64, 0)
	job.RecordSteps(1, 10*time.Millisecond)
	job.EndEpoch()
	st := job.Stats()
	if math.Abs(st.StepsPerSecond-100) > 1e-9 {
		t.Errorf("rate after 508 untimed steps and 1 step in 10 ms: %v steps/s, want 100", st.StepsPerSecond)
	}
	if st.StepsDone != 519 {
		t.Errorf("steps done %d, want 519: untimed steps are progress", st.StepsDone)
	}
	// Timed steps alone still move the rate.
	job.RecordSteps(4, 10*time.Millisecond)
	job.EndEpoch()
	if got, want := job.Stats().StepsPerSecond, 100+0.3*(400-100); math.Abs(got-want) > 1e-9 {
		t.Errorf("rate after 4 steps in 10 ms: %v, want %v", got, want)
	}
}
