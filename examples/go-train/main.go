// Command go-train is a small training loop scheduled by Shockwave through
// the Go SDK: linear regression trained by minibatch gradient descent on
// generated data, with a batch size that doubles every few epochs (a
// gradient-noise-scale style schedule).
//
// Run a coordinator, then one or more trainers:
//
//	shockwave coordinator --gpus 1 --round 2s --data-dir /tmp/sw &
//	go run ./examples/go-train --job lr-a --checkpoint /tmp/lr-a.json &
//	go run ./examples/go-train --job lr-b --checkpoint /tmp/lr-b.json
//
// With one GPU the coordinator makes the two jobs take turns. When a job
// loses its lease, the SDK calls OnSuspend at the next step boundary: the
// trainer writes its checkpoint (weights, the data position and the SDK's
// progress) to --checkpoint and waits; when a RUN lease comes back it
// continues. With --exit-mode it exits instead (status 3), as under
// Kubernetes or Slurm; started again with the same --job and --checkpoint
// it resumes where it stopped. Interrupting it (Ctrl-C) also checkpoints.
//
// The gang width is 1; --step-time pads every step to emulate a larger
// model on an accelerator, so the schedule is visible at human speed.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/sdk"
)

// exitPreempted is the exit status of a preempted trainer in EXIT mode.
const exitPreempted = 3

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	switch {
	case errors.Is(err, sdk.ErrPreempted):
		fmt.Fprintln(os.Stderr, "go-train:", err)
		os.Exit(exitPreempted)
	case err != nil:
		fmt.Fprintln(os.Stderr, "go-train:", err)
		os.Exit(1)
	}
}

type config struct {
	url, job, checkpoint string
	epochs, dim, samples int
	bs0, maxBS, every    int
	stepTime             time.Duration
	exitMode             bool
}

func parse(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("go-train", flag.ContinueOnError)
	// Under `shockwave agent` the identity, address and checkpoint
	// directory come from the environment the agent sets.
	ckpt := "go-train.ckpt.json"
	if dir := os.Getenv("SHOCKWAVE_CHECKPOINT_DIR"); dir != "" {
		ckpt = filepath.Join(dir, ckpt)
	}
	fs.StringVar(&c.url, "nats-url", envOr("SHOCKWAVE_NATS_URL", "nats://127.0.0.1:4222"), "the coordinator's NATS address")
	fs.StringVar(&c.job, "job", envOr("SHOCKWAVE_JOB_ID", "go-train"), "job id (the same id resumes the job after a restart)")
	fs.StringVar(&c.checkpoint, "checkpoint", ckpt, "checkpoint `FILE`")
	fs.IntVar(&c.epochs, "epochs", 12, "epochs to train")
	fs.IntVar(&c.samples, "samples", 8192, "samples in the generated dataset")
	fs.IntVar(&c.dim, "dim", 16, "features")
	fs.IntVar(&c.bs0, "batch-size", 32, "initial batch size")
	fs.IntVar(&c.maxBS, "max-batch-size", 256, "largest batch size of the schedule")
	fs.IntVar(&c.every, "double-every", 4, "double the batch size every this many epochs")
	fs.DurationVar(&c.stepTime, "step-time", 2*time.Millisecond, "pad each step to this long (emulates a larger model)")
	fs.BoolVar(&c.exitMode, "exit-mode", false, "exit (status 3) when preempted instead of waiting")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.epochs < 1 || c.samples < 1 || c.dim < 1 || c.bs0 < 1 || c.maxBS < c.bs0 || c.every < 1 {
		return c, errors.New("flags: epochs, samples, dim, batch sizes and --double-every must be positive, max ≥ initial")
	}
	return c, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// batchSize is the schedule: doubling every c.every epochs up to the max.
func (c config) batchSize(epoch int) int {
	return min(c.maxBS, c.bs0<<min(epoch/c.every, 30))
}

// checkpoint is what the trainer saves: the model, and the SDK's progress
// (which also says where in the data the next step starts).
type checkpoint struct {
	Weights  []float64      `json:"weights"`
	Bias     float64        `json:"bias"`
	Progress sdk.Checkpoint `json:"progress"`
}

func run(ctx context.Context, args []string, out io.Writer) error {
	c, err := parse(args)
	if err != nil {
		return err
	}
	data := generate(c.samples, c.dim)
	m := &model{w: make([]float64, c.dim)}
	opts := []sdk.Option{sdk.WithURL(c.url), sdk.WithJobID(c.job), sdk.WithName("go-train " + c.job),
		sdk.WithModel("linear-regression"), sdk.WithAdaptation("gns"), sdk.WithBatchSize(c.bs0),
		sdk.WithDatasetSize(c.samples), sdk.WithEpochs(c.epochs),
		// The baseline policies schedule only jobs with a known rate: the
		// step time is known here; a real job would time a few warm-up steps.
		sdk.WithThroughput(1 / max(c.stepTime.Seconds(), 1e-4))}
	if ck, err := load(c.checkpoint); err == nil {
		m.w, m.b = ck.Weights, ck.Bias
		opts = append(opts, sdk.WithResume(ck.Progress))
		fmt.Fprintf(out, "resuming from %s: epoch %d, step %d\n", c.checkpoint, ck.Progress.Epoch, ck.Progress.StepsDone)
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var job *sdk.Job
	save := func(context.Context, protocol.Lease) error {
		fmt.Fprintf(out, "suspended (%s): checkpointing at step %d, loss %.4f\n", job.Reason(), job.StepsDone(), m.loss(data))
		return store(c.checkpoint, checkpoint{Weights: m.w, Bias: m.b, Progress: job.Checkpoint()})
	}
	opts = append(opts, sdk.WithOnSuspend(save), sdk.WithOnResume(func(_ context.Context, l protocol.Lease) error {
		fmt.Fprintf(out, "resumed in round %d on GPUs %v\n", l.Round, l.Workers)
		return nil
	}))
	if c.exitMode {
		opts = append(opts, sdk.ExitOnSuspend())
	}
	if job, err = sdk.Register(ctx, opts...); err != nil {
		return err
	}
	defer job.Close()
	via := "its own NATS connection"
	if job.Uplinked() {
		via = "its node agent (the uplink)"
	}
	fmt.Fprintf(out, "registered %s through %s (resumed: %v); waiting for a lease\n", job.ID(), via, job.Resumed())

	src := newBatches(c, job)
	for batch, err := range sdk.Steps(ctx, job, src) {
		if errors.Is(err, context.Canceled) {
			return save(ctx, protocol.Lease{})
		}
		if err != nil {
			return err
		}
		start := time.Now()
		m.step(data, batch, 0.05*math.Sqrt(float64(len(batch))/float64(c.bs0)))
		if pad := c.stepTime - time.Since(start); pad > 0 {
			time.Sleep(pad)
		}
		if src.first() {
			fmt.Fprintf(out, "epoch %d: batch size %d, loss %.4f\n", job.Epoch(), len(batch), m.loss(data))
		}
	}
	fmt.Fprintf(out, "done: %d steps, %d epochs, loss %.4f\n", job.StepsDone(), job.Epoch(), m.loss(data))
	return store(c.checkpoint, checkpoint{Weights: m.w, Bias: m.b, Progress: job.Checkpoint()})
}

// batches yields the sample indices of each minibatch: a fixed shuffle per
// epoch, so a resumed job continues with exactly the batches it would have
// seen. It applies the batch-size schedule at each epoch's start.
type batches struct {
	c     config
	job   *sdk.Job
	epoch int
	pos   int // next sample of the epoch's order
	bs    int
	order []int
}

func newBatches(c config, job *sdk.Job) *batches {
	p := job.Checkpoint()
	b := &batches{c: c, job: job, epoch: p.Epoch, pos: int(p.SamplesInEpoch), bs: max(p.BatchSize, c.bs0)}
	b.shuffle()
	return b
}

func (b *batches) shuffle() {
	b.order = rand.New(rand.NewPCG(7, uint64(b.epoch))).Perm(b.c.samples)
}

func (b *batches) first() bool { return b.pos == b.bs || b.pos == b.c.samples && b.c.samples < b.bs }

func (b *batches) Next(context.Context) ([]int, error) {
	if b.pos >= b.c.samples {
		b.epoch, b.pos = b.epoch+1, 0
		b.shuffle()
		return nil, io.EOF
	}
	if b.pos == 0 {
		b.bs = b.c.batchSize(b.epoch)
		if err := b.job.SetBatchSize(b.bs); err != nil {
			return nil, err
		}
	}
	end := min(b.pos+b.bs, b.c.samples)
	batch := b.order[b.pos:end]
	b.pos = end
	return batch, nil
}

// dataset is y = x·w* + b* + noise.
type dataset struct {
	x [][]float64
	y []float64
}

func generate(n, dim int) dataset {
	r := rand.New(rand.NewPCG(1, 2))
	w := make([]float64, dim)
	for i := range w {
		w[i] = r.NormFloat64()
	}
	d := dataset{x: make([][]float64, n), y: make([]float64, n)}
	for i := range n {
		d.x[i] = make([]float64, dim)
		y := 0.5
		for k := range dim {
			d.x[i][k] = r.NormFloat64()
			y += w[k] * d.x[i][k]
		}
		d.y[i] = y + 0.1*r.NormFloat64()
	}
	return d
}

type model struct {
	w []float64
	b float64
}

func (m *model) predict(x []float64) float64 {
	p := m.b
	for k, v := range x {
		p += m.w[k] * v
	}
	return p
}

// step is one gradient-descent step on the batch's mean squared error.
func (m *model) step(d dataset, batch []int, lr float64) {
	gw := make([]float64, len(m.w))
	gb := 0.0
	for _, i := range batch {
		e := m.predict(d.x[i]) - d.y[i]
		for k, v := range d.x[i] {
			gw[k] += e * v
		}
		gb += e
	}
	s := 2 * lr / float64(len(batch))
	for k := range m.w {
		m.w[k] -= s * gw[k]
	}
	m.b -= s * gb
}

func (m *model) loss(d dataset) float64 {
	sum := 0.0
	for i := range d.y {
		e := m.predict(d.x[i]) - d.y[i]
		sum += e * e
	}
	return sum / float64(len(d.y))
}

func load(path string) (*checkpoint, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c checkpoint
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	return &c, nil
}

// store writes the checkpoint atomically (a temporary file, then rename).
func store(path string, c checkpoint) error {
	data, err := json.Marshal(c)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".ckpt-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
