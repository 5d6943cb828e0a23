package coordinator

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/protocol"
)

// agentEvents publishes job's batch as node's agent carries it (the
// uplink): on the node's events subject, the job in the header; batchJob
// is the job the batch itself names.
func agentEvents(t *testing.T, nc *nats.Conn, subj protocol.Subjects, node, job, batchJob string, evs ...protocol.Event) {
	t.Helper()
	for i := range evs {
		evs[i].V, evs[i].Job = protocol.Version, batchJob
	}
	data, _ := json.Marshal(protocol.Batch{V: protocol.Version, Job: batchJob, Events: evs})
	m := nats.NewMsg(subj.AgentEvents(node))
	m.Data = data
	if job != "" {
		m.Header.Set(protocol.HdrJob, job)
	}
	if err := nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
}

// agentRegister sends r as node's agent carries it.
func agentRegister(t *testing.T, nc *nats.Conn, subj protocol.Subjects, node string, r protocol.Register) *protocol.RegisterReply {
	t.Helper()
	data, _ := json.Marshal(r)
	m, err := nc.Request(subj.AgentRegister(node), data, 5*time.Second)
	if err != nil {
		t.Fatalf("register via %s: %v", node, err)
	}
	rep, err := protocol.DecodeRegisterReply(m.Data, 1<<20)
	if err != nil {
		t.Fatalf("register reply via %s: %v", node, err)
	}
	return rep
}

// placedNode waits until job is placed on one of the agents and returns
// that node and another one.
func placedNode(t *testing.T, job string, agents map[string]*relayAgent) (on, off string) {
	t.Helper()
	eventually(t, 10*time.Second, job+" is placed", func() bool {
		for n, a := range agents {
			if _, ok := a.assignment(job); ok {
				on = n
				return true
			}
		}
		return false
	})
	for n := range agents {
		if n != on {
			off = n
		}
	}
	return on, off
}

// twoRelayAgents joins relaying agents of one GPU on n0 and n1 and
// submits jobs.
func twoRelayAgents(t *testing.T, e *env, nc *nats.Conn, jobs ...string) map[string]*relayAgent {
	t.Helper()
	agents := map[string]*relayAgent{
		"n0": joinRelayAgent(t, e, nc, "n0", 1, true),
		"n1": joinRelayAgent(t, e, nc, "n1", 1, true),
	}
	for _, j := range jobs {
		submitRelayJob(t, e, nc, j)
	}
	return agents
}

func rejectedAs(t *testing.T, e *env, reason string) float64 {
	return counterValue(t, e.reg, "shockwave_events_rejected_total", "reason", reason)
}

// TestUplink_AnAgentCarriesTheRegistrationAndEventsOfTheJobsItRunsOnly:
// the agent of the node a submitted job is placed on registers it and
// delivers its batches; the agent of another node can do neither, nor can
// any agent speak for a job nobody submitted; a batch whose header names
// another job than the batch, or no job, is refused; none of the refusals
// changes the job's state. A job that sets the node header on its own
// batch only subjects it to the check.
func TestUplink_AnAgentCarriesTheRegistrationAndEventsOfTheJobsItRunsOnly(t *testing.T) {
	e := newEnv(t, 0, func(_ *EmbeddedConfig, s *ServiceConfig) { s.Core.Dynamic = true; s.Policy = "shockwave" })
	nc := e.client()
	agents := twoRelayAgents(t, e, nc, "a", "b")
	on, off := placedNode(t, "a", agents)

	reg := newJob("a", 1)
	reg.Relayed = true
	if rep := agentRegister(t, nc, e.subj, off, reg); rep.Error == nil || rep.Error.Code != protocol.CodeForbidden {
		t.Fatalf("registration of a via %s, where a is not placed: %+v, want forbidden", off, rep)
	}
	ghost := newJob("ghost", 1)
	register(t, nc, e.subj, ghost) // registered directly: nobody submitted it
	if rep := agentRegister(t, nc, e.subj, on, ghost); rep.Error == nil || rep.Error.Code != protocol.CodeForbidden {
		t.Fatalf("registration of a job nobody submitted via an agent: %+v, want forbidden", rep)
	}
	if n := counterValue(t, e.reg, "shockwave_registrations_total", "result", "rejected_not_placed"); n != 2 {
		t.Errorf("registrations rejected as not placed: %v, want 2", n)
	}
	if row, _ := jobRow(status(t, nc, e.subj), "a"); row.Leases != "held" {
		t.Errorf("a refused registration adopted the job: leases %q, want still held", row.Leases)
	}
	rep := agentRegister(t, nc, e.subj, on, reg)
	if rep.Error != nil || rep.Job != "a" || rep.Lease == nil || rep.Lease.Action != protocol.Run {
		t.Fatalf("registration of a via %s: %+v, want a's RUN lease", on, rep)
	}

	agentEvents(t, nc, e.subj, on, "a", "a", progress(1, 100, 100, 1))
	eventually(t, 5*time.Second, "the carried batch is applied", func() bool {
		r, _ := jobRow(status(t, nc, e.subj), "a")
		return r.LastSeq == 1 && r.StepsDone == 100
	})
	before, _ := jobRow(status(t, nc, e.subj), "a")
	agentEvents(t, nc, e.subj, off, "a", "a", progress(2, 100, 200, 1))   // another node's agent
	agentEvents(t, nc, e.subj, on, "a", "b", progress(3, 100, 300, 1))    // the header names another job
	agentEvents(t, nc, e.subj, on, "", "a", progress(4, 100, 400, 1))     // no header
	agentEvents(t, nc, e.subj, on, "../a", "a", progress(5, 100, 500, 1)) // not a job id
	agentEvents(t, nc, e.subj, on, "ghost", "ghost", progress(1, 1, 1, 1))
	forged := nats.NewMsg(e.subj.Events("a")) // the job's own batch, claiming the other node
	forged.Header.Set(hdrVia, off)
	forged.Data, _ = json.Marshal(protocol.Batch{V: 1, Job: "a", Events: []protocol.Event{{V: 1, Job: "a", Type: protocol.EventProgress,
		Seq: 6, Steps: 1, StepsDone: 600, TotalSteps: 1_000_000, BatchSize: 32, Elapsed: 1}}})
	if err := nc.PublishMsg(forged); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "every refusal is counted", func() bool {
		return rejectedAs(t, e, "not_placed") == 3 && rejectedAs(t, e, "subject_mismatch") == 1 &&
			rejectedAs(t, e, "uplink_invalid") == 2
	})
	after, _ := jobRow(status(t, nc, e.subj), "a")
	if after.LastSeq != before.LastSeq || after.StepsDone != before.StepsDone {
		t.Errorf("refused batches changed a: before %+v, after %+v", before, after)
	}
	agentEvents(t, nc, e.subj, on, "a", "a", progress(7, 100, 700, 1))
	eventually(t, 5*time.Second, "a later batch via the right node is applied", func() bool {
		r, _ := jobRow(status(t, nc, e.subj), "a")
		return r.LastSeq == 7 && r.StepsDone == 700
	})
	// An agent's NATS headers do not reach the log: two batches with one
	// message id are both stored (the log would drop the second as a
	// duplicate), and a node header of its own is replaced.
	for seq := uint64(8); seq <= 9; seq++ {
		m := nats.NewMsg(e.subj.AgentEvents(on))
		m.Header.Set(protocol.HdrJob, "a")
		m.Header.Set("Nats-Msg-Id", "same")
		m.Header.Set(hdrVia, off)
		m.Data, _ = json.Marshal(protocol.Batch{V: 1, Job: "a", Events: []protocol.Event{{V: 1, Job: "a", Type: protocol.EventProgress,
			Seq: seq, Steps: 1, StepsDone: int64(seq) * 100, TotalSteps: 1_000_000, BatchSize: 32, Elapsed: 1}}})
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 5*time.Second, "both batches with one message id are applied", func() bool {
		r, _ := jobRow(status(t, nc, e.subj), "a")
		return r.LastSeq == 9
	})
}

// TestUplink_TheAgentThatRanAJobStillCarriesItsBatchesAfterItsGrantEnds:
// two jobs share one GPU; when a's grant moves to b, a's process sends its
// last batch after the round, through n0's agent, which ran it: that batch
// is applied. The agent of a node a never ran on is still refused, and the
// nodes of each job's last grant survive a restart from a snapshot.
func TestUplink_TheAgentThatRanAJobStillCarriesItsBatchesAfterItsGrantEnds(t *testing.T) {
	e := newEnv(t, 0, func(_ *EmbeddedConfig, s *ServiceConfig) {
		s.Core.Dynamic = true
		s.Policy = "shockwave"
		s.SnapshotRounds = 1
	})
	nc := e.client()
	n0 := joinRelayAgent(t, e, nc, "n0", 1, true)
	submitRelayJob(t, e, nc, "a")
	submitRelayJob(t, e, nc, "b")
	// Each job's process registers through n0 when it is placed and
	// reports progress; the other is suspended.
	var seq uint64 = 1
	registered := map[string]bool{}
	var suspendedA bool
	eventually(t, 60*time.Second, "a ran on n0 and then lost its grant to b", func() bool {
		for _, j := range []string{"a", "b"} {
			if _, ok := n0.assignment(j); ok && !registered[j] {
				r := newJob(j, 1)
				r.Relayed = true
				if rep := agentRegister(t, nc, e.subj, "n0", r); rep.Error != nil {
					t.Fatalf("register %s via n0: %+v", j, rep.Error)
				}
				registered[j] = true
			}
			if _, ok := n0.assignment(j); ok {
				seq++
				agentEvents(t, nc, e.subj, "n0", j, j, progress(seq, 10, int64(seq)*10, 0.05))
			}
		}
		_, running := n0.assignment("a")
		suspendedA = registered["a"] && !running
		return suspendedA
	})
	e.stopService() // a restart from the snapshot, to check it kept the last grant
	e.startService()
	nc = e.client()
	before, _ := jobRow(status(t, nc, e.subj), "a")
	if _, ok := n0.assignment("a"); ok {
		t.Skip("a was granted again during the restart; the scenario needs it suspended")
	}
	joinRelayAgent(t, e, nc, "n9", 1, true)
	agentEvents(t, nc, e.subj, "n9", "a", "a", progress(before.LastSeq+1, 10, before.StepsDone+10, 0.05))
	eventually(t, 5*time.Second, "n9's batch for a is refused", func() bool { return rejectedAs(t, e, "not_placed") == 1 })
	agentEvents(t, nc, e.subj, "n0", "a", "a", progress(before.LastSeq+2, 10, before.StepsDone+20, 0.05))
	eventually(t, 5*time.Second, "n0's last batch for a is applied", func() bool {
		r, _ := jobRow(status(t, nc, e.subj), "a")
		return r.LastSeq == before.LastSeq+2
	})
}

// TestRunnerState_ADamagedLastGrantIsRefused: a snapshot's last grants
// must name jobs and nodes.
func TestRunnerState_ADamagedLastGrantIsRefused(t *testing.T) {
	for name, last := range map[string]string{
		"bad node":  `{"a":["no/such"]}`,
		"no nodes":  `{"a":[]}`,
		"bad job":   `{"../a":["n0"]}`,
		"not nodes": `{"a":"n0"}`,
	} {
		data := []byte(`{"v":1,"subs":[],"nodes":[],"since":{},"last":` + last + `}`)
		if err := newRunner().unmarshal(data); err == nil {
			t.Errorf("%s: %s accepted", name, last)
		}
	}
	rn := newRunner()
	rn.last["a"] = []string{"n0", "n1"}
	data, err := rn.marshal()
	if err != nil {
		t.Fatal(err)
	}
	back := newRunner()
	if err := back.unmarshal(data); err != nil || len(back.last["a"]) != 2 || back.last["a"][1] != "n1" {
		t.Fatalf("round trip: %v, %v", err, back.last)
	}
}

// TestUplink_AnAgentCarriesTheJobsResidentOnItsNodeOnlyWhereResidentsAreOn:
// with AgentsCarryResidents (none and token mode), a node's agent carries
// the registration and batches of a job resident on its node, which its
// job socket serves; it cannot register a job resident elsewhere or on no
// node, nor deliver the batches of a job resident on another node. Without
// the setting (creds mode) it carries none, and a header an agent sets to
// claim the setting is replaced.
func TestUplink_AnAgentCarriesTheJobsResidentOnItsNodeOnlyWhereResidentsAreOn(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(map[bool]string{true: "residents", false: "no residents"}[on], func(t *testing.T) {
			e := newEnv(t, 0, func(_ *EmbeddedConfig, s *ServiceConfig) {
				s.Core.Dynamic, s.Policy, s.AgentsCarryResidents = true, "shockwave", on
			})
			nc := e.client()
			joinRelayAgent(t, e, nc, "n0", 1, true)
			joinRelayAgent(t, e, nc, "n1", 1, true)

			r := newJob("r", 1)
			r.Node = "n0"
			rep := agentRegister(t, nc, e.subj, "n0", r)
			if !on {
				if rep.Error == nil || rep.Error.Code != protocol.CodeForbidden {
					t.Fatalf("registration of a resident job via its node's agent without the setting: %+v, want forbidden", rep)
				}
				// An agent's own claim of the setting is replaced.
				m := nats.NewMsg(e.subj.AgentRegister("n0"))
				m.Header.Set(hdrResidents, "1")
				m.Data, _ = json.Marshal(r)
				reply, err := nc.RequestMsg(m, 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				if rep, _ := protocol.DecodeRegisterReply(reply.Data, 1<<20); rep == nil || rep.Error == nil || rep.Error.Code != protocol.CodeForbidden {
					t.Fatalf("registration claiming the residents header: %+v, want forbidden", rep)
				}
				register(t, nc, e.subj, r) // the job's own registration
				waitActive(t, nc, e.subj, "r")
				m = nats.NewMsg(e.subj.AgentEvents("n0"))
				m.Header.Set(protocol.HdrJob, "r")
				m.Header.Set(hdrResidents, "1")
				m.Data, _ = json.Marshal(protocol.Batch{V: 1, Job: "r", Events: []protocol.Event{{V: 1, Job: "r", Type: protocol.EventProgress,
					Seq: 1, Steps: 1, StepsDone: 100, TotalSteps: 1_000_000, BatchSize: 32, Elapsed: 1}}})
				if err := nc.PublishMsg(m); err != nil {
					t.Fatal(err)
				}
				eventually(t, 5*time.Second, "the carried batch is refused", func() bool { return rejectedAs(t, e, "not_placed") == 1 })
				if row, _ := jobRow(status(t, nc, e.subj), "r"); row.LastSeq != 0 {
					t.Errorf("a refused batch was applied: %+v", row)
				}
				return
			}
			if rep.Error != nil || rep.Job != "r" {
				t.Fatalf("registration of r, resident on n0, via n0: %+v", rep)
			}
			s := newJob("s", 1)
			s.Node = "n0"
			if rep := agentRegister(t, nc, e.subj, "n1", s); rep.Error == nil || rep.Error.Code != protocol.CodeForbidden {
				t.Fatalf("registration of a job resident on n0 via n1: %+v, want forbidden", rep)
			}
			if rep := agentRegister(t, nc, e.subj, "n1", newJob("u", 1)); rep.Error == nil || rep.Error.Code != protocol.CodeForbidden {
				t.Fatalf("registration of a job resident nowhere via n1: %+v, want forbidden", rep)
			}
			if _, ok := jobRow(status(t, nc, e.subj), "s"); ok {
				t.Error("a refused registration registered s")
			}
			waitActive(t, nc, e.subj, "r")
			agentEvents(t, nc, e.subj, "n1", "r", "r", progress(1, 100, 100, 1)) // another node's agent
			agentEvents(t, nc, e.subj, "n0", "r", "r", progress(2, 100, 200, 1))
			eventually(t, 5*time.Second, "the batch via r's node is applied, the other refused", func() bool {
				row, _ := jobRow(status(t, nc, e.subj), "r")
				return row.LastSeq == 2 && row.StepsDone == 200 && rejectedAs(t, e, "not_placed") == 1
			})
		})
	}
}

// waitActive waits until job is active.
func waitActive(t *testing.T, nc *nats.Conn, subj protocol.Subjects, job string) {
	t.Helper()
	eventually(t, 10*time.Second, job+" is active", func() bool {
		row, ok := jobRow(status(t, nc, subj), job)
		return ok && row.State == string(Active)
	})
}
