package coordinator

import (
	"encoding/json"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/protocol"
)

// TestFailover_AStandbyFoldsCarriedRecordsAndTakesOverFromAKilledLeader:
// two coordinator processes; an agent carries the batches of a job
// resident on its node, which the leader appends as carried records. The
// leader is killed (SIGKILL) while batches flow; the standby, which folded
// the carried records as they came, takes over, gathers the agent's later
// batches itself, and its state is the uninterrupted fold of the log.
func TestFailover_AStandbyFoldsCarriedRecordsAndTakesOverFromAKilledLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("starts coordinator processes")
	}
	t.Setenv("SHOCKWAVE_FAILOVER_AGENTS", "1")
	c, p := newPair(t)
	defer func() {
		if t.Failed() {
			t.Logf("coordinator logs:\n%s", c.logs.String())
		}
	}()
	subj, nc := p.subj, p.jobs
	joinRelayAgent(t, &env{subj: subj}, nc, "n0", 1, true)
	reg := newJob("r", 1)
	reg.Node = "n0"
	if rep := agentRegister(t, nc, subj, "n0", reg); rep.Error != nil {
		t.Fatalf("registering the resident job through its agent: %v", rep.Error)
	}
	var sent atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // the agent forwards a batch every 5 ms
		defer close(done)
		for seq := uint64(1); ; seq++ {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			ev := progress(seq, 10, int64(10*seq), 0.005)
			ev.V, ev.Job = protocol.Version, "r"
			m := nats.NewMsg(subj.AgentEvents("n0"))
			m.Header.Set(protocol.HdrJob, "r")
			m.Data, _ = json.Marshal(protocol.Batch{V: protocol.Version, Job: "r", Events: []protocol.Event{ev}})
			if nc.PublishMsg(m) == nil {
				sent.Store(seq)
			}
		}
	}()
	defer func() { close(stop); <-done }()
	lastSeq := func() uint64 { // 0 while no coordinator answers (the takeover)
		m, err := nc.Request(subj.Status(), nil, time.Second)
		if err != nil {
			return 0
		}
		st, err := protocol.DecodeStatusReply(m.Data, 64<<20)
		if err != nil || st.Error != nil {
			return 0
		}
		row, _ := jobRow(st, "r")
		return row.LastSeq
	}
	eventually(t, 10*time.Second, "the leader folds carried batches", func() bool { return lastSeq() >= 50 })

	if err := p.leader.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = p.leader.Wait()
	if _, e := c.waitLeader(p.epoch, p.standby); e <= p.epoch {
		t.Fatalf("the standby did not take over (epoch %d)", e)
	}
	after := sent.Load()
	eventually(t, 15*time.Second, "the new leader folds the batches sent after the takeover", func() bool {
		return lastSeq() >= after+50
	})
	if n := carriedInLog(t, c, subj); n < 2 {
		t.Errorf("%d carried records in the log; want the agent's batches in carried records", n)
	}

	st := status(t, nc, subj)
	signal(t, p.standby, syscall.SIGSTOP) // its snapshots would compact the log while it is read
	defer signal(t, p.standby, syscall.SIGCONT)
	ref, _ := reference(t, c.admin, subj.Prefix, st.LogSeq)
	for i := range st.Jobs {
		st.Jobs[i].Leases = ""
	}
	sameState(t, st, ref)
}

// carriedInLog counts the carried records in the cluster's log.
func carriedInLog(t *testing.T, c *cluster, subj protocol.Subjects) int {
	t.Helper()
	n := 0
	for _, m := range logRecordsOf(t, c.admin, subj.Prefix) {
		if m.Subject == CarriedSubject(subj.Prefix) {
			n++
		}
	}
	return n
}
