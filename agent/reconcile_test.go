package agent

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/protocol"
)

func TestCountGPUs_CountsNvidiaSmiListLines(t *testing.T) {
	out := "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\nGPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-2)\n  MIG 1g.10gb Device 0: (UUID: MIG-3)\n"
	if n := countGPUs([]byte(out)); n != 2 {
		t.Errorf("counted %d GPUs, want 2", n)
	}
}

// TestAgent_DeadlinesFollowTheCoordinatorsClock: the desired state's
// times are on the coordinator's clock (here decades behind the agent's);
// the agent measures the grant from when it received it, so the process
// runs about as long as the grant, then gets SIGTERM (ignored here) and
// SIGKILL, and the exit is reported as stopped after the grant expired.
func TestAgent_DeadlinesFollowTheCoordinatorsClock(t *testing.T) {
	srv, nc := startNATS(t)
	subj := protocol.Subjects{Prefix: protocol.DefaultPrefix}
	desired := &protocol.NodeDesired{V: protocol.Version, Node: "n", Round: 1, Now: 5000, Jobs: []protocol.Assignment{{
		Job: "stubborn", Command: []string{"sh", "-c", `trap "" TERM; echo running; sleep 30`},
		Devices: []int{0}, Procs: 1, WorldSize: 1, MasterAddr: "127.0.0.1", MasterPort: 29500, Expiry: 5001.5}}}
	reply, _ := json.Marshal(protocol.AgentReply{V: protocol.Version, Desired: desired})
	for _, verb := range []string{"join", "heartbeat"} {
		if _, err := nc.Subscribe(subj.Prefix+".agent.n."+verb, func(m *nats.Msg) { _ = m.Respond(reply) }); err != nil {
			t.Fatal(err)
		}
	}
	reports := make(chan protocol.AgentReport, 4)
	if _, err := nc.Subscribe(subj.AgentReport("n"), func(m *nats.Msg) {
		r, err := protocol.DecodeAgentReport(m.Data, 0)
		if err == nil {
			reports <- *r
		}
		ack, _ := json.Marshal(protocol.AgentReply{V: protocol.Version})
		_ = m.Respond(ack)
	}); err != nil {
		t.Fatal(err)
	}
	anc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer anc.Close()
	work := t.TempDir()
	a, err := New(Config{Node: "n", GPUs: 1, Conn: anc, URL: srv.ClientURL(), WorkDir: work,
		Heartbeat: time.Hour, ExpiryGrace: 200 * time.Millisecond, KillGrace: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- a.Run(ctx) }()
	select {
	case r := <-reports:
		took := time.Since(start)
		if r.Job != "stubborn" || r.Code != 128+9 || !strings.Contains(r.Detail, "stopped after its grant expired") {
			t.Errorf("report %+v", r)
		}
		if took < 1500*time.Millisecond {
			t.Errorf("killed after %v, before its 1.5 s grant ended", took)
		}
	case <-ctx.Done():
		t.Fatal("no exit report")
	}
	out, _ := os.ReadFile(filepath.Join(work, "stubborn", "output.log"))
	if !strings.Contains(string(out), "running") {
		t.Errorf("the process did not run:\n%s", out)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// TestAgent_StatesOfADeposedLeaderAreIgnored: after a join answered by the
// leader of epoch 2, a desired state of epoch 1 (a deposed leader that has
// not noticed yet, with a later clock) that places job b on the free device
// is ignored; the leader's own state, with an earlier clock, starts b.
func TestAgent_StatesOfADeposedLeaderAreIgnored(t *testing.T) {
	srv, nc := startNATS(t)
	subj := protocol.Subjects{Prefix: protocol.DefaultPrefix}
	job := func(id string, dev int) protocol.Assignment {
		return protocol.Assignment{Job: id, Command: []string{"sh", "-c", "echo running; sleep 30"},
			Devices: []int{dev}, Procs: 1, WorldSize: 1, MasterAddr: "127.0.0.1", MasterPort: 29500, Expiry: 9000}
	}
	state := func(epoch uint64, now float64, jobs ...protocol.Assignment) *protocol.NodeDesired {
		return &protocol.NodeDesired{V: protocol.Version, Node: "n", Round: 1, Now: now, Epoch: epoch, Jobs: jobs}
	}
	reply, _ := json.Marshal(protocol.AgentReply{V: protocol.Version, Desired: state(2, 5000, job("a", 0))})
	if _, err := nc.Subscribe(subj.AgentJoin("n"), func(m *nats.Msg) { _ = m.Respond(reply) }); err != nil {
		t.Fatal(err)
	}
	anc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer anc.Close()
	work := t.TempDir()
	a, err := New(Config{Node: "n", GPUs: 2, Conn: anc, URL: srv.ClientURL(), WorkDir: work,
		Heartbeat: time.Hour, ExpiryGrace: time.Second, KillGrace: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	ran := func(id string) bool {
		b, _ := os.ReadFile(filepath.Join(work, id, "output.log"))
		return strings.Contains(string(b), "running")
	}
	waitRan := func(id string) {
		for deadline := time.Now().Add(10 * time.Second); !ran(id); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("job %s never ran", id)
			}
		}
	}
	publish := func(d *protocol.NodeDesired) {
		data, _ := json.Marshal(d)
		if err := nc.Publish(subj.Desired("n"), data); err != nil {
			t.Fatal(err)
		}
	}
	waitRan("a")
	publish(state(1, 6000, job("a", 0), job("b", 1))) // the deposed leader
	time.Sleep(time.Second)
	if ran("b") {
		t.Fatal("a deposed leader's state started job b")
	}
	publish(state(2, 5001, job("a", 0), job("b", 1))) // the leader
	waitRan("b")
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// startNATS starts a bare NATS server (no coordinator: the test answers for
// it) and connects to it; both end with the test.
func startNATS(t *testing.T) (*server.Server, *nats.Conn) {
	t.Helper()
	srv, err := server.NewServer(&server.Options{Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(5 * time.Second) {
		t.Fatal("nats did not start")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return srv, nc
}
