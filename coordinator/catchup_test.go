package coordinator

import (
	"context"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shockwave-sched/shockwave/protocol"
)

// logBounds reads the first and last record of the coordinators' log.
func (c *cluster) logBounds() (first, last uint64) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	name, _ := streamNames(protocol.DefaultPrefix)
	st, err := c.js.Stream(ctx, name)
	if err != nil {
		c.t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	return info.State.FirstSeq, info.State.LastSeq
}

// freezeUntilCompactedPast stops a coordinator process (SIGSTOP) and waits
// until the leader compacted the log well past it. The server goes on
// sending it what its pull requests asked for (up to 500 records, the
// client's default) into its socket: the log must be compacted past those
// too.
func (c *cluster) freezeUntilCompactedPast(cmd *exec.Cmd) {
	c.t.Helper()
	signal(c.t, cmd, syscall.SIGSTOP)
	_, frozenAt := c.logBounds()
	eventually(c.t, 60*time.Second, "the log compacted past the frozen coordinator", func() bool {
		first, _ := c.logBounds()
		return first > frozenAt+1000
	})
}

// A standby frozen while the leader snapshots and compacts the log finds
// the records it needs next gone when it thaws. It must continue from the
// newest snapshot (they are not lost), not stop with an integrity error and
// not fold on past the gap; and when the leader then dies it takes over
// with the state an uninterrupted fold of the log has.
func TestFailover_AStandbyFrozenPastTheCompactionContinuesFromTheNewestSnapshot(t *testing.T) {
	c, p, d, stop := newPairWithJobs(t, "f0", "f1", "f2")
	defer stop()
	leader, standby, epoch := p.leader, p.standby, p.epoch
	c.freezeUntilCompactedPast(standby)
	signal(t, standby, syscall.SIGCONT)
	defer func() {
		if t.Failed() {
			t.Logf("coordinator logs:\n%s", c.logs.String())
		}
	}()
	eventually(t, 20*time.Second, "the standby continues from a snapshot", func() bool {
		return strings.Contains(c.logs.String(), "fell behind the log's compaction")
	})
	time.Sleep(time.Second) // it folds on from there
	if err := leader.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = leader.Wait()
	if _, e := c.waitLeader(epoch, standby); e <= epoch {
		t.Fatalf("the thawed standby did not take over (epoch %d)", e)
	}
	eventually(t, 15*time.Second, "leases from the new leader", func() bool { return epochsPerRound(t, d.seen()) > epoch })
	p.stopAndCompare(t, c, d, stop, standby)
	if logs := c.logs.String(); strings.Contains(logs, "are missing") || strings.Contains(logs, "integrity") {
		t.Errorf("the standby took the compaction for damage")
	}
}

// The same frozen standby when every stored snapshot is damaged (a broken
// disk under the object store) cannot rebuild what was compacted away: it
// must stop with the integrity error, not fold on past the gap and never
// lead with that state.
func TestFailover_AStandbyBehindTheCompactionWithDamagedSnapshotsStops(t *testing.T) {
	c, p, _, stop := newPairWithJobs(t, "g0", "g1")
	defer stop()
	leader, standby := p.leader, p.standby
	c.freezeUntilCompactedPast(standby)
	signal(t, leader, syscall.SIGSTOP) // no new snapshot replaces the damaged ones
	defer signal(t, leader, syscall.SIGCONT)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	obj, err := c.js.ObjectStore(ctx, snapshotBucket(protocol.DefaultPrefix))
	if err != nil {
		t.Fatal(err)
	}
	infos, err := obj.List(ctx)
	if err != nil || len(infos) == 0 {
		t.Fatalf("no stored snapshots to damage: %v", err)
	}
	for _, in := range infos {
		if _, err := obj.PutBytes(ctx, in.Name, []byte("not a snapshot")); err != nil {
			t.Fatal(err)
		}
	}
	signal(t, standby, syscall.SIGCONT)
	exited := make(chan error, 1)
	go func() { exited <- standby.Wait() }()
	select {
	case err := <-exited:
		if err == nil {
			t.Errorf("the standby exited cleanly")
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the standby did not stop:\n%s", c.logs.String())
	}
	logs := c.logs.String()
	if !strings.Contains(logs, "are missing") || strings.Contains(logs, "fell behind the log's compaction") {
		t.Errorf("want the integrity error naming the missing records, and no continuation:\n%s", logs)
	}
	if n := strings.Count(logs, "log replayed; serving"); n != 1 {
		t.Errorf("%d coordinators served; only the first leader may:\n%s", n, logs)
	}
}
