package coordinator

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
)

func TestResize_ARestartWithMoreGPUsIsALoggedClusterEventThatReplays(t *testing.T) {
	e := newEnv(t, 1, func(_ *EmbeddedConfig, s *ServiceConfig) { s.SnapshotRounds = 1 << 20 }) // no compaction: the test reads the log

	nc := e.client()
	d, stop := startJobs(t, nc, e.subj, []string{"a", "b"}, 1)
	defer stop()
	eventually(t, 10*time.Second, "three rounds", func() bool { return e.svc.Health().Rounds >= 3 })
	e.stopService()
	e.scfg.Core.GPUs = 2
	e.startService()
	eventually(t, 10*time.Second, "both jobs run at once", func() bool {
		st := status(t, nc, e.subj)
		return st.GPUs == 2 && st.Plan != nil && len(st.Plan.Run) == 2
	})
	var resized bool
	for _, m := range logRecords(t, e) {
		if m.Subject == e.subj.Prefix+"."+logCluster {
			resized = true
		}
	}
	if !resized {
		t.Fatal("no cluster record in the log")
	}
	stop()
	st, ref, rounds := liveReference(t, e.coordClient(), e.subj.Prefix, func() *protocol.StatusReply { return status(t, nc, e.subj) })
	sameState(t, st, ref)
	sameLeases(t, d.seen(), rounds, st.Round)
	if ref.core.GPUs() != 2 {
		t.Errorf("the replay has %d GPUs", ref.core.GPUs())
	}
	// Another restart with the same flags logs nothing more.
	recs := logRecords(t, e)
	last := recs[len(recs)-1].Sequence
	e.stopService()
	e.startService()
	time.Sleep(300 * time.Millisecond)
	for _, m := range logRecords(t, e) {
		if m.Sequence > last && m.Subject == e.subj.Prefix+"."+logCluster {
			t.Errorf("a restart with the same cluster logged a resize")
		}
	}
}

func TestResize_OtherSettingsStillHaveToMatchTheLog(t *testing.T) {
	e := newEnv(t, 1, nil)
	e.stopService()
	e.scfg.Core.RoundSeconds = 2 * testRound
	nc, err := e.emb.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	svc, err := NewService(nc, e.scfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := contextWithTimeout(5 * time.Second)
	defer cancel()
	if err := svc.Run(ctx); err == nil || !strings.Contains(err.Error(), "restart with the same settings") {
		t.Fatalf("another round length: %v", err)
	}
}

func TestLeader_ALostLeaderBucketDoesNotWedgeTheCoordinator(t *testing.T) {
	e := newEnv(t, 1, nil)
	eventually(t, 10*time.Second, "two rounds", func() bool { return e.svc.Health().Rounds >= 2 })
	e.stopService()
	js, err := jetstream.New(e.coordClient())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := contextWithTimeout(5 * time.Second)
	defer cancel()
	if err := js.DeleteKeyValue(ctx, leaderBucket(e.subj.Prefix)); err != nil {
		t.Fatal(err)
	}
	e.startService()
	eventually(t, 10*time.Second, "rounds again", func() bool { return e.svc.Health().Rounds >= 2 })
	if h := e.svc.Health(); h.Epoch != 2 {
		t.Errorf("epoch after the bucket was lost: %d, want 2", h.Epoch)
	}
}

func TestSnapshot_TheLeaderEpochAndEventBudgetsSurviveARestore(t *testing.T) {
	h := newHistory(t, "gandiva_fair", policy.Options{}, 2, 1)
	reg, _ := json.Marshal(newJob("b", 1))
	h.append(h.subj.Prefix+"."+logRegister, nil, reg)
	lead, _ := json.Marshal(leaderRecord{V: 1, ID: "x", Epoch: 7})
	h.append(h.subj.Prefix+"."+logLeader, nil, lead)
	tick, _ := json.Marshal(tickRecord{V: 1, Round: 0, Epoch: 7, Open: true})
	h.append(h.subj.Prefix+"."+logTick, nil, tick)
	plan, _ := json.Marshal(planRecord{V: 1, Round: 0, Epoch: 7})
	h.append(h.subj.Prefix+"."+logPlan, nil, plan)
	batch, _ := json.Marshal(protocol.Batch{V: 1, Job: "b", Events: []protocol.Event{heartbeat(1, 0)}})
	h.append(h.subj.Events("b"), nil, batch)
	data, err := h.f.encodeState()
	if err != nil {
		t.Fatal(err)
	}
	snap, err := DecodeStateSnapshot(data)
	if err != nil {
		t.Fatal(err)
	}
	f, err := snap.restore(h.subj, protocol.DefaultMaxMessageBytes)
	if err != nil {
		t.Fatal(err)
	}
	if f.epoch != 7 || len(f.budgets) != 1 || *f.budgets["b"] != *h.f.budgets["b"] {
		t.Errorf("restored epoch %d, budgets %v; want 7 and %v", f.epoch, f.budgets, h.f.budgets)
	}
	// A stale tick after the restore is refused as it was live.
	stale, _ := json.Marshal(tickRecord{V: 1, Round: 1, Epoch: 6, Open: true})
	if o := f.apply(record{Seq: snap.Seq + 1, Time: h.now.Add(time.Second), Subject: h.subj.Prefix + "." + logTick, Data: stale}); o.round != nil || f.open != nil {
		t.Error("a tick of an older epoch started a round after the restore")
	}
}
