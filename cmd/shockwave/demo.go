package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/coordinator"
	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/sdk"
)

func init() {
	commands["demo"] = command{summary: "run synthetic jobs against an embedded coordinator and show each round", run: runDemo}
}

type demoFlags struct {
	jobs, gpus int
	round      time.Duration
	policy     string
	work       float64
	timeout    time.Duration
}

// runDemo starts an embedded coordinator (NATS with JetStream on a
// loopback port, in a temporary directory) and synthetic jobs that train
// through the Go SDK over that connection, prints a line per round, and
// ends with a summary.
func runDemo(args []string, stdout, stderr io.Writer) error {
	if slices.ContainsFunc(args, func(a string) bool { return a == "--nodes" || a == "-nodes" || strings.HasPrefix(a, "--nodes=") }) {
		return runClusterDemo(args, stdout, stderr) // clusterdemo.go
	}
	var f demoFlags
	fs := newFlags("demo", stderr)
	fs.IntVar(&f.jobs, "jobs", 6, "number of synthetic jobs (gns, accordion and static schedules, in turn)")
	fs.IntVar(&f.gpus, "gpus", 2, "number of virtual GPUs")
	fs.DurationVar(&f.round, "round", time.Second, "round length")
	fs.StringVar(&f.policy, "policy", "shockwave", "allocation policy: "+strings.Join(policy.Names(), ", "))
	fs.Float64Var(&f.work, "work", 2, "scale of every job's length (2: 4 to 8 s alone on a GPU)")
	fs.DurationVar(&f.timeout, "timeout", 3*time.Minute, "give up after this long")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case f.jobs < 1 || f.jobs > 64:
		return badInput("--jobs: %d out of range [1, 64]", f.jobs)
	case f.gpus < 1 || f.gpus > 64:
		return badInput("--gpus: %d out of range [1, 64]", f.gpus)
	case f.round < 100*time.Millisecond || f.round > time.Minute:
		return badInput("--round: %v out of range [100ms, 1m]", f.round)
	case !(f.work >= 0.05 && f.work <= 100):
		return badInput("--work: %g out of range [0.05, 100]", f.work)
	}
	name, err := policy.Canonical(f.policy)
	if err != nil {
		return usageError{err}
	}
	f.policy = name
	return demo(f, stdout)
}

// serveDemo starts an embedded NATS server on dataDir and a coordinator
// with cfg on it, and waits until it serves; stop ends both.
func serveDemo(ctx context.Context, dataDir string, cfg coordinator.ServiceConfig) (*coordinator.Embedded, *nats.Conn, func(), error) {
	emb, err := coordinator.StartEmbedded(coordinator.EmbeddedConfig{Listen: "127.0.0.1:-1", DataDir: dataDir})
	if err != nil {
		return nil, nil, nil, err
	}
	nc, err := emb.Connect()
	if err != nil {
		emb.Shutdown()
		return nil, nil, nil, err
	}
	svc, err := coordinator.NewService(nc, cfg)
	if err != nil {
		nc.Close()
		emb.Shutdown()
		return nil, nil, nil, err
	}
	stopSvc := goRun(ctx, svc.Run)
	stop := func() { stopSvc(); nc.Close(); emb.Shutdown() }
	for !svc.Health().OK {
		select {
		case <-ctx.Done():
			stop()
			return nil, nil, nil, errors.New("the embedded coordinator did not start")
		case <-time.After(5 * time.Millisecond):
		}
	}
	return emb, nc, stop, nil
}

func demo(f demoFlags, out io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	dir, err := os.MkdirTemp("", "shockwave-demo-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// A live coordinator: the Gavel-round baselines re-allocate on change,
	// as `shockwave coordinator` does by default.
	emb, nc, stop, err := serveDemo(ctx, dir, coordinator.ServiceConfig{Policy: f.policy,
		PolicyOptions: policy.Options{ReallocateOnChange: true},
		Core:          coordinator.Config{GPUs: f.gpus, RoundSeconds: f.round.Seconds()}})
	if err != nil {
		return err
	}
	defer stop()

	jobs := demoJobs(f.jobs, f.work)
	fmt.Fprintf(out, "shockwave demo: %d jobs on %d virtual GPUs, %v rounds, policy %s; coordinator at %s\n",
		len(jobs), f.gpus, f.round, f.policy, emb.ClientURL())
	for _, j := range jobs {
		fmt.Fprintf(out, "  %-8s %-9s batch size %v, %d epochs, %.1fs alone\n", j.id, j.mode, j.schedule(), j.epochs, j.isolated().Seconds())
	}
	fmt.Fprintln(out, "\nper round: *running, completed epochs, ~forecast remaining time alone, ρ̂ projected from it")
	start := time.Now()
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Go(func() { j.run(ctx, emb.ClientURL(), start) })
	}
	allDone := make(chan struct{})
	go func() { wg.Wait(); close(allDone) }()
	byID := make(map[string]*demoJob, len(jobs))
	for _, j := range jobs {
		byID[j.id] = j
	}
	watchRounds(ctx, nc, f.round, start, out, allDone, byID, f.gpus)
	wg.Wait()
	var errs []error
	for _, j := range jobs {
		if j.err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", j.id, j.err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	summarize(out, jobs, f.gpus, time.Since(start))
	return nil
}

// demoJob is a synthetic training job: a step sleeps for its compute time,
// and a larger batch trains more samples per second (sublinearly).
type demoJob struct {
	id, mode        string
	bs0, maxBS      int
	dataset, epochs int
	rate0           float64 // samples per second at bs0

	suspensions  int
	submit, done time.Time
	err          error
}

// demoJobs cycles through gns, accordion and static jobs of varied length.
func demoJobs(n int, work float64) []*demoJob {
	modes := []string{"gns", "accordion", "static"}
	jobs := make([]*demoJob, n)
	for i := range jobs {
		m := modes[i%len(modes)]
		j := &demoJob{id: fmt.Sprintf("%s-%d", m[:3], i), mode: m, bs0: 32, maxBS: 128, dataset: 2048,
			epochs: max(2, int(math.Round(float64(6+(i*5)%7)*work))), rate0: 4096 + 512*float64(i%3)}
		jobs[i] = j
	}
	return jobs
}

// batchSize is the schedule: gns doubles the batch size every third of
// the run, accordion uses the large batch except in the "critical"
// epochs (the first two, and the two after the middle), static keeps bs0.
func (j *demoJob) batchSize(epoch int) int {
	switch j.mode {
	case "gns":
		return min(j.maxBS, j.bs0<<(3*epoch/j.epochs))
	case "accordion":
		mid := j.epochs / 2
		if epoch < 2 || epoch == mid || epoch == mid+1 {
			return j.bs0
		}
		return j.maxBS
	}
	return j.bs0
}

func (j *demoJob) schedule() []int {
	s := make([]int, j.epochs)
	for e := range s {
		s[e] = j.batchSize(e)
	}
	return slices.Compact(s)
}

// stepTime is one step's compute at batch size bs: throughput in samples/s
// grows as bs^0.8.
func (j *demoJob) stepTime(bs int) time.Duration {
	rate := j.rate0 * math.Pow(float64(bs)/float64(j.bs0), 0.8)
	return time.Duration(float64(bs) / rate * float64(time.Second))
}

func (j *demoJob) stepsIn(bs int) int { return (j.dataset + bs - 1) / bs }

// isolated is the job's run time alone on its GPU.
func (j *demoJob) isolated() time.Duration {
	var d time.Duration
	for e := range j.epochs {
		bs := j.batchSize(e)
		d += time.Duration(j.stepsIn(bs)) * j.stepTime(bs)
	}
	return d
}

// fairTime is the job's run time on an equal share of the cluster:
// isolated × max(1, N/G) for N jobs of width 1 on G GPUs.
func (j *demoJob) fairTime(n, gpus int) time.Duration {
	return time.Duration(float64(j.isolated()) * max(1, float64(n)/float64(gpus)))
}

// run trains the job through the SDK until it is done.
func (j *demoJob) run(ctx context.Context, url string, start time.Time) {
	j.submit = start
	var job *sdk.Job
	job, j.err = sdk.Register(ctx, sdk.WithURL(url), sdk.WithJobID(j.id), sdk.WithModel("synthetic-"+j.mode),
		sdk.WithAdaptation(j.mode), sdk.WithBatchSize(j.bs0), sdk.WithDatasetSize(j.dataset), sdk.WithEpochs(j.epochs),
		sdk.WithThroughput(j.rate0/float64(j.bs0)), sdk.WithLogger(slog.New(slog.DiscardHandler)),
		sdk.WithOnSuspend(func(context.Context, protocol.Lease) error { j.suspensions++; return nil }))
	if j.err != nil {
		return
	}
	defer job.Close()
	epoch, i, bs := 0, 0, j.bs0
	src := sdk.SourceFunc[int](func(context.Context) (int, error) {
		if i == j.stepsIn(bs) {
			i = 0
			epoch++
			return 0, io.EOF
		}
		if i == 0 {
			bs = j.batchSize(min(epoch, j.epochs-1))
			if err := job.SetBatchSize(bs); err != nil {
				return 0, err
			}
		}
		i++
		return bs, nil
	})
	var next time.Time
	for bs, err := range sdk.Steps(ctx, job, src) {
		if err != nil {
			j.err = err
			return
		}
		// Sleep until the step's end; the deadline carries over, so sleep
		// overshoot does not accumulate (reset after a suspension).
		now := time.Now()
		if next.Before(now.Add(-j.stepTime(bs))) {
			next = now
		}
		next = next.Add(j.stepTime(bs))
		time.Sleep(time.Until(next))
	}
	j.done = time.Now()
}

// watchRounds prints a line per round from the coordinator's status until
// every job is done.
func watchRounds(ctx context.Context, nc *nats.Conn, round time.Duration, start time.Time, out io.Writer, done <-chan struct{},
	jobs map[string]*demoJob, gpus int) {
	subj := protocol.Subjects{Prefix: protocol.DefaultPrefix}
	t := time.NewTicker(max(round/5, 20*time.Millisecond))
	defer t.Stop()
	last := -1
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m, err := nc.Request(subj.Status(), nil, round)
		if err != nil {
			continue
		}
		rep, err := protocol.DecodeStatusReply(m.Data, 64<<20)
		if err != nil || rep.Plan == nil || rep.Plan.Round == last {
			continue
		}
		last = rep.Plan.Round
		fmt.Fprintln(out, roundLine(rep, time.Since(start), jobs, gpus))
	}
}

// roundLine is one round: who runs (marked *), and per job its completed
// epochs, the plan's forecast of its remaining run time alone, and ρ̂, the
// finish-time fairness that forecast implies: (time so far + remaining
// stretched by the current contention, max(1, active/GPUs)) over the
// fair time of the summary's ρ.
func roundLine(rep *protocol.StatusReply, at time.Duration, jobs map[string]*demoJob, gpus int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "round %3d %6.1fs ", rep.Plan.Round, at.Seconds())
	explain := map[string]protocol.PlanEntry{}
	for _, e := range rep.Plan.Explain {
		explain[e.Job] = e
	}
	active := 0
	for _, j := range rep.Jobs {
		if j.State == "active" || j.State == "pending" {
			active++
		}
	}
	stretch := max(1, float64(active)/float64(gpus))
	for _, j := range rep.Jobs {
		if j.State != "active" && j.State != "pending" {
			continue
		}
		e, dj := explain[j.Job], jobs[j.Job]
		mark := " "
		if slices.Contains(rep.Plan.Run, j.Job) {
			mark = "*"
		}
		rho, left := "-", "-"
		if e.ForecastRemaining > 0 {
			left = fmt.Sprintf("%.1fs", e.ForecastRemaining)
			if dj != nil {
				rho = fmt.Sprintf("%.2f", (at.Seconds()+e.ForecastRemaining*stretch)/dj.fairTime(len(jobs), gpus).Seconds())
			}
		}
		fmt.Fprintf(&b, " %s%s e%d ~%s ρ̂ %s", mark, j.Job, j.Epoch, left, rho)
	}
	return b.String()
}

// summarize prints makespan, average JCT and each job's finish-time
// fairness ρ = JCT / (isolated × max(1, N·w/G)): its completion time over
// the time it would take on an equal share of the cluster for the whole
// run (Themis-style; ρ ≤ 1 is fair, N jobs of width w on G GPUs).
func summarize(out io.Writer, jobs []*demoJob, gpus int, makespan time.Duration) {
	fmt.Fprintf(out, "\nall %d jobs done\n", len(jobs))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "job\tmode\talone\tJCT\tρ\tsuspensions")
	var sumJCT time.Duration
	worst := 0.0
	for _, j := range jobs {
		jct := j.done.Sub(j.submit)
		sumJCT += jct
		rho := jct.Seconds() / j.fairTime(len(jobs), gpus).Seconds()
		worst = max(worst, rho)
		fmt.Fprintf(tw, "%s\t%s\t%.1fs\t%.1fs\t%.2f\t%d\n", j.id, j.mode, j.isolated().Seconds(), jct.Seconds(), rho, j.suspensions)
	}
	_ = tw.Flush()
	fmt.Fprintf(out, "makespan %.1fs, average JCT %.1fs, worst ρ %.2f\n", makespan.Seconds(), (sumJCT / time.Duration(len(jobs))).Seconds(), worst)
	fmt.Fprintln(out, "ρ = JCT / (time alone × max(1, jobs/GPUs)): finish-time fairness against an equal share; ≤ 1 is fair")
}
