package agent_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/coordinator"
	"github.com/shockwave-sched/shockwave/protocol"
)

// leaseWatch records the jobs' registrations and the leases published on
// their NATS subjects.
type leaseWatch struct {
	mu      sync.Mutex
	reg     map[string]time.Time // a job's first registration
	relayed map[string][]bool    // what each registration said
	leases  []seenLease
	// batches on the jobs' events subjects: published by a job itself, or
	// written by the coordinator for an agent (marked with the node)
	direct, carried int
}

type seenLease struct {
	job    string
	action protocol.Action
	at     time.Time
}

// watchLeases listens as the coordinator's user (its secret in the data
// directory, none mode), which sees the registrations the jobs send.
func watchLeases(t *testing.T, c *cluster) *leaseWatch {
	w := &leaseWatch{reg: map[string]time.Time{}, relayed: map[string][]bool{}}
	secret, err := os.ReadFile(filepath.Join(c.dir, "data", "auth", "coordinator.secret"))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(c.url(), nats.Token(strings.TrimSpace(string(secret))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	subs := []struct {
		subject string
		cb      nats.MsgHandler
	}{
		{c.subj.Register(), w.sawRegister},
		{c.subj.Prefix + ".agent.*.register", w.sawRegister}, // the uplink
		{c.subj.AllEvents(), func(m *nats.Msg) {
			w.mu.Lock()
			if m.Header.Get("Shockwave-Via") != "" {
				w.carried++
			} else {
				w.direct++
			}
			w.mu.Unlock()
		}},
		{coordinator.CarriedSubject(c.subj.Prefix), func(m *nats.Msg) { // several batches to a record
			jobs, err := coordinator.CarriedJobs(m.Data)
			if err != nil {
				t.Errorf("a carried record: %v", err)
			}
			w.mu.Lock()
			w.carried += len(jobs)
			w.mu.Unlock()
		}},
		{c.subj.Prefix + ".job.*.lease", func(m *nats.Msg) {
			l, err := protocol.DecodeLease(m.Data, 0)
			if err != nil {
				return
			}
			w.mu.Lock()
			w.leases = append(w.leases, seenLease{l.Job, l.Action, time.Now()})
			w.mu.Unlock()
		}},
	}
	for _, s := range subs {
		if _, err := nc.Subscribe(s.subject, s.cb); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return w
}

// sawRegister notes a registration, sent by the job or by its agent.
func (w *leaseWatch) sawRegister(m *nats.Msg) {
	var r protocol.Register
	if json.Unmarshal(m.Data, &r) != nil {
		return
	}
	w.mu.Lock()
	if _, ok := w.reg[r.Job]; !ok {
		w.reg[r.Job] = time.Now()
	}
	w.relayed[r.Job] = append(w.relayed[r.Job], r.Relayed)
	w.mu.Unlock()
}

// count counts the leases of action on NATS, and those of them sent more
// than slack after their job's first registration.
func (w *leaseWatch) count(action protocol.Action, slack time.Duration) (all, late int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, l := range w.leases {
		if l.action != action {
			continue
		}
		all++
		if reg, ok := w.reg[l.job]; ok && l.at.After(reg.Add(slack)) {
			late++
		}
	}
	return all, late
}

// relayedSays reports what every registration of job said (nil: none).
func (w *leaseWatch) relayedSays(job string) []bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]bool(nil), w.relayed[job]...)
}

// runSharedGPU runs two trainers that share one GPU on a node whose agent
// gets extra flags, until both complete.
func runSharedGPU(t *testing.T, agentFlags ...string) (*leaseWatch, []string, []string) {
	c := newCluster(t, "--agents", "--policy", "gavel")
	w := watchLeases(t, c)
	c.startAgent("node-a", 1, agentFlags...)
	jobs := []string{c.submit(nil, train(6, "30ms")...), c.submit(nil, train(6, "30ms")...)}
	var outs []string
	for _, j := range jobs {
		c.waitState(j, "completed", 150*time.Second)
		outs = append(outs, c.finalOutput(j))
	}
	return w, jobs, outs
}

// TestRelay_SubmittedJobsTakeTheirLeasesFromTheAgentNotFromNATS: two
// trainers time-share a GPU under a relaying agent (and the coordinator
// of main, which relays for jobs whose registration says so). They
// complete; their registrations say relayed; they are suspended by the
// agent's SUSPEND (its reason names the node); no SUSPEND lease goes over
// NATS, and no RUN lease later than two rounds after the job registered
// (the first grant's lease goes out before the process exists). They
// register and send every batch through the agent (the uplink): no batch
// comes from a job's own connection. With --relay=false the same run gets
// its leases over NATS and the jobs publish their own batches.
func TestRelay_SubmittedJobsTakeTheirLeasesFromTheAgentNotFromNATS(t *testing.T) {
	const slack = 2 * time.Second // two rounds: the registration is folded through the log
	w, jobs, outs := runSharedGPU(t)
	suspends := 0
	for i, out := range outs {
		if !strings.Contains(out, "done:") {
			t.Errorf("%s did not finish its loop:\n%s", jobs[i], out)
		}
		suspends += strings.Count(out, "not granted on node node-a in round")
		says := w.relayedSays(jobs[i])
		if len(says) == 0 {
			t.Errorf("no registration of %s seen", jobs[i])
		}
		for _, r := range says {
			if !r {
				t.Errorf("%s registered with relayed=false under a relaying agent", jobs[i])
			}
		}
	}
	if suspends == 0 {
		t.Errorf("no job was suspended by the agent's SUSPEND:\n%s\n%s", outs[0], outs[1])
	}
	for i, out := range outs {
		if n := strings.Count(out, "through its node agent (the uplink)"); n == 0 || strings.Contains(out, "through its own NATS connection") {
			t.Errorf("%s did not register through the uplink every time:\n%s", jobs[i], out)
		}
	}
	w.mu.Lock()
	direct, carried := w.direct, w.carried
	w.mu.Unlock()
	if direct != 0 || carried == 0 {
		t.Errorf("batches on the jobs' events subjects: %d from the jobs' own connections, %d carried by the agent; want all carried", direct, carried)
	}
	runs, lateRuns := w.count(protocol.Run, slack)
	sus, _ := w.count(protocol.Suspend, slack)
	if lateRuns != 0 || sus != 0 {
		t.Errorf("on NATS: %d RUN leases later than %v after the job registered, %d SUSPEND; the agent relays them", lateRuns, slack, sus)
	}
	t.Logf("relay on: %d suspensions by the agent; on NATS %d RUN (%d late), %d SUSPEND; %d batches carried by the agent", suspends, runs, lateRuns, sus, carried)

	w, jobs, outs = runSharedGPU(t, "--relay=false")
	runs, lateRuns = w.count(protocol.Run, slack)
	if lateRuns == 0 {
		t.Errorf("--relay=false: no RUN lease on NATS after the jobs registered (%d in all)", runs)
	}
	for i, out := range outs {
		if strings.Contains(out, "not granted on node") {
			t.Errorf("--relay=false: a SUSPEND came from the agent:\n%s", out)
		}
		if strings.Contains(out, "(the uplink)") {
			t.Errorf("--relay=false: %s registered through the uplink:\n%s", jobs[i], out)
		}
		for _, r := range w.relayedSays(jobs[i]) {
			if r {
				t.Errorf("--relay=false: %s registered with relayed=true", jobs[i])
			}
		}
	}
	w.mu.Lock()
	direct, carried = w.direct, w.carried
	w.mu.Unlock()
	if direct == 0 || carried != 0 {
		t.Errorf("--relay=false: %d batches from the jobs' own connections, %d carried by the agent; want all direct", direct, carried)
	}
	t.Logf("relay off: on NATS %d RUN (%d late)", runs, lateRuns)
}
