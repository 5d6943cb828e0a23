package agent_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shockwave-sched/shockwave/protocol"
)

// TestJobSocket_ResidentTrainersShareAGPUThroughTheAgentAndDialNoNATS:
// two trainers nobody submitted run on node-a, whose agent serves a job
// socket; every process is real (coordinator, agent, go-train). Their NATS
// address names a port where nothing listens, so they can only reach the
// coordinator through the socket: they register through it (resident on
// the agent's node, which its welcome names), time-share the node's one
// GPU by the RUN and SUSPEND leases the agent writes into the socket, and
// complete; every batch on their events subjects was carried by the agent,
// and no RUN or SUSPEND lease went over NATS after they registered (the
// agent relays them from the node's desired state).
func TestJobSocket_ResidentTrainersShareAGPUThroughTheAgentAndDialNoNATS(t *testing.T) {
	c := newCluster(t, "--agents", "--policy", "gavel")
	w := watchLeases(t, c)
	sock := filepath.Join(c.dir, "agent.sock")
	c.startAgent("node-a", 1, "--job-socket", sock)
	nowhere := fmt.Sprintf("nats://127.0.0.1:%d", freePort(t))

	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	type run struct {
		job string
		out bytes.Buffer
		cmd *exec.Cmd
	}
	var runs []*run
	for _, job := range []string{"res-1", "res-2"} {
		r := &run{job: job}
		args := append(train(6, "30ms")[1:], "--job", job, "--nats-url", nowhere, "--checkpoint", filepath.Join(t.TempDir(), "ckpt.json"))
		r.cmd = exec.CommandContext(ctx, bin.train, args...)
		r.cmd.Env = append(cleanEnv(), "SHOCKWAVE_AGENT_SOCKET="+sock)
		r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.out
		r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := r.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	suspends := 0
	for _, r := range runs {
		if err := r.cmd.Wait(); err != nil {
			t.Fatalf("%s: %v\n%s\nagent:\n%s", r.job, err, r.out.String(), tail(c.read("agent-node-a"), 30))
		}
		out := r.out.String()
		if !strings.Contains(out, "done:") || !strings.Contains(out, "through its node agent (the uplink)") {
			t.Errorf("%s did not train to the end through its agent:\n%s", r.job, out)
		}
		suspends += strings.Count(out, "suspended (")
		if info := c.job(r.job); info.State != "completed" || info.Node != "node-a" {
			t.Errorf("%s: state %s on node %q, want completed on node-a", r.job, info.State, info.Node)
		}
	}
	if suspends == 0 {
		t.Errorf("neither trainer was suspended: two jobs on one GPU must time-share\n%s\n%s", runs[0].out.String(), runs[1].out.String())
	}
	w.mu.Lock()
	direct, carried := w.direct, w.carried
	w.mu.Unlock()
	if direct != 0 || carried == 0 {
		t.Errorf("batches on the jobs' events subjects: %d from the jobs' own connections, %d carried by the agent; want all carried", direct, carried)
	}
	for _, r := range runs {
		if says := w.relayedSays(r.job); len(says) == 0 || slices.Contains(says, false) {
			t.Errorf("%s's registrations said relayed %v; the agent marks what it carries relayed", r.job, says)
		}
	}
	// The agent relays the RUN leases from the node's desired state and
	// writes the SUSPENDs itself: none goes over NATS once a job has
	// registered (two rounds of slack: the registration is folded through
	// the log).
	runsOnNATS, lateRuns := w.count(protocol.Run, 2*time.Second)
	suspendsOnNATS, _ := w.count(protocol.Suspend, 0)
	if lateRuns != 0 || suspendsOnNATS != 0 {
		t.Errorf("on NATS: %d RUN leases (%d later than 2 s after the registration) and %d SUSPEND; the agent relays them", runsOnNATS, lateRuns, suspendsOnNATS)
	}
	t.Logf("%d suspensions through the socket, %d batches carried by the agent; on NATS %d RUN leases", suspends, carried, runsOnNATS)
}

// cleanEnv is this process's environment without SHOCKWAVE_ variables.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SHOCKWAVE_") {
			env = append(env, kv)
		}
	}
	return env
}
