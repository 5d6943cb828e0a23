package main

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shockwave-sched/shockwave/internal/syncbuf"
	"github.com/shockwave-sched/shockwave/sdk"
	"github.com/shockwave-sched/shockwave/sdk/sdktest"
)

func args(c *sdktest.Coordinator, job, ckpt string, extra ...string) []string {
	return append([]string{"--nats-url", c.URL(), "--job", job, "--checkpoint", ckpt, "--epochs", "6",
		"--samples", "2048", "--double-every", "2", "--step-time", "3ms"}, extra...)
}

// syncBuffer collects the two trainers' output.
type syncBuffer = syncbuf.Buffer

func TestTrain_TwoJobsTakeTurnsAndBothConverge(t *testing.T) {
	c := sdktest.Start(t, sdktest.Config{GPUs: 1, Round: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	var wg sync.WaitGroup
	outs := map[string]*syncBuffer{"a": {}, "b": {}}
	for id, out := range outs {
		wg.Go(func() {
			if err := run(ctx, args(c, id, filepath.Join(dir, id+".json")), out); err != nil {
				t.Errorf("%s: %v", id, err)
			}
		})
	}
	wg.Wait()
	for id, out := range outs {
		s := out.String()
		if !strings.Contains(s, "suspended") || !strings.Contains(s, "resumed in round") || !strings.Contains(s, "done:") {
			t.Errorf("%s did not suspend, resume and finish:\n%s", id, s)
		}
		ck, err := load(filepath.Join(dir, id+".json"))
		if err != nil {
			t.Fatal(err)
		}
		if l := (&model{w: ck.Weights, b: ck.Bias}).loss(generate(2048, 16)); l > 0.05 {
			t.Errorf("%s: final loss %.4f", id, l)
		}
		sdktest.Eventually(t, 5*time.Second, id+" completes", func() bool {
			r, _ := c.Job(id)
			return r.State == "completed" && r.StepsDone == ck.Progress.StepsDone && r.Epoch == 6
		})
	}
}

func TestTrain_ExitModeRestartsResumeFromTheCheckpoint(t *testing.T) {
	c := sdktest.Start(t, sdktest.Config{GPUs: 1, Round: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := run(ctx, args(c, "other", filepath.Join(dir, "other.json")), &syncBuffer{}); err != nil {
			t.Errorf("other: %v", err)
		}
	})
	restarts := 0
	var out syncBuffer
	for {
		err := run(ctx, args(c, "exiter", filepath.Join(dir, "exiter.json"), "--exit-mode"), &out)
		if err == nil {
			break
		}
		if !errors.Is(err, sdk.ErrPreempted) || restarts > 30 {
			t.Fatalf("after %d restarts: %v", restarts, err)
		}
		restarts++
	}
	wg.Wait()
	if restarts == 0 || !strings.Contains(out.String(), "resuming from") {
		t.Errorf("never preempted and resumed (%d restarts):\n%s", restarts, out.String())
	}
	ck, err := load(filepath.Join(dir, "exiter.json"))
	if err != nil {
		t.Fatal(err)
	}
	if l := (&model{w: ck.Weights, b: ck.Bias}).loss(generate(2048, 16)); l > 0.05 {
		t.Errorf("final loss %.4f", l)
	}
	sdktest.Eventually(t, 5*time.Second, "exiter completes", func() bool {
		r, _ := c.Job("exiter")
		return r.State == "completed" && r.StepsDone == ck.Progress.StepsDone
	})
}
