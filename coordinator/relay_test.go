package coordinator

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/protocol"
)

// relayAgent is a node agent as the coordinator sees it: it joins, sends
// heartbeats and collects its node's desired states.
type relayAgent struct {
	mu   sync.Mutex
	last *protocol.NodeDesired
}

func joinRelayAgent(t *testing.T, e *env, nc *nats.Conn, node string, gpus int, relay bool) *relayAgent {
	t.Helper()
	a := &relayAgent{}
	if _, err := nc.Subscribe(e.subj.Desired(node), func(m *nats.Msg) {
		d, err := protocol.DecodeNodeDesired(m.Data, 64<<20)
		if err != nil {
			t.Errorf("bad desired state: %v", err)
			return
		}
		a.mu.Lock()
		if a.last == nil || d.Now >= a.last.Now {
			a.last = d
		}
		a.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	hello, _ := json.Marshal(protocol.AgentHello{V: protocol.Version, Node: node, GPUs: gpus, Relay: relay})
	if m, err := nc.Request(e.subj.AgentJoin(node), hello, 5*time.Second); err != nil {
		t.Fatal(err)
	} else if rep, err := protocol.DecodeAgentReply(m.Data, 1<<20); err != nil || rep.Error != nil {
		t.Fatalf("join: %v %+v", err, rep)
	}
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(time.Second):
				_, _ = nc.Request(e.subj.AgentHeartbeat(node), hello, time.Second)
			}
		}
	}()
	return a
}

// assignment is job's assignment in the latest desired state.
func (a *relayAgent) assignment(job string) (protocol.Assignment, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.last == nil {
		return protocol.Assignment{}, false
	}
	for _, as := range a.last.Jobs {
		if as.Job == job {
			return as, true
		}
	}
	return protocol.Assignment{}, false
}

func submitRelayJob(t *testing.T, e *env, nc *nats.Conn, job string) {
	t.Helper()
	data, _ := json.Marshal(protocol.Submit{V: protocol.Version, Job: job, Command: []string{"train"}, Workers: 1})
	m, err := nc.Request(e.subj.Submit(), data, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := protocol.DecodeSubmitReply(m.Data, 1<<20); err != nil || rep.Error != nil {
		t.Fatalf("submit %s: %v %+v", job, err, rep)
	}
}

// runsAfter says whether leases hold a RUN lease of a round after round.
func runsAfter(ll *leaseLog, round int) bool {
	_, ok := ll.find(func(l *protocol.Lease) bool { return l.Action == protocol.Run && l.Round > round })
	return ok
}

// TestRelay_ARelayedJobsLeasesComeInItsNodesDesiredStateOnly: on a node
// whose agent relays, a submitted job whose process registered as relayed
// gets its RUN leases in its assignment and none on its subject; a
// submitted job whose process did not say so, and a job nobody submitted
// that claims it, still get theirs on their subjects; a cancellation's
// EXIT lease still comes on the subject.
func TestRelay_ARelayedJobsLeasesComeInItsNodesDesiredStateOnly(t *testing.T) {
	e := newEnv(t, 0, func(_ *EmbeddedConfig, s *ServiceConfig) { s.Core.Dynamic = true; s.Policy = "shockwave" })
	nc := e.client()
	agent := joinRelayAgent(t, e, nc, "n0", 3, true)
	la, lb, lc := watchLeases(t, nc, e.subj.Lease("a")), watchLeases(t, nc, e.subj.Lease("b")), watchLeases(t, nc, e.subj.Lease("c"))
	submitRelayJob(t, e, nc, "a")
	submitRelayJob(t, e, nc, "b")
	eventually(t, 10*time.Second, "both submitted jobs are placed on n0", func() bool {
		_, a := agent.assignment("a")
		_, b := agent.assignment("b")
		return a && b
	})
	ra := newJob("a", 1)
	ra.Relayed = true
	rc := newJob("c", 1)
	rc.Relayed = true // not submitted: no agent relays its leases
	since := register(t, nc, e.subj, ra).Round
	register(t, nc, e.subj, newJob("b", 1))
	register(t, nc, e.subj, rc)
	for _, j := range []string{"a", "b", "c"} {
		keepTraining(t, e, j)
	}
	var as protocol.Assignment
	eventually(t, 10*time.Second, "a's assignment carries a RUN lease three rounds on", func() bool {
		var ok bool
		as, ok = agent.assignment("a")
		return ok && as.Lease != nil && as.Lease.Round > since+3
	})
	if l := as.Lease; l.Job != "a" || l.Action != protocol.Run || l.Epoch != e.svc.Health().Epoch || len(l.Devices) != 1 || l.Devices[0].Node != "n0" {
		t.Errorf("relayed lease %+v: want a's RUN lease on n0 with the leader's epoch", *l)
	}
	if bs, _ := agent.assignment("b"); bs.Lease == nil || bs.Lease.Job != "b" {
		t.Errorf("b's assignment on a relaying node carries no lease: %+v", bs)
	}
	if runsAfter(la, since) {
		t.Errorf("a relayed job got RUN leases on its subject after it registered as relayed: %+v", la.all())
	}
	eventually(t, 5*time.Second, "b and c get RUN leases on their subjects", func() bool {
		return runsAfter(lb, since+2) && runsAfter(lc, since+2)
	})
	if n := counterValue(t, e.reg, "shockwave_leases_relayed_total", "", ""); n < 1 {
		t.Errorf("shockwave_leases_relayed_total = %v, want a's leases counted", n)
	}
	eventually(t, 5*time.Second, "status says a's leases are relayed and b's are not", func() bool {
		var ok int
		for _, j := range status(t, nc, e.subj).Jobs {
			if (j.Job == "a" && j.Leases == "relayed") || (j.Job == "b" && j.Leases == "") {
				ok++
			}
		}
		return ok == 2
	})

	data, _ := json.Marshal(protocol.Cancel{V: protocol.Version, Job: "a"})
	if _, err := nc.Request(e.subj.Cancel(), data, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the cancelled relayed job gets its EXIT lease on its subject", func() bool {
		_, ok := la.find(func(l *protocol.Lease) bool { return l.Action == protocol.Exit })
		return ok
	})
}

// TestRelay_OnANodeThatDoesNotRelayLeasesArePublished: the same job on a
// node whose agent does not relay gets its leases on its subject, and its
// assignment carries none.
func TestRelay_OnANodeThatDoesNotRelayLeasesArePublished(t *testing.T) {
	e := newEnv(t, 0, func(_ *EmbeddedConfig, s *ServiceConfig) { s.Core.Dynamic = true; s.Policy = "shockwave" })
	nc := e.client()
	agent := joinRelayAgent(t, e, nc, "n0", 1, false)
	la := watchLeases(t, nc, e.subj.Lease("a"))
	submitRelayJob(t, e, nc, "a")
	eventually(t, 10*time.Second, "the job is placed on n0", func() bool { _, ok := agent.assignment("a"); return ok })
	ra := newJob("a", 1)
	ra.Relayed = true
	since := register(t, nc, e.subj, ra).Round
	keepTraining(t, e, "a")
	eventually(t, 10*time.Second, "RUN leases on the subject after the registration", func() bool { return runsAfter(la, since+2) })
	if as, _ := agent.assignment("a"); as.Lease != nil {
		t.Errorf("an agent that does not relay was given a lease: %+v", as.Lease)
	}
}

// round is the round of the latest desired state (-1: none yet).
func (a *relayAgent) round() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.last == nil {
		return -1
	}
	return a.last.Round
}

// TestRelay_ASubmittedJobGetsNoLeaseOnItsSubjectUntilAProcessRegisters:
// whether its node's agent relays or not, a submitted job granted GPUs
// before any process of it registered has nobody on its lease subject, so
// its rounds' leases are held (counted), not published; the registration's
// reply carries the current RUN lease, and from then on the leases of a
// process that does not read the agent's pipe come on the subject.
func TestRelay_ASubmittedJobGetsNoLeaseOnItsSubjectUntilAProcessRegisters(t *testing.T) {
	for _, relay := range []bool{false, true} {
		t.Run(map[bool]string{false: "agent does not relay", true: "agent relays"}[relay], func(t *testing.T) {
			e := newEnv(t, 0, func(_ *EmbeddedConfig, s *ServiceConfig) { s.Core.Dynamic = true; s.Policy = "shockwave" })
			nc := e.client()
			agent := joinRelayAgent(t, e, nc, "n0", 1, relay)
			la := watchLeases(t, nc, e.subj.Lease("a"))
			submitRelayJob(t, e, nc, "a")
			var first int
			eventually(t, 10*time.Second, "the job is placed on n0", func() bool {
				_, ok := agent.assignment("a")
				first = agent.round()
				return ok
			})
			eventually(t, 10*time.Second, "three rounds with the job placed", func() bool {
				_, ok := agent.assignment("a")
				return ok && agent.round() >= first+3
			})
			if got := la.all(); len(got) != 0 {
				t.Fatalf("leases published to a job no process of which registered: %+v", got)
			}
			if n := counterValue(t, e.reg, "shockwave_leases_held_total", "", ""); n < 1 {
				t.Errorf("shockwave_leases_held_total = %v, want the held leases counted", n)
			}
			st := status(t, nc, e.subj)
			for _, j := range st.Jobs {
				if j.Job == "a" && j.Leases != "held" {
					t.Errorf("status of a: leases %q, want held", j.Leases)
				}
			}
			if len(st.Nodes) != 1 || st.Nodes[0].Relay != relay {
				t.Errorf("status nodes %+v: want n0 with relay %v", st.Nodes, relay)
			}
			rep := register(t, nc, e.subj, newJob("a", 1)) // does not read a pipe
			if rep.Lease == nil || rep.Lease.Action != protocol.Run || rep.Lease.Job != "a" {
				t.Fatalf("registration reply's lease %+v: want a's current RUN lease", rep.Lease)
			}
			keepTraining(t, e, "a")
			eventually(t, 10*time.Second, "RUN leases on the subject after the registration", func() bool { return runsAfter(la, rep.Round+1) })
		})
	}
}

// residentLease is job's RUN lease among the latest desired state's
// residents.
func (a *relayAgent) residentLease(job string) (protocol.Lease, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.last == nil {
		return protocol.Lease{}, false
	}
	for _, l := range a.last.Residents {
		if l.Job == job {
			return l, true
		}
	}
	return protocol.Lease{}, false
}

// TestRelay_AResidentJobItsAgentCarriesGetsItsLeasesInTheDesiredStateOnly:
// a resident job whose registration n0's agent carried as relayed (its job
// socket) finds its RUN leases among n0's desired state's residents, with
// the leader's epoch, and gets no RUN or SUSPEND lease on its subject once
// registered. Another resident of n0, carried but not relayed, and a
// relayed resident of n1, whose agent does not relay, get theirs on their
// subjects and are never listed; nor is a job whose relayed registration
// came over its own connection.
func TestRelay_AResidentJobItsAgentCarriesGetsItsLeasesInTheDesiredStateOnly(t *testing.T) {
	e := newEnv(t, 0, func(_ *EmbeddedConfig, s *ServiceConfig) {
		s.Core.Dynamic, s.Policy, s.AgentsCarryResidents = true, "shockwave", true
	})
	nc := e.client()
	n0 := joinRelayAgent(t, e, nc, "n0", 3, true)
	n1 := joinRelayAgent(t, e, nc, "n1", 2, false)
	lr, ls, lq, lo := watchLeases(t, nc, e.subj.Lease("r")), watchLeases(t, nc, e.subj.Lease("s")),
		watchLeases(t, nc, e.subj.Lease("q")), watchLeases(t, nc, e.subj.Lease("o"))
	resident := func(job, node string, relayed bool) protocol.Register {
		r := newJob(job, 1)
		r.Node, r.Relayed = node, relayed
		return r
	}
	rep := agentRegister(t, nc, e.subj, "n0", resident("r", "n0", true))
	if rep.Error != nil {
		t.Fatalf("r via n0: %+v", rep.Error)
	}
	since := rep.Round
	for _, c := range []struct {
		node string
		reg  protocol.Register
	}{{"n0", resident("s", "n0", false)}, {"n1", resident("q", "n1", true)}} {
		if rep := agentRegister(t, nc, e.subj, c.node, c.reg); rep.Error != nil {
			t.Fatalf("%s via %s: %+v", c.reg.Job, c.node, rep.Error)
		}
	}
	register(t, nc, e.subj, resident("o", "n0", true)) // its own connection
	for _, j := range []string{"r", "s", "q", "o"} {
		keepTraining(t, e, j)
	}
	var l protocol.Lease
	eventually(t, 15*time.Second, "r's RUN lease is among n0's residents three rounds on", func() bool {
		var ok bool
		l, ok = n0.residentLease("r")
		return ok && l.Round > since+3
	})
	if l.Action != protocol.Run || l.Epoch != e.svc.Health().Epoch || len(l.Devices) != 1 || l.Devices[0].Node != "n0" {
		t.Errorf("relayed resident lease %+v: want r's RUN lease on n0 with the leader's epoch", l)
	}
	eventually(t, 15*time.Second, "s and q get RUN leases on their subjects, o too", func() bool {
		return runsAfter(ls, since+2) && runsAfter(lq, since+2) && runsAfter(lo, since+2)
	})
	if got, ok := lr.find(func(l *protocol.Lease) bool { return l.Action != protocol.Exit && l.Round > since+1 }); ok {
		t.Errorf("a relayed resident got a %s lease of round %d on its subject: %s", got.Action, got.Round, lr)
	}
	if _, ok := n0.residentLease("s"); ok {
		t.Error("s, carried but not relayed, is listed among n0's residents")
	}
	if _, ok := n1.residentLease("q"); ok {
		t.Error("q is listed among the residents of n1, whose agent does not relay")
	}
	if _, ok := n0.residentLease("o"); ok {
		t.Error("o, whose relayed registration came over its own connection, is listed among n0's residents")
	}
	if n := counterValue(t, e.reg, "shockwave_leases_relayed_total", "", ""); n < 1 {
		t.Errorf("shockwave_leases_relayed_total = %v, want r's leases counted", n)
	}
}
