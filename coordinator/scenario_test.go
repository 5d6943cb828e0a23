package coordinator_test

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/shockwave-sched/shockwave/coordinator"
	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/topology"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected output of scenario files")

// TestScenarios runs testdata/*.txt. Each block is commands, a "----" line,
// and the expected output; blocks are separated by blank lines. Commands:
//
//	config gpus=N [policy=NAME] [round=S] [failures=N] [live=1 timeout=S expire=1 grace=S]
//	config nodes=NxK|dynamic=1 [...]    (leases then also print their devices)
//	register job=ID workers=N bs=N steps=N [thr=F] [iso=S] [t=S] [node=NAME [visible=0,1]]
//	node join name=NAME gpus=N [type=T]
//	node leave name=NAME
//	nodes
//	progress job=ID seq=N steps=N elapsed=S done=N total=N bs=N [epoch=N] [thr=F] [t=S]
//	batch job=ID seq=N bs=N done=N total=N [thr=F] [t=S]
//	done job=ID seq=N [t=S]
//	tick t=S
//	job job=ID
//
// With live=1 the harness drives Core as the service does: register goes
// through Enroll (which resumes a known job) and events through Deliver;
// timeout, expire and grace set JobTimeoutSeconds, ExpireLeases and
// LeaseGraceSeconds.
//
// Run with -rewrite to regenerate the expected output, then review the diff.
func TestScenarios(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.txt")
	if len(files) == 0 {
		t.Fatal("no scenario files")
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) { runScenario(t, f) })
	}
}

type block struct {
	cmds []string
	want string
}

func parseBlocks(t *testing.T, path string) []block {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []block
	var cur block
	inOut := false
	var out strings.Builder
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	flush := func() {
		if len(cur.cmds) > 0 {
			cur.want = out.String()
			blocks = append(blocks, cur)
		}
		cur, inOut = block{}, false
		out.Reset()
	}
	for sc.Scan() {
		line := sc.Text()
		switch {
		case inOut && line == "":
			flush()
		case inOut:
			out.WriteString(line + "\n")
		case line == "----":
			inOut = true
		case line != "":
			cur.cmds = append(cur.cmds, line)
		}
	}
	flush()
	return blocks
}

func runScenario(t *testing.T, path string) {
	blocks := parseBlocks(t, path)
	h := &harness{t: t}
	var rewritten strings.Builder
	for _, b := range blocks {
		var got strings.Builder
		for _, c := range b.cmds {
			if !strings.HasPrefix(c, "#") {
				h.exec(c, &got)
			}
		}
		if *rewrite {
			fmt.Fprintf(&rewritten, "%s\n----\n%s\n", strings.Join(b.cmds, "\n"), got.String())
			continue
		}
		if got.String() != b.want {
			t.Errorf("%s: after\n  %s\ngot:\n%swant:\n%s", path, strings.Join(b.cmds, "\n  "), got.String(), b.want)
		}
	}
	if *rewrite {
		if err := os.WriteFile(path, []byte(rewritten.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

type harness struct {
	t       *testing.T
	core    *coordinator.Core
	now     float64
	live    bool
	devices bool // print the devices of RUN leases
}

func args(fields []string) map[string]string {
	m := map[string]string{}
	for _, f := range fields {
		k, v, _ := strings.Cut(f, "=")
		m[k] = v
	}
	return m
}

func (h *harness) num(a map[string]string, k string) float64 {
	v, ok := a[k]
	if !ok {
		return 0
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		h.t.Fatalf("argument %s=%q: %v", k, v, err)
	}
	return f
}

func (h *harness) exec(line string, out *strings.Builder) {
	fields := strings.Fields(line)
	a := args(fields[1:])
	if _, ok := a["t"]; ok {
		h.now = h.num(a, "t")
	}
	var err error
	var lease *protocol.Lease
	switch fields[0] {
	case "config":
		h.now = 0
		name := a["policy"]
		if name == "" {
			name = "gandiva_fair"
		}
		p, perr := policy.New(name, policy.Options{})
		if perr != nil {
			h.t.Fatal(perr)
		}
		cfg := coordinator.Config{GPUs: int(h.num(a, "gpus")), RoundSeconds: h.num(a, "round"), MaxFailedLeases: int(h.num(a, "failures")),
			JobTimeoutSeconds: h.num(a, "timeout"), ExpireLeases: a["expire"] == "1", LeaseGraceSeconds: h.num(a, "grace")}
		h.live = a["live"] == "1"
		cfg.Dynamic = a["dynamic"] == "1"
		if a["nodes"] != "" {
			if cfg.Cluster, err = topology.ParseNodes(a["nodes"]); err != nil {
				h.t.Fatal(err)
			}
		}
		h.devices = cfg.Dynamic || a["nodes"] != ""
		h.core, err = coordinator.NewCore(cfg, p)
	case "register":
		r := protocol.Register{V: protocol.Version, Job: a["job"], Model: "ResNet-18", Workers: int(h.num(a, "workers")),
			BatchSize: int(h.num(a, "bs")), DatasetSize: 50000, TotalSteps: int64(h.num(a, "steps")),
			Throughput: h.num(a, "thr"), IsolatedSeconds: h.num(a, "iso"), Node: a["node"]}
		if v := a["visible"]; v != "" {
			for _, x := range strings.Split(v, ",") {
				d, perr := strconv.Atoi(x)
				if perr != nil {
					h.t.Fatalf("visible=%q: %v", v, perr)
				}
				r.Visible = append(r.Visible, d)
			}
		}
		if !h.live {
			err = h.core.Register(h.now, &r)
			break
		}
		var resumed bool
		if resumed, err = h.core.Enroll(h.now, &r); resumed {
			st, _ := h.core.Job(r.Job)
			fmt.Fprintf(out, "resumed %s: %s, last seq %d, %d/%d steps\n", r.Job, st.State, st.LastSeq, st.StepsDone, st.TotalSteps)
		}
	case "progress", "batch", "done":
		typ := map[string]protocol.EventType{"progress": protocol.EventProgress, "batch": protocol.EventBatchSize, "done": protocol.EventDone}[fields[0]]
		e := protocol.Event{V: protocol.Version, Type: typ, Job: a["job"], Seq: uint64(h.num(a, "seq")),
			Steps: int64(h.num(a, "steps")), Elapsed: h.num(a, "elapsed"), StepsDone: int64(h.num(a, "done")),
			TotalSteps: int64(h.num(a, "total")), Epoch: int(h.num(a, "epoch")), BatchSize: int(h.num(a, "bs")), Throughput: h.num(a, "thr")}
		if h.live {
			lease, err = h.core.Deliver(h.now, &e)
		} else {
			lease, err = h.core.Apply(h.now, &e)
		}
	case "tick":
		var r *coordinator.Round
		if r, err = h.core.Tick(h.now); err == nil {
			printRound(out, r, h.devices)
		}
	case "node":
		switch fields[1] {
		case "join":
			err = h.core.JoinNode(topology.Node{Name: a["name"], GPUs: int(h.num(a, "gpus")), Type: a["type"]})
		case "leave":
			err = h.core.LeaveNode(a["name"])
		default:
			h.t.Fatalf("unknown command %q", line)
		}
	case "nodes":
		fmt.Fprintf(out, "nodes %s (%d GPUs)\n", topology.Cluster{Nodes: h.core.Nodes()}, h.core.GPUs())
	case "job":
		st, ok := h.core.Job(a["job"])
		if !ok {
			fmt.Fprintf(out, "no job %s\n", a["job"])
			break
		}
		fmt.Fprintf(out, "job %s: %s, %d/%d steps, epoch %d, bs %d, run time %gs, last seq %d, admitted at %gs, last ran in round %d, gpus %v",
			st.Job, st.State, st.StepsDone, st.TotalSteps, st.Epoch, st.BatchSize, st.RunTime, st.LastSeq, st.AdmitTime, st.LastRun, st.GPUs)
		if h.devices {
			fmt.Fprintf(out, ", devices %s", devicesString(st.Devices))
		}
		fmt.Fprintln(out)
	default:
		h.t.Fatalf("unknown command %q", line)
	}
	if err != nil {
		fmt.Fprintf(out, "error: %v\n", err)
	}
	if lease != nil {
		printLease(out, lease, h.devices)
	}
}

func printRound(out *strings.Builder, r *coordinator.Round, devices bool) {
	fmt.Fprintf(out, "round %d at %gs: %d active, run %v\n", r.Index, r.Start, r.Active, r.Plan.Run)
	for i := range r.Leases {
		printLease(out, &r.Leases[i], devices)
	}
	for _, e := range r.Ended {
		fmt.Fprintf(out, "  ended %s: %s (%s)\n", e.Job, e.State, e.Reason)
	}
	for _, e := range r.Lost {
		fmt.Fprintf(out, "  lost %s (%s)\n", e.Job, e.Reason)
	}
	if devices && strings.Contains(r.Plan.Note, "repair") {
		fmt.Fprintf(out, "  note: %s\n", r.Plan.Note)
	}
	for _, e := range r.Plan.Explain {
		if !e.Run {
			fmt.Fprintf(out, "  waits %s: %s\n", e.Job, e.Reason)
		}
	}
}

func printLease(out *strings.Builder, l *protocol.Lease, devices bool) {
	fmt.Fprintf(out, "  %s %s", l.Action, l.Job)
	if l.Action == protocol.Run {
		fmt.Fprintf(out, " gpus=%v", l.Workers)
		if devices {
			fmt.Fprintf(out, " devices=%s", devicesString(l.Devices))
		}
		if l.Extension {
			fmt.Fprint(out, " extension")
		}
	}
	fmt.Fprintf(out, " until=%g", l.Expiry)
	if l.Reason != "" {
		fmt.Fprintf(out, " (%s)", l.Reason)
	}
	fmt.Fprintln(out)
}

func devicesString(ds []protocol.NodeDevices) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = fmt.Sprintf("%s:%v", d.Node, d.Devices)
	}
	return "{" + strings.Join(parts, " ") + "}"
}
