package coordinator

import (
	"cmp"
	"context"
	"errors"
	dto "github.com/prometheus/client_model/go"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shockwave-sched/shockwave/protocol"
)

// Integrity: a coordinator whose log or snapshots were damaged on disk
// refuses to serve (Run returns an IntegrityError, /healthz answers 503)
// unless it is told to recover, and then it says what was lost. The damage
// is done to the real JetStream files of a stopped embedded server.

// damageLog truncates or garbles the tail of the newest message block of
// the log stream under dir (a stopped server's data directory).
func damageLog(t testing.TB, dir, how string) {
	t.Helper()
	stream, _ := streamNames("shockwave")
	blks, _ := filepath.Glob(filepath.Join(dir, "jetstream", "*", "streams", stream, "msgs", "*.blk"))
	if len(blks) == 0 {
		t.Fatalf("no message blocks of %s under %s", stream, dir)
	}
	// n.blk: the newest block has the largest n
	slices.SortFunc(blks, func(a, b string) int { return cmp.Or(cmp.Compare(len(a), len(b)), strings.Compare(a, b)) })
	blk := blks[len(blks)-1]
	b, err := os.ReadFile(blk)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 200 {
		t.Fatalf("block %s holds only %d bytes", blk, len(b))
	}
	// The newest records are at the end of the block (older ones may be
	// compacted already): a torn write cuts the last one short, a bad
	// sector garbles one of the last few.
	switch how {
	case "truncate":
		b = b[:len(b)-40]
	case "garble":
		for i := len(b) - 300; i < len(b)-280; i++ {
			b[i] ^= 0xa5
		}
	}
	if err := os.WriteFile(blk, b, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %s (%d bytes kept)", how, filepath.Base(blk), len(b))
}

// quiesce stops the jobs and waits until the last record of the log is a
// round tick whose summary was stored: what the log lost afterwards is
// then visible against the summary.
func quiesce(t *testing.T, e *env, stop func()) {
	t.Helper()
	stop()
	nc := e.coordClient() // JetStream: the coordinator's rights
	js, _ := jetstream.New(nc)
	name, _ := streamNames(e.subj.Prefix)
	rounds := e.svc.Health().Rounds
	eventually(t, 10*time.Second, "two quiet rounds with their summary stored", func() bool {
		if e.svc.Health().Rounds < rounds+2 {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		st, err := js.Stream(ctx, name)
		if err != nil {
			return false
		}
		info, err := st.Info(ctx)
		if err != nil {
			return false
		}
		sum, err := ReadSnapshot(ctx, js, e.subj.Prefix)
		return err == nil && sum.Seq == info.State.LastSeq
	})
}

// runDamaged starts a service on e's data directory and returns what Run
// returned, or nil when the service became healthy (it is then running,
// stopped by the returned function).
func runDamaged(t *testing.T, e *env, recover bool) (error, *Service, func()) {
	t.Helper()
	emb, err := StartEmbedded(e.ecfg)
	if err != nil {
		t.Fatal(err)
	}
	e.emb = emb
	nc, err := emb.Connect()
	if err != nil {
		t.Fatal(err)
	}
	cfg := e.scfg
	cfg.Recover = recover
	cfg.Metrics = NewMetrics(prometheus.NewRegistry())
	svc, err := NewService(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case err := <-done:
			cancel()
			nc.Close()
			return err, svc, func() {}
		case <-deadline:
			t.Fatalf("the service neither refused nor became healthy: %+v", svc.Health())
		case <-time.After(20 * time.Millisecond):
			if svc.Health().OK {
				return nil, svc, func() {
					cancel()
					if err := <-done; err != nil {
						t.Errorf("service: %v", err)
					}
					nc.Close()
				}
			}
		}
	}
}

func TestIntegrity_ADamagedLogBlockRefusesToServeUnlessRecovering(t *testing.T) {
	for _, how := range []string{"truncate", "garble"} {
		t.Run(how, func(t *testing.T) {
			e := newEnv(t, 2, func(_ *EmbeddedConfig, s *ServiceConfig) { s.Policy, s.SnapshotRounds = "shockwave", 4 })
			nc := e.client(nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond))
			ids := []string{"a", "b", "c", "d"}
			_, stop := startJobs(t, nc, e.subj, ids, 1)
			eventually(t, 10*time.Second, "five rounds", func() bool { return e.svc.Health().Rounds >= 5 })
			quiesce(t, e, stop)
			e.close()
			before := e.svc.nextRound() // stopped: the loop's state may be read
			damageLog(t, e.dir, how)

			err, svc, _ := runDamaged(t, e, false)
			var ie *IntegrityError
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), "--recover-from-snapshot") {
				t.Fatalf("a damaged log gave %v, want an IntegrityError naming the recovery flag", err)
			}
			t.Logf("refused: %v", err)
			h := svc.Health()
			if h.OK || !strings.Contains(h.Error, "damaged") {
				t.Errorf("health of a refusing coordinator: %+v", h)
			}
			rec := httptest.NewRecorder()
			Handler(prometheus.NewRegistry(), svc).ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
			if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "damaged") {
				t.Errorf("/healthz of a refusing coordinator: %d %s", rec.Code, rec.Body)
			}
			e.emb.Shutdown()

			err, svc, stopSvc := runDamaged(t, e, true)
			if err != nil {
				t.Fatalf("recovery: %v", err)
			}
			h = svc.Health()
			if !strings.Contains(h.Recovery, "log records lost") || !strings.Contains(h.Recovery, "rounds rolled back") {
				t.Errorf("the recovery does not say what was lost: %+v", h)
			}
			st := status(t, e.client(), e.subj) // the loop's state, read through the loop
			t.Logf("recovered: %s (next round %d, was %d)", h.Recovery, st.Round, before)
			if len(st.Jobs) != len(ids) {
				t.Errorf("jobs after the recovery: %+v", st.Jobs)
			}
			eventually(t, 10*time.Second, "rounds after the recovery", func() bool { return svc.Health().Rounds >= 2 })
			// The recovery snapshot is taken once no round is open (the
			// one the damage cut short closes first), and stored by the
			// writer in the background, which then compacts the log.
			eventually(t, 10*time.Second, "the recovery snapshot stored and the log compacted", func() bool {
				var m dto.Metric
				return svc.m.snapshotSeq.Write(&m) == nil && m.GetGauge().GetValue() > 0
			})
			stopSvc()
			e.emb.Shutdown()

			err, svc, stopSvc = runDamaged(t, e, false)
			if err != nil {
				t.Fatalf("a restart after the recovery still refuses: %v", err)
			}
			if h := svc.Health(); h.Recovery != "" {
				t.Errorf("a clean restart reports a recovery: %+v", h)
			}
			stopSvc()
		})
	}
}

// snapshotsAfterRounds runs three jobs for five rounds and stops them: the
// state they left, the snapshot store and its snapshots, newest first.
func snapshotsAfterRounds(t *testing.T, e *env) (*protocol.StatusReply, jetstream.ObjectStore, []uint64) {
	t.Helper()
	nc := e.client(nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond))
	_, stop := startJobs(t, nc, e.subj, []string{"a", "b", "c"}, 1)
	eventually(t, 10*time.Second, "five rounds", func() bool { return e.svc.Health().Rounds >= 5 })
	quiesce(t, e, stop)
	want := status(t, e.client(), e.subj)
	js, _ := jetstream.New(e.coordClient())
	ctx := context.Background()
	obj, err := js.ObjectStore(ctx, snapshotBucket(e.subj.Prefix))
	if err != nil {
		t.Fatal(err)
	}
	seqs, err := (&snapshotStore{obj: obj}).list(ctx)
	if err != nil || len(seqs) < keepSnapshots {
		t.Fatalf("stored snapshots %v (%v), want %d or more", seqs, err, keepSnapshots)
	}
	return want, obj, seqs
}

func TestIntegrity_AnUnreadableNewestSnapshotRefusesAndRecoveryLosesNothing(t *testing.T) {
	e := newEnv(t, 2, func(_ *EmbeddedConfig, s *ServiceConfig) { s.Policy = "gavel" })
	want, obj, seqs := snapshotsAfterRounds(t, e)
	// A newer snapshot object whose bytes are not a snapshot, as a
	// damaged disk or a bad write would leave.
	if _, err := obj.PutBytes(context.Background(), snapshotName(seqs[0]), []byte("SWSNAP\r\n garbage")); err != nil {
		t.Fatal(err)
	}
	e.close()

	err, _, _ := runDamaged(t, e, false)
	if !errors.Is(err, ErrIntegrity) || !strings.Contains(err.Error(), snapshotName(seqs[0])) {
		t.Fatalf("an unreadable newest snapshot gave %v, want an integrity error naming it", err)
	}
	e.emb.Shutdown()
	err, svc, stopSvc := runDamaged(t, e, true)
	if err != nil {
		t.Fatal(err)
	}
	defer stopSvc()
	if h := svc.Health(); !strings.Contains(h.Recovery, " 0 log records lost, 0 rounds rolled back") {
		t.Errorf("recovery from the older snapshot with an intact log: %+v", h)
	}
	got := status(t, e.client(), e.subj)
	if len(got.Jobs) != len(want.Jobs) || got.Round < want.Round {
		t.Errorf("after the recovery: %d jobs at round %d, before %d jobs at round %d", len(got.Jobs), got.Round, len(want.Jobs), want.Round)
	}
}

func TestCompaction_TheLogKeepsOnlyWhatTheOlderSnapshotDoesNotCover(t *testing.T) {
	e := newEnv(t, 2, func(_ *EmbeddedConfig, s *ServiceConfig) { s.Policy, s.SnapshotRounds = "shockwave", 2 })
	nc := e.client(nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond))
	_, stop := startJobs(t, nc, e.subj, []string{"a", "b"}, 1)
	defer stop()
	// A job that only sends garbage: every batch is stored and rejected.
	for range 200 {
		if err := nc.Publish(e.subj.Events("a"), []byte(`{"v":1,"job":"a","events":[{"type":"nonsense"}]}`)); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	st, obj := logAndSnapshots(t, e)
	snaps := &snapshotStore{obj: obj}
	eventually(t, 20*time.Second, "the rejected records compacted away", func() bool {
		info, err := st.Info(ctx)
		if err != nil || info.State.FirstSeq < 300 {
			return false
		}
		seqs, err := snaps.list(ctx)
		if err != nil || len(seqs) < keepSnapshots {
			return false
		}
		// Never ahead of the older kept snapshot (the writer may be
		// between storing a snapshot and pruning the oldest).
		if info.State.FirstSeq > seqs[keepSnapshots-1]+1 {
			t.Fatalf("the log starts at %d, after the older snapshot %d: records no two snapshots cover were dropped",
				info.State.FirstSeq, seqs[keepSnapshots-1])
		}
		return true
	})
	if _, err := st.GetMsg(ctx, 5); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("an early rejected record is still in the log: %v", err)
	}
	before := status(t, e.client(), e.subj)
	e.close()
	e.start()
	after := status(t, e.client(), e.subj)
	if len(after.Jobs) != len(before.Jobs) || after.Round < before.Round {
		t.Errorf("after a restart on the compacted log: %d jobs at round %d, before %d at %d", len(after.Jobs), after.Round, len(before.Jobs), before.Round)
	}
}

// A round's snapshot waits for the round's burst to pass: its capture and
// encoding (tens of milliseconds on the loop at 10,000 jobs, 100 and more
// beside it) came on top of the leases going out and the jobs' first
// events, and made most of the events that waited over 10 ms. The check is
// a lower bound (a loaded machine only delays a snapshot more): every
// snapshot is stored at least snapshotDelay (here half a round) after the
// plan record of the round it follows. Both times are this machine's clock.
func TestSnapshot_ARoundsSnapshotIsTakenAfterItsBurstNotAtThePlan(t *testing.T) {
	const round = 2 * snapshotDelay // the delay is min(snapshotDelay, half a round)
	e := newEnv(t, 2, func(_ *EmbeddedConfig, s *ServiceConfig) {
		s.Policy, s.SnapshotRounds, s.Core.RoundSeconds = "shockwave", 1, round.Seconds()
	})
	nc := e.client(nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond))
	_, stop := startJobs(t, nc, e.subj, []string{"a", "b", "c"}, 1)
	defer stop()
	ctx := context.Background()
	st, obj := logAndSnapshots(t, e)
	checked := map[string]bool{}
	eventually(t, 30*time.Second, "three snapshots checked against their rounds' plans", func() bool {
		infos, err := obj.List(ctx)
		if err != nil {
			return false
		}
		for _, in := range infos {
			seq, ok := strings.CutPrefix(in.Name, "state-")
			if !ok || checked[in.Name] {
				continue
			}
			covered, err := strconv.ParseUint(seq, 10, 64)
			if err != nil {
				t.Fatalf("snapshot %q: %v", in.Name, err)
			}
			// The newest plan record the snapshot covers.
			var plan *jetstream.RawStreamMsg
			for s := covered; s > 0 && plan == nil; s-- {
				m, err := st.GetMsg(ctx, s)
				if errors.Is(err, jetstream.ErrMsgNotFound) {
					break // compacted: the snapshot follows no plan still in the log
				}
				if err != nil {
					t.Fatal(err)
				}
				if m.Subject == e.subj.Prefix+"."+logPlan {
					plan = m
				}
			}
			if plan == nil {
				continue
			}
			checked[in.Name] = true
			if gap := in.ModTime.Sub(plan.Time); gap < snapshotDelay {
				t.Errorf("snapshot %s stored %v after the plan record %d of its round, want at least %v",
					in.Name, gap.Round(time.Millisecond), plan.Sequence, snapshotDelay)
			}
		}
		return len(checked) >= 3
	})
}

// logAndSnapshots opens e's log stream and snapshot store with the
// coordinator's rights.
func logAndSnapshots(t *testing.T, e *env) (jetstream.Stream, jetstream.ObjectStore) {
	t.Helper()
	js, st := logJetStream(t, e)
	obj, err := js.ObjectStore(context.Background(), snapshotBucket(e.subj.Prefix))
	if err != nil {
		t.Fatal(err)
	}
	return st, obj
}
