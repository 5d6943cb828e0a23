package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/sdk"
)

func init() {
	commands["demo-train"] = command{summary: "the cluster demo's training job (run by an agent; reads SHOCKWAVE_* variables)", run: runDemoTrain}
}

// runDemoTrain is a small job for `shockwave demo --nodes`: steps that
// sleep, a batch size that doubles every two epochs, EXIT mode, and a
// checkpoint (the SDK's progress) in $SHOCKWAVE_CHECKPOINT_DIR, so that a
// restart on any node resumes where it stopped. A preempted run exits 3.
func runDemoTrain(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("demo-train", stderr)
	epochs := fs.Int("epochs", 5, "epochs to train")
	step := fs.Duration("step-time", 20*time.Millisecond, "time of one step")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *epochs < 1 || *epochs > 1000 || *step <= 0 {
		return badInput("--epochs must be in [1, 1000] and --step-time positive")
	}
	dir := os.Getenv("SHOCKWAVE_CHECKPOINT_DIR")
	if dir == "" || os.Getenv(sdk.EnvJob) == "" {
		return badInput("demo-train runs under shockwave agent ($SHOCKWAVE_JOB_ID and $SHOCKWAVE_CHECKPOINT_DIR unset)")
	}
	ckpt := filepath.Join(dir, "demo-train.json")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	const bs0, dataset = 32, 1024
	var job *sdk.Job
	save := func(context.Context, protocol.Lease) error {
		data, _ := json.Marshal(job.Checkpoint())
		return os.WriteFile(ckpt, data, 0o644)
	}
	opts := []sdk.Option{sdk.WithModel("demo-train"), sdk.WithAdaptation("gns"), sdk.WithBatchSize(bs0),
		sdk.WithDatasetSize(dataset), sdk.WithEpochs(*epochs), sdk.WithThroughput(1 / step.Seconds()),
		sdk.WithOnSuspend(save), sdk.WithLogger(slog.New(slog.DiscardHandler))}
	if data, err := os.ReadFile(ckpt); err == nil {
		var c sdk.Checkpoint
		if err := json.Unmarshal(data, &c); err != nil {
			return fmt.Errorf("checkpoint %s: %w", ckpt, err)
		}
		opts = append(opts, sdk.WithResume(c))
		fmt.Fprintf(stdout, "resuming at epoch %d, step %d\n", c.Epoch, c.StepsDone)
	}
	job, err := sdk.Register(ctx, opts...)
	if err != nil {
		return err
	}
	defer job.Close()
	p := job.Checkpoint()
	epoch, pos, bs := p.Epoch, int(p.SamplesInEpoch), max(p.BatchSize, bs0)
	src := sdk.SourceFunc[int](func(context.Context) (int, error) {
		if pos >= dataset {
			epoch, pos = epoch+1, 0
			return 0, io.EOF
		}
		if pos == 0 {
			bs = min(128, bs0<<min(epoch/2, 8))
			if err := job.SetBatchSize(bs); err != nil {
				return 0, err
			}
		}
		pos += bs
		return bs, nil
	})
	for _, err := range sdk.Steps(ctx, job, src) {
		if errors.Is(err, sdk.ErrPreempted) {
			fmt.Fprintf(stdout, "preempted at step %d\n", job.StepsDone())
			os.Exit(3)
		}
		if err != nil {
			return err
		}
		time.Sleep(*step)
	}
	fmt.Fprintf(stdout, "done: %d steps, %d epochs\n", job.StepsDone(), job.Epoch())
	return save(ctx, protocol.Lease{})
}
