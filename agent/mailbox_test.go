package agent

import (
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/protocol"
)

func TestMailbox_KeepsTheStateThatSupersedesTheOthers(t *testing.T) {
	state := func(epoch uint64, now float64, joined bool) desiredAt {
		return desiredAt{d: &protocol.NodeDesired{V: protocol.Version, Node: "n0", Epoch: epoch, Now: now}, joined: joined}
	}
	m := newMailbox()
	if _, ok := m.take(); ok {
		t.Fatal("an empty box gave a state")
	}
	m.put(state(2, 10, false))
	m.put(state(2, 9, false))  // older: dropped
	m.put(state(1, 50, false)) // a deposed leader's: dropped
	d, ok := m.take()
	if !ok || d.d.Epoch != 2 || d.d.Now != 10 || d.joined {
		t.Fatalf("took %+v %v, want epoch 2 at 10", d.d, ok)
	}
	if _, ok := m.take(); ok {
		t.Fatal("a taken state was given twice")
	}

	// A join's answer starts the view afresh, even from a lower epoch (a
	// coordinator on a new log); a newer state of the same log that
	// replaces it before the loop takes it carries that on.
	m.put(state(5, 100, false))
	m.put(state(1, 3, true))
	m.put(state(1, 4, false))
	m.put(state(1, 2, false))
	d, _ = m.take()
	if d.d.Epoch != 1 || d.d.Now != 4 || !d.joined {
		t.Fatalf("took epoch %d at %v joined %v, want epoch 1 at 4 with the join's mark", d.d.Epoch, d.d.Now, d.joined)
	}
	if d.supersedes(&desiredAt{d: &protocol.NodeDesired{Epoch: 5, Now: 100}}) != true {
		t.Fatal("the state that replaced a join's answer does not replace a view from an older log")
	}
}

// An agent whose join is answered after more desired states than the old
// queue held (the coordinator sent them while other nodes joined) must
// still apply the newest and go on with its heartbeats. With a queue that
// blocked when full, the join's answer waited for a place the loop, still
// joining, never made: no heartbeat was sent again and the node timed out
// (seen in the 10,000-job load test, 3 runs of 5).
func TestAgent_AJoinAnsweredBehindAFloodOfStatesStillHeartbeats(t *testing.T) {
	srv := natsServer(t, -1)
	url := srv.ClientURL()
	job := uplinkJob(t, "j", 0, 1, line("register", 1, registerData(t, "j")))
	c := newFakeCoord(t, url)
	for _, verb := range []string{c.subj.AgentJoin("n0"), c.subj.AgentHeartbeat("n0")} {
		if err := c.subs[verb].Unsubscribe(); err != nil {
			t.Fatal(err)
		}
	}
	var beats atomic.Int64
	ok, _ := json.Marshal(protocol.AgentReply{V: protocol.Version})
	if _, err := c.nc.Subscribe(c.subj.AgentHeartbeat("n0"), func(m *nats.Msg) {
		beats.Add(1)
		_ = m.Respond(ok)
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.nc.Subscribe(c.subj.AgentJoin("n0"), func(m *nats.Msg) {
		for range 40 { // the states sent while other nodes joined
			c.offer(t)
		}
		// They reach the agent before the answer (one connection keeps the
		// order); the pause lets its callback take them all first, as when
		// the answer waited behind other nodes' joins.
		_ = c.nc.Flush()
		time.Sleep(300 * time.Millisecond)
		c.mu.Lock()
		c.desired.Now++
		c.desired.Jobs = []protocol.Assignment{job}
		data, _ := json.Marshal(protocol.AgentReply{V: protocol.Version, Desired: &c.desired})
		c.mu.Unlock()
		_ = m.Respond(data)
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	e := startUplinkAgent(t, c, url, nil) // heartbeats every 200 ms
	as := answers(t, waitOutput(t, e.a, "j", 2))
	wantReply(t, as[0], 1, "")
	deadline := time.Now().Add(10 * time.Second)
	for beats.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := beats.Load(); n < 3 {
		t.Fatalf("%d heartbeats in 10 s after the join, want at least 3 (one each 200 ms)", n)
	}
}
