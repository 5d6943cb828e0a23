package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shockwave-sched/shockwave/protocol"
)

// TestFailover_ChildCoordinator is a coordinator process on an external
// NATS server; it runs only when the failover test starts it.
func TestFailover_ChildCoordinator(t *testing.T) {
	url := os.Getenv("SHOCKWAVE_FAILOVER_URL")
	if url == "" {
		t.Skip("started by TestFailover_*")
	}
	exitWithParent()
	nc, err := nats.Connect(url, nats.Token(os.Getenv("SHOCKWAVE_FAILOVER_TOKEN")), nats.MaxReconnects(-1),
		nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := NewService(nc, childConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Fatal(svc.Run(context.Background())) // runs until killed
}

// cluster is an "external" NATS server run by the test and coordinator
// processes connected to it.
type cluster struct {
	t     *testing.T
	dir   string
	url   string
	srv   *Embedded
	admin *nats.Conn          // coordinator rights: reads the leader key
	js    jetstream.JetStream // on admin
	logs  lockedBuffer
}

func newCluster(t *testing.T) *cluster {
	c := &cluster{t: t, dir: t.TempDir()}
	addr := freeAddr(t)
	srv, err := StartEmbedded(EmbeddedConfig{DataDir: c.dir, Listen: addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	c.srv, c.url = srv, "nats://"+addr
	c.admin = dialEventually(t, c.url, coordinatorToken(t, c.dir))
	if c.js, err = jetstream.New(c.admin); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *cluster) coordinator() *exec.Cmd {
	c.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestFailover_ChildCoordinator$")
	cmd.Env = append(os.Environ(), "SHOCKWAVE_FAILOVER_URL="+c.url,
		"SHOCKWAVE_FAILOVER_TOKEN="+strings.TrimSpace(readFile(c.t, c.dir+"/auth/"+coordinatorSecretFile)))
	cmd.Stderr, cmd.Stdout = &c.logs, &c.logs
	holdStdin(c.t, cmd)
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// leader reads the leader key: the holder's pid and epoch.
func (c *cluster) leader() (pid int, epoch uint64) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := c.js.KeyValue(ctx, leaderBucket(protocol.DefaultPrefix))
	if err != nil {
		return 0, 0
	}
	e, err := kv.Get(ctx, leaderKey)
	if err != nil {
		return 0, 0
	}
	var v leaderValue
	if json.Unmarshal(e.Value(), &v) != nil || v.Released {
		return 0, v.Epoch
	}
	_, p, _ := strings.Cut(v.Host, "/")
	fmt.Sscan(p, &pid)
	return pid, v.Epoch
}

// waitLeader waits until one of cmds holds the leader key with an epoch
// above after, and returns it.
func (c *cluster) waitLeader(after uint64, cmds ...*exec.Cmd) (*exec.Cmd, uint64) {
	c.t.Helper()
	var got *exec.Cmd
	var epoch uint64
	eventually(c.t, 20*time.Second, "a leader", func() bool {
		pid, e := c.leader()
		for _, cmd := range cmds {
			if cmd.Process.Pid == pid && e > after {
				got, epoch = cmd, e
				return true
			}
		}
		return false
	})
	return got, epoch
}

// epochsPerRound checks that every round's RUN and SUSPEND leases carry
// one epoch, and returns the highest epoch seen.
func epochsPerRound(t *testing.T, leases []protocol.Lease) uint64 {
	t.Helper()
	per := map[int]uint64{}
	var top uint64
	for _, l := range leases {
		if l.Action == protocol.Exit {
			continue
		}
		if e, ok := per[l.Round]; ok && e != l.Epoch {
			t.Errorf("round %d has leases of epochs %d and %d: two leaders published in one round", l.Round, e, l.Epoch)
		}
		per[l.Round] = l.Epoch
		top = max(top, l.Epoch)
	}
	return top
}

// pair is two coordinator processes on one cluster once one of them leads,
// with a job's connection that sees them serve.
type pair struct {
	subj            protocol.Subjects
	jobs            *nats.Conn
	leader, standby *exec.Cmd
	epoch           uint64
}

func newPair(t *testing.T) (*cluster, pair) {
	t.Helper()
	c := newCluster(t)
	a, b := c.coordinator(), c.coordinator()
	p := pair{subj: protocol.Subjects{Prefix: protocol.DefaultPrefix}}
	p.jobs = dialEventually(t, c.url)
	waitServing(t, p.jobs, p.subj)
	p.leader, p.epoch = c.waitLeader(0, a, b)
	p.standby = a
	if p.leader == a {
		p.standby = b
	}
	return c, p
}

// newPairWithJobs is newPair with jobs ids training (one worker each) once
// the leader granted leases of a few rounds.
func newPairWithJobs(t *testing.T, ids ...string) (*cluster, pair, *jobDriver, func()) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts coordinator processes")
	}
	c, p := newPair(t)
	d, stop := startJobs(t, p.jobs, p.subj, ids, 1)
	eventually(t, 10*time.Second, "leases", func() bool { return len(d.seen()) >= 10 })
	return c, p, d, stop
}

// stopAndCompare stops the jobs half a second after the new leader's first
// leases, then checks its state and every lease published against an
// uninterrupted fold of the log. The leader is frozen while the log is
// read: its snapshots would otherwise compact away the records the
// reference needs (on a loaded machine the reading loses that race).
func (p pair) stopAndCompare(t *testing.T, c *cluster, d *jobDriver, stop func(), leader *exec.Cmd) *protocol.StatusReply {
	t.Helper()
	time.Sleep(500 * time.Millisecond)
	stop()
	st := status(t, p.jobs, p.subj)
	signal(t, leader, syscall.SIGSTOP)
	defer signal(t, leader, syscall.SIGCONT)
	ref, rounds := reference(t, c.admin, p.subj.Prefix, st.LogSeq)
	sameState(t, st, ref)
	sameLeases(t, d.seen(), rounds, st.Round)
	return st
}

// signal sends sig to a coordinator process.
func signal(t *testing.T, cmd *exec.Cmd, sig syscall.Signal) {
	t.Helper()
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

func TestFailover_KillNineOfTheLeaderWhileJobsTrainLosesNoJob(t *testing.T) {
	if testing.Short() {
		t.Skip("starts coordinator processes")
	}
	c, p := newPair(t)
	subj, jobs, leader, standby, epoch := p.subj, p.jobs, p.leader, p.standby, p.epoch
	ids := []string{"j0", "j1", "j2", "j3", "j4"}
	d, stop := startJobs(t, jobs, subj, ids, 1)
	defer stop()
	eventually(t, 10*time.Second, "leases of several rounds", func() bool { return len(d.seen()) >= 20 })
	if n := statusAnswers(t, c.admin, subj); n != 1 { // in the coordinators' account: every reply arrives
		t.Errorf("%d coordinators answer status; only the leader may", n)
	}
	once := map[string]bool{}
	for _, l := range d.seen() {
		k := fmt.Sprintf("%s/%d/%s", l.Job, l.Round, l.Action)
		if once[k] {
			t.Errorf("lease %s published twice: two coordinators publish", k)
		}
		once[k] = true
	}
	if top := epochsPerRound(t, d.seen()); top != epoch {
		t.Errorf("leases of epoch %d while the leader holds %d (two coordinators publish?)", top, epoch)
	}

	killed := time.Now()
	if err := leader.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = leader.Wait()
	eventually(t, 15*time.Second, "leases from the standby", func() bool {
		for _, l := range d.seen() {
			if l.Epoch > epoch {
				return true
			}
		}
		return false
	})
	took := time.Since(killed)
	t.Logf("the standby published its first lease %v after the kill -9 (leader ttl %v)", took, defaultLeaderTTL(time.Duration(testRound*float64(time.Second))))
	if took > 10*time.Second {
		t.Errorf("takeover took %v, more than max(2 rounds, 10 s)", took)
	}
	if _, e := c.waitLeader(epoch, standby); e <= epoch {
		t.Errorf("the new leader's epoch %d is not above %d", e, epoch)
	}
	st := p.stopAndCompare(t, c, d, stop, standby)
	epochsPerRound(t, d.seen())
	for _, id := range ids {
		if row, ok := jobRow(st, id); !ok || (row.State != "active" && row.State != "pending") {
			t.Errorf("job %s after the failover: %+v", id, row)
		}
	}
	if t.Failed() {
		t.Logf("coordinator logs:\n%s", c.logs.String())
	}
}

func TestFailover_AFrozenLeaderIsDeposedAndPublishesNothingAfterwards(t *testing.T) {
	c, p, d, stop := newPairWithJobs(t, "k0", "k1", "k2")
	defer stop()
	leader, standby, epoch := p.leader, p.standby, p.epoch
	// Freeze the leader (a partition, a long GC pause) until the standby
	// took over, then let it run again.
	signal(t, leader, syscall.SIGSTOP)
	_, newEpoch := c.waitLeader(epoch, standby)
	eventually(t, 10*time.Second, "leases of the new epoch", func() bool { return epochsPerRound(t, d.seen()) == newEpoch })
	signal(t, leader, syscall.SIGCONT)
	thawed := len(d.seen())
	time.Sleep(2 * time.Second)
	stop()
	firstNew := -1
	for i, l := range d.seen() {
		if l.Epoch == newEpoch && firstNew < 0 {
			firstNew = l.Round
		}
		if i >= thawed && l.Epoch < newEpoch && l.Round >= firstNew {
			t.Errorf("the deposed leader published a lease after it thawed: %+v", l)
		}
	}
	epochsPerRound(t, d.seen())
	if pid, e := c.leader(); pid != standby.Process.Pid || e != newEpoch {
		t.Errorf("leader key: pid %d epoch %d, want %d epoch %d", pid, e, standby.Process.Pid, newEpoch)
	}
	if !strings.Contains(c.logs.String(), "lost the leader lease") && !strings.Contains(c.logs.String(), "deposed") {
		t.Errorf("the thawed leader did not report that it was deposed:\n%s", c.logs.String())
	}
	// Deposed, it folds on as a standby: the records it folded while it led
	// are no gap in the log (the start-up integrity check is over).
	if logs := c.logs.String(); strings.Contains(logs, "are missing") || strings.Contains(logs, "integrity") {
		t.Errorf("the deposed leader took the records it folded while leading for a damaged log")
	}
	if t.Failed() {
		t.Logf("coordinator logs:\n%s", c.logs.String())
	}
}

func TestEmbedded_TwoCoordinatorProcessesOnOneDataDir(t *testing.T) {
	if testing.Short() {
		t.Skip("starts coordinator processes")
	}
	dir := t.TempDir()
	var logs lockedBuffer
	child := func(listen string) *exec.Cmd {
		cmd := startChildCoordinator(t, dir, listen, &logs)
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	addr := freeAddr(t)
	first := child(addr)
	nc := dialEventually(t, "nats://"+addr)
	waitServing(t, nc, protocol.Subjects{Prefix: protocol.DefaultPrefix})
	second := child(freeAddr(t))
	done := make(chan error, 1)
	go func() { done <- second.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the second coordinator exited cleanly")
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the second coordinator on the same data dir still runs after 20 s:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "is in use by another coordinator (process "+fmt.Sprint(first.Process.Pid)) {
		t.Errorf("the refusal does not name the holder:\n%s", logs.String())
	}
	if err := first.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the first coordinator died: %v", err)
	}
}

// statusAnswers counts the replies to one status request.
func statusAnswers(t *testing.T, nc *nats.Conn, subj protocol.Subjects) int {
	t.Helper()
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(subj.Status(), inbox, nil); err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		if _, err := sub.NextMsg(500 * time.Millisecond); err != nil {
			return n
		}
		n++
	}
}

func TestEmbedded_ARestartAfterKillNineDoesNotWaitForTheDeadLeadersLease(t *testing.T) {
	if testing.Short() {
		t.Skip("starts coordinator processes")
	}
	dir, listen := t.TempDir(), freeAddr(t)
	var logs lockedBuffer
	child := func() *exec.Cmd {
		cmd := startChildCoordinator(t, dir, listen, &logs, "SHOCKWAVE_CHILD_LEADER_TTL=60s")
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	cmd := child()
	subj := protocol.Subjects{Prefix: protocol.DefaultPrefix}
	nc := dialEventually(t, "nats://"+listen)
	waitServing(t, nc, subj)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	start := time.Now()
	child()
	eventually(t, 30*time.Second, "the restarted coordinator serves", func() bool {
		m, err := nc.Request(subj.Status(), nil, 200*time.Millisecond)
		if err != nil {
			return false
		}
		st, err := protocol.DecodeStatusReply(m.Data, 64<<20)
		return err == nil && st.Error == nil && !st.Recovering
	})
	took := time.Since(start)
	t.Logf("serving %v after the restart (leader ttl 60 s)", took)
	if took > 30*time.Second {
		t.Errorf("the restart waited for the dead leader's lease: %v", took)
	}
}
