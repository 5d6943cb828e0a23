package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/sdk"
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
	c, p := residentPair(t, "")
	subj, nc := p.subj, p.jobs
	sent, stopSending := carryEvery(t, nc, subj, "r", "n0", 1)
	defer stopSending()
	lastSeq := func() uint64 { return lastSeqOf(nc, subj, "r") }
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

	sameAsTheLog(t, c, p.standby, status(t, nc, subj))
}

// residentPair is newPair with coordinator processes whose agents carry
// the jobs resident on their node, with the carry window window (""
// their default), n0's agent joined and job r, resident on n0, registered
// through it. The coordinators' logs are printed when the test fails.
func residentPair(t *testing.T, window string) (*cluster, pair) {
	t.Helper()
	t.Setenv("SHOCKWAVE_FAILOVER_AGENTS", "1")
	if window != "" {
		t.Setenv("SHOCKWAVE_FAILOVER_CARRY", window)
	}
	c, p := newPair(t)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("coordinator logs:\n%s", c.logs.String())
		}
	})
	joinRelayAgent(t, &env{subj: p.subj}, p.jobs, "n0", 1, true)
	reg := newJob("r", 1)
	reg.Node = "n0"
	if rep := agentRegister(t, p.jobs, p.subj, "n0", reg); rep.Error != nil {
		t.Fatalf("registering the resident job through its agent: %v", rep.Error)
	}
	return c, p
}

// carryEvery sends, as node's agent, a batch of job's every 5 ms, from
// sequence number from on; sent is the last one sent; stop stops it (once
// or more).
func carryEvery(t *testing.T, nc *nats.Conn, subj protocol.Subjects, job, node string, from uint64) (sent *atomic.Uint64, stop func()) {
	sent = &atomic.Uint64{}
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for seq := from; ; seq++ {
			select {
			case <-quit:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if carryBatch(nc, subj, job, node, seq) == nil {
				sent.Store(seq)
			}
		}
	}()
	var once sync.Once
	return sent, func() { once.Do(func() { close(quit); <-done }) }
}

// carryBatch sends, as node's agent, a progress batch of job's with
// sequence number seq (10 steps an event).
func carryBatch(nc *nats.Conn, subj protocol.Subjects, job, node string, seq uint64) error {
	ev := progress(seq, 10, int64(10*seq), 0.005)
	ev.V, ev.Job = protocol.Version, job
	m := nats.NewMsg(subj.AgentEvents(node))
	m.Header.Set(protocol.HdrJob, job)
	m.Data, _ = json.Marshal(protocol.Batch{V: protocol.Version, Job: job, Events: []protocol.Event{ev}})
	return nc.PublishMsg(m)
}

// lastSeqOf is job's last folded sequence number; 0 while no coordinator
// answers (a takeover).
func lastSeqOf(nc *nats.Conn, subj protocol.Subjects, job string) uint64 {
	m, err := nc.Request(subj.Status(), nil, time.Second)
	if err != nil {
		return 0
	}
	st, err := protocol.DecodeStatusReply(m.Data, 64<<20)
	if err != nil || st.Error != nil {
		return 0
	}
	row, _ := jobRow(st, job)
	return row.LastSeq
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

// TestFailover_AFrozenLeadersLateCarriedRecordsAreFoldedAsAnyOther: the
// leader, its carry window 100 ms, holds an agent's batch and an agent's
// registration in its open records when it is frozen (SIGSTOP: a partition,
// a long pause). The standby takes over and folds the agent's later
// batches. Thawed, the deposed leader appends the records it held, after
// the new leader's records: every coordinator folds them like any other,
// the stale batch is refused as out of order (the job's state does not go
// back), the registration is enrolled, and the new leader's state is the
// uninterrupted fold of the log.
func TestFailover_AFrozenLeadersLateCarriedRecordsAreFoldedAsAnyOther(t *testing.T) {
	if testing.Short() {
		t.Skip("starts coordinator processes")
	}
	// No snapshot in the test's time: the test reads the late records in
	// the log, and a snapshot's compaction once removed them first (the
	// records were folded; the wait for them timed out).
	t.Setenv("SHOCKWAVE_FAILOVER_SNAPSHOT_ROUNDS", "100000")
	c, p := residentPair(t, "100ms")
	subj, nc := p.subj, p.jobs
	const stale = 10 // the batch the frozen leader holds
	for seq := uint64(1); seq < stale; seq++ {
		if err := carryBatch(nc, subj, "r", "n0", seq); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, "the leader folds the first batches", func() bool { return lastSeqOf(nc, subj, "r") == stale-1 })
	time.Sleep(200 * time.Millisecond) // every window closed
	if err := carryBatch(nc, subj, "r", "n0", stale); err != nil {
		t.Fatal(err)
	}
	q := newJob("q", 1)
	q.Node = "n0"
	if err := nc.PublishRequest(subj.AgentRegister("n0"), nc.NewRespInbox(), mustJSON(t, q)); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // within the leader's window of 100 ms
	signal(t, p.leader, syscall.SIGSTOP)
	thawed := false
	defer func() {
		if !thawed {
			signal(t, p.leader, syscall.SIGCONT)
		}
	}()
	_, epoch := c.waitLeader(p.epoch, p.standby)
	sent, stopSending := carryEvery(t, nc, subj, "r", "n0", stale+1)
	defer stopSending()
	eventually(t, 15*time.Second, "the new leader folds the batches sent after the takeover", func() bool {
		return lastSeqOf(nc, subj, "r") > stale+20
	})
	signal(t, p.leader, syscall.SIGCONT)
	thawed = true
	var lateBatch, lateReg bool
	eventually(t, 10*time.Second, "the thawed leader's records in the log", func() bool {
		lateBatch, lateReg = lateRecords(t, c, subj, epoch, stale)
		return lateBatch && lateReg
	})
	stopSending()
	last := sent.Load()
	eventually(t, 10*time.Second, "every batch sent folded", func() bool { return lastSeqOf(nc, subj, "r") == last })

	st := status(t, nc, subj)
	if _, ok := jobRow(st, "q"); !ok {
		t.Error("the registration the deposed leader appended late was not enrolled")
	}
	sameAsTheLog(t, c, p.standby, st)
}

// sameAsTheLog checks that st, the status leader answered, is the
// uninterrupted fold of the log (the leases column apart: who delivers a
// job's leases is the service's, not the fold's). The leader is frozen
// meanwhile: its snapshots would compact the log while it is read.
func sameAsTheLog(t *testing.T, c *cluster, leader *exec.Cmd, st *protocol.StatusReply) {
	t.Helper()
	signal(t, leader, syscall.SIGSTOP)
	defer signal(t, leader, syscall.SIGCONT)
	ref, _ := reference(t, c.admin, protocol.DefaultPrefix, st.LogSeq)
	for i := range st.Jobs {
		st.Jobs[i].Leases = ""
	}
	sameState(t, st, ref)
}

// lateRecords looks in the log, after the leader record of epoch, for a
// carried record holding r's batch number seq and a record of carried
// registrations holding q's: those a deposed leader appended late.
func lateRecords(t *testing.T, c *cluster, subj protocol.Subjects, epoch, seq uint64) (batch, reg bool) {
	t.Helper()
	after := false
	for _, m := range logRecordsOf(t, c.admin, subj.Prefix) {
		switch m.Subject {
		case subj.Prefix + "." + logLeader:
			if rec, err := decodeLeaderRecord(m.Data); err == nil && rec.Epoch == epoch {
				after = true
			}
		case CarriedSubject(subj.Prefix):
			bs, err := decodeCarried(m.Data, 0)
			for _, b := range bs {
				if bt, _ := protocol.DecodeBatch(b.data, 0); err == nil && after && bt != nil && b.job == "r" && bt.Events[0].Seq == seq {
					batch = true
				}
			}
		case RegistersSubject(subj.Prefix):
			jobs, err := RegisteredJobs(m.Data)
			if err == nil && after && slices.Contains(jobs, "q") {
				reg = true
			}
		}
	}
	return batch, reg
}

// TestFailover_ARegistrationInAKilledLeadersOpenRecordIsRetriedWithTheNext:
// the leader, its carry window 100 ms (the longest allowed), has taken a job's registration into
// its open record when it is killed (SIGKILL), so the registration never
// reaches the log and nobody answers it. The job's SDK hears nothing,
// takes the timeout as "try again", and registers with the standby that
// took over: the job is registered once, by the new leader, and the new
// leader's state is the uninterrupted fold of the log.
func TestFailover_ARegistrationInAKilledLeadersOpenRecordIsRetriedWithTheNext(t *testing.T) {
	if testing.Short() {
		t.Skip("starts coordinator processes")
	}
	t.Setenv("SHOCKWAVE_FAILOVER_CARRY", MaxCarryWindow.String())
	c, p := newPair(t)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("coordinator logs:\n%s", c.logs.String())
		}
	})
	seen := make(chan struct{}, 4) // the registration as the leader receives it
	watch, err := c.admin.Subscribe(p.subj.Register(), func(*nats.Msg) { seen <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Unsubscribe()
	if err := c.admin.Flush(); err != nil {
		t.Fatal(err)
	}
	type result struct {
		job *sdk.Job
		err error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		j, err := sdk.Register(ctx, sdk.WithURL(c.url), sdk.WithJobID("k"), sdk.WithModel("ResNet-18"),
			sdk.WithBatchSize(32), sdk.WithDatasetSize(50_000), sdk.WithTotalSteps(1_000), sdk.WithRegisterTimeout(50*time.Second))
		done <- result{j, err}
	}()
	select {
	case <-seen:
	case <-time.After(20 * time.Second):
		t.Fatal("the job's registration was not sent")
	}
	time.Sleep(20 * time.Millisecond) // the leader holds it in its open record
	killed := time.Now()
	if err := p.leader.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = p.leader.Wait()
	c.waitLeader(p.epoch, p.standby)
	var r result
	select {
	case r = <-done:
	case <-time.After(50 * time.Second):
		t.Fatal("the job's registration was not answered after the takeover")
	}
	if r.err != nil {
		t.Fatalf("the job did not register: %v", r.err)
	}
	defer r.job.Close()
	if len(seen) == 0 {
		t.Error("the SDK sent its registration once: it should have sent it again once the leader died unanswering")
	}
	// The job's registrations in the log, and whether each was stored after
	// the kill (the server's clock is this process's; the log's older
	// records may be compacted away, not these).
	var where []string
	for _, m := range logRecordsOf(t, c.admin, p.subj.Prefix) {
		var k bool
		switch m.Subject {
		case RegistersSubject(p.subj.Prefix):
			jobs, err := RegisteredJobs(m.Data)
			k = err == nil && slices.Contains(jobs, "k")
		case p.subj.Prefix + "." + logRegister:
			var reg protocol.Register
			k = json.Unmarshal(m.Data, &reg) == nil && reg.Job == "k"
		}
		if k {
			where = append(where, fmt.Sprintf("%s, after the kill %v", m.Subject, m.Time.After(killed)))
		}
	}
	if want := []string{RegistersSubject(p.subj.Prefix) + ", after the kill true"}; !slices.Equal(where, want) {
		t.Errorf("the job's registrations in the log: %v; want %v", where, want)
	}
	st := status(t, p.jobs, p.subj)
	if _, ok := jobRow(st, "k"); !ok {
		t.Error("the new leader does not know the job")
	}
	sameAsTheLog(t, c, p.standby, st)
}
