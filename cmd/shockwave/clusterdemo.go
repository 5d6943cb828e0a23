package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/shockwave-sched/shockwave/agent"
	"github.com/shockwave-sched/shockwave/coordinator"
	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/topology"
)

// `shockwave demo --nodes NxK` runs a local multi-node cluster: an embedded
// coordinator whose cluster is the set of live agents, one node agent per
// node with fake GPUs, and real training processes submitted as jobs: this
// binary's own small trainer (demo-train), examples/go-train when found,
// and examples/pytorch/train.py with --pytorch. It prints a line per round
// with each node's devices and the job on each.

type clusterDemo struct {
	nodes   topology.Cluster
	jobs    int
	round   time.Duration
	policy  string
	timeout time.Duration
	train   string // go-train binary ("" when not found)
	pytorch string // train.py ("" when not given)
	ddp     string // train_ddp.py ("" when not given)
	python  string
	work    string
}

func runClusterDemo(args []string, stdout, stderr io.Writer) error {
	var d clusterDemo
	fs := newFlags("demo", stderr)
	nodes := fs.String("nodes", "2x2", "local nodes `NxK`: N agents of K fake GPUs")
	fs.IntVar(&d.jobs, "jobs", 5, "training jobs to submit")
	fs.DurationVar(&d.round, "round", time.Second, "round length")
	fs.StringVar(&d.policy, "policy", "shockwave", "allocation policy: "+strings.Join(policy.Names(), ", "))
	fs.DurationVar(&d.timeout, "timeout", 5*time.Minute, "give up after this long")
	fs.StringVar(&d.train, "train", "", "examples/go-train binary (default: go-train next to this binary or on $PATH; \"builtin\": this binary's demo-train)")
	fs.StringVar(&d.pytorch, "pytorch", "", "examples/pytorch/train.py to submit too (needs python3 with torch and the shockwave package)")
	fs.StringVar(&d.ddp, "ddp", "", "examples/pytorch/train_ddp.py to submit as a 2-rank DDP job (gloo on CPU; needs nodes of 2 GPUs)")
	fs.StringVar(&d.python, "python", defaultPython(), "Python interpreter of the PyTorch jobs")
	fs.StringVar(&d.work, "work-dir", "", "shared work directory of the agents (default: a temporary one)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var err error
	if d.nodes, err = topology.ParseNodes(*nodes); err != nil {
		return badInput("--nodes: %v", err)
	}
	switch {
	case len(d.nodes.Nodes) > 16 || d.nodes.MaxPerNode() > 16:
		return badInput("--nodes: at most 16 local nodes of 16 fake GPUs")
	case d.jobs < 1 || d.jobs > 64:
		return badInput("--jobs: %d out of range [1, 64]", d.jobs)
	case d.round < 500*time.Millisecond || d.round > time.Minute:
		return badInput("--round: %v out of range [500ms, 1m]", d.round)
	}
	if d.policy, err = policy.Canonical(d.policy); err != nil {
		return usageError{err}
	}
	switch d.train {
	case "":
		d.train = findGoTrain()
	case "builtin":
		d.train = ""
	}
	return d.run(stdout, stderr)
}

// defaultPython is Debian's interpreter, where python3-torch installs, when
// it exists.
func defaultPython() string {
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3"
	}
	return "python3"
}

// findGoTrain looks for go-train next to this binary, then on $PATH.
func findGoTrain() string {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "go-train")
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	p, _ := exec.LookPath("go-train")
	return p
}

func (d *clusterDemo) run(out, stderr io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), d.timeout)
	defer cancel()
	dir, err := os.MkdirTemp("", "shockwave-cluster-demo-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if d.work == "" {
		d.work = filepath.Join(dir, "work")
	}
	emb, nc, stop, err := serveDemo(ctx, filepath.Join(dir, "data"), coordinator.ServiceConfig{Policy: d.policy, AgentTimeout: 3 * d.round,
		Core: coordinator.Config{Dynamic: true, RoundSeconds: d.round.Seconds()}})
	if err != nil {
		return err
	}
	defer stop()
	url := emb.ClientURL()
	log := zerolog.New(zerolog.ConsoleWriter{Out: stderr, TimeFormat: time.TimeOnly}).Level(zerolog.WarnLevel).With().Timestamp().Logger()
	for _, n := range d.nodes.Nodes {
		anc, err := nats.Connect(url, nats.Name("shockwave-agent-"+n.Name), nats.MaxReconnects(-1))
		if err != nil {
			return err
		}
		defer anc.Close()
		a, err := agent.New(agent.Config{Node: n.Name, GPUs: n.GPUs, Addr: "127.0.0.1", Conn: anc, URL: url,
			WorkDir: d.work, Heartbeat: d.round / 4, ExpiryGrace: d.round / 2, KillGrace: 5 * time.Second, Logger: &log})
		if err != nil {
			return err
		}
		defer goRun(ctx, a.Run)()
	}
	jobs, err := d.submit(nc)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "shockwave demo: %d nodes (%s) of fake GPUs, one agent each, %v rounds, policy %s; coordinator at %s\n",
		len(d.nodes.Nodes), d.nodes, d.round, d.policy, url)
	for _, j := range jobs {
		fmt.Fprintf(out, "  %-24s %s\n", j.id, j.what)
	}
	fmt.Fprintf(out, "job output and checkpoints: %s/<job>/\n\nper round: node[device:job …], then waiting jobs\n", d.work)
	start := time.Now()
	final, err := d.watch(ctx, nc, out, start)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nall jobs ended after %.1fs\n", time.Since(start).Seconds())
	sort.Slice(final, func(a, b int) bool { return final[a].Job < final[b].Job })
	for _, j := range final {
		fmt.Fprintf(out, "  %-24s %-9s %d/%d steps, %.1fs on GPUs  %s\n", j.Job, j.State, j.StepsDone, j.TotalSteps, j.RunTime, j.Reason)
	}
	return nil
}

// goRun runs f in a goroutine and returns a function that stops it and
// waits for it.
func goRun(ctx context.Context, f func(context.Context) error) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = f(ctx); close(done) }()
	return func() { cancel(); <-done }
}

type demoSubmission struct{ id, what string }

// submit sends the demo's jobs: go-train when found, else this binary's
// own trainer, in turn with the PyTorch example when given.
func (d *clusterDemo) submit(nc *nats.Conn) ([]demoSubmission, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var subs []demoSubmission
	for i := range d.jobs {
		s := protocol.Submit{V: protocol.Version, Workers: 1, MaxRetries: 2}
		switch {
		case d.ddp != "" && i == 0 && d.nodes.MaxPerNode() >= 2:
			s.Name, s.Workers, s.RanksPerNode = "ddp-2ranks", 2, 2
			s.Command = []string{d.python, d.ddp, "--epochs", "3", "--exit-mode",
				"--checkpoint", filepath.Join(d.work, "ddp-2ranks.pt")}
		case d.pytorch != "" && i%3 == 2:
			s.Name = fmt.Sprintf("torch-%d", i)
			s.Command = []string{d.python, d.pytorch, "--epochs", "3"}
		case d.train != "":
			s.Name = fmt.Sprintf("go-train-%d", i)
			s.Command = []string{d.train, "--epochs", fmt.Sprint(4 + i%4), "--samples", "2048", "--step-time", "15ms"}
		default:
			s.Name = fmt.Sprintf("demo-train-%d", i)
			s.Command = []string{self, "demo-train", "--epochs", fmt.Sprint(4 + i%4)}
		}
		if i == d.jobs-1 && d.nodes.MaxPerNode() >= 2 && s.Workers == 1 {
			s.Workers = 2 // a gang: on one node when it fits
			s.Name += "-w2"
		}
		s.Job = newJobID(s.Name, "")
		data, _ := json.Marshal(s)
		m, err := nc.Request(protocol.Subjects{Prefix: protocol.DefaultPrefix}.Submit(), data, 10*time.Second)
		if err != nil {
			return nil, fmt.Errorf("submitting %s: %w", s.Name, err)
		}
		rep, err := protocol.DecodeSubmitReply(m.Data, 1<<20)
		if err == nil && rep.Error != nil {
			err = rep.Error
		}
		if err != nil {
			return nil, fmt.Errorf("submitting %s: %w", s.Name, err)
		}
		what := fmt.Sprintf("%d GPU(s): %s", s.Workers, strings.Join(s.Command, " "))
		if s.RanksPerNode > 1 {
			what = fmt.Sprintf("%d ranks, %s", s.RanksPerNode, what)
		}
		subs = append(subs, demoSubmission{id: rep.Job, what: what})
	}
	return subs, nil
}

// watch prints a line per round until every job ended.
func (d *clusterDemo) watch(ctx context.Context, nc *nats.Conn, out io.Writer, start time.Time) ([]protocol.JobInfo, error) {
	subj := protocol.Subjects{Prefix: protocol.DefaultPrefix}
	t := time.NewTicker(d.round / 5)
	defer t.Stop()
	last := -1
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("the demo did not finish within %v", d.timeout)
		case <-t.C:
		}
		m, err := nc.Request(subj.Status(), nil, d.round)
		if err != nil {
			continue
		}
		rep, err := protocol.DecodeStatusReply(m.Data, 64<<20)
		if err != nil || rep.Plan == nil || rep.Plan.Round == last {
			continue
		}
		last = rep.Plan.Round
		fmt.Fprintln(out, placementLine(rep, time.Since(start)))
		ended := 0
		for _, j := range rep.Jobs {
			if j.State != "active" && j.State != "pending" {
				ended++
			}
		}
		if ended == len(rep.Jobs) && ended > 0 {
			return rep.Jobs, nil
		}
	}
}

// placementLine is one round: each node's devices and the job on each
// ("-": idle), then the jobs that wait.
func placementLine(rep *protocol.StatusReply, at time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "round %3d %6.1fs ", rep.Plan.Round, at.Seconds())
	on := map[string][]string{}
	for _, n := range rep.Nodes {
		on[n.Name] = make([]string, n.GPUs)
	}
	var waiting []string
	for _, j := range rep.Jobs {
		if j.State != "active" && j.State != "pending" {
			continue
		}
		if len(j.Devices) == 0 {
			waiting = append(waiting, j.Job)
		}
		for _, nd := range j.Devices {
			for _, x := range nd.Devices {
				if x < len(on[nd.Node]) {
					on[nd.Node][x] = j.Job
				}
			}
		}
	}
	for _, n := range rep.Nodes {
		fmt.Fprintf(&b, " %s[", n.Name)
		for x, j := range on[n.Name] {
			if j == "" {
				j = "-"
			}
			if x > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%d:%s", x, j)
		}
		b.WriteByte(']')
	}
	if len(waiting) > 0 {
		fmt.Fprintf(&b, "  waiting: %s", strings.Join(waiting, " "))
	}
	return b.String()
}
