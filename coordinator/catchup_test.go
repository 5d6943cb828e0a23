package coordinator

import (
	"context"
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

// A standby frozen while the leader snapshots and compacts the log finds
// the records it needs next gone when it thaws. It must continue from the
// newest snapshot (they are not lost), not stop with an integrity error and
// not fold on past the gap; and when the leader then dies it takes over
// with the state an uninterrupted fold of the log has.
func TestFailover_AStandbyFrozenPastTheCompactionContinuesFromTheNewestSnapshot(t *testing.T) {
	c, p, d, stop := newPairWithJobs(t, "f0", "f1", "f2")
	defer stop()
	leader, standby, epoch := p.leader, p.standby, p.epoch
	signal(t, standby, syscall.SIGSTOP)
	_, frozenAt := c.logBounds()
	// The server goes on sending it what its pull requests asked for (up to
	// 500 records, the client's default) into its socket: the log must be
	// compacted past those too.
	eventually(t, 60*time.Second, "the log compacted past the frozen standby", func() bool {
		first, _ := c.logBounds()
		return first > frozenAt+1000
	})
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
