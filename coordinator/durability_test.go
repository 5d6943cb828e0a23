package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/shockwave-sched/shockwave/internal/syncbuf"
	"github.com/shockwave-sched/shockwave/protocol"
)

// The durability claim: the coordinator's state is a fold of its log, so a
// coordinator restarted at any moment — gracefully or by kill -9 — reaches
// exactly the state an uninterrupted coordinator reaches from the same log,
// and its next rounds' plans and leases are the ones the uninterrupted one
// would make. The reference below is that uninterrupted coordinator: a fresh
// fold over the stored log, read record by record, independent of the
// service that wrote it.

// reference folds the log's records 1..upTo and returns the fold and every
// round's leases. When the log was compacted, it starts from the oldest
// stored snapshot instead (which the coordinator never restores while
// newer ones exist, so the comparison still crosses a snapshot boundary)
// and returns the leases of the rounds after it. The coordinator keeps
// compacting while this reads, so a read that loses the race starts over.
func reference(t testing.TB, nc *nats.Conn, prefix string, upTo uint64) (*fold, map[int][]protocol.Lease) {
	t.Helper()
	var err error
	for range 50 {
		var f *fold
		var rounds map[int][]protocol.Lease
		if f, rounds, err = tryReference(nc, prefix, upTo); err == nil {
			return f, rounds
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal(err)
	return nil, nil
}

// errCompactedPast: the coordinator, still running, compacted its log past
// the record a reference was asked for.
var errCompactedPast = errors.New("the log is compacted past record")

// liveReference is reference for a coordinator that goes on running (and
// compacting its log each round): it reads the state with read and
// replays the log up to it, reading the state again when compaction has
// overtaken the replay (under load the two can be rounds apart).
func liveReference(t testing.TB, nc *nats.Conn, prefix string, read func() *protocol.StatusReply) (*protocol.StatusReply, *fold, map[int][]protocol.Lease) {
	t.Helper()
	var err error
	for range 50 {
		st := read()
		var f *fold
		var rounds map[int][]protocol.Lease
		if f, rounds, err = tryReference(nc, prefix, st.LogSeq); err == nil {
			return st, f, rounds
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal(err)
	return nil, nil, nil
}

func tryReference(nc *nats.Conn, prefix string, upTo uint64) (*fold, map[int][]protocol.Lease, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, nil, err
	}
	name, _ := streamNames(prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, nil, err
	}
	subj := protocol.Subjects{Prefix: prefix}
	f := newFold(subj, protocol.DefaultMaxMessageBytes)
	from := uint64(1)
	if info.State.FirstSeq > 1 {
		obj, err := js.ObjectStore(ctx, snapshotBucket(prefix))
		if err != nil {
			return nil, nil, err
		}
		// The newest snapshot the state read covers; the coordinator goes
		// on compacting, so it may go while it is read (a short read
		// timeout, and liveReference tries again).
		snaps := &snapshotStore{obj: obj, readTimeout: 5 * time.Second}
		seqs, err := snaps.list(ctx)
		if err != nil || len(seqs) == 0 {
			return nil, nil, fmt.Errorf("compacted log without snapshots: %v", err)
		}
		i := slices.IndexFunc(seqs, func(seq uint64) bool { return seq <= upTo }) // newest first
		if i < 0 {
			i = len(seqs) - 1 // too new: the check below says so
		}
		snap, err := snaps.get(ctx, seqs[i])
		if err != nil {
			return nil, nil, err
		}
		if snap.Seq > upTo {
			return nil, nil, fmt.Errorf("%w %d (oldest snapshot at %d)", errCompactedPast, upTo, snap.Seq)
		}
		if f, err = snap.restore(subj, protocol.DefaultMaxMessageBytes); err != nil {
			return nil, nil, err
		}
		from = snap.Seq + 1
	}
	rounds := map[int][]protocol.Lease{}
	for seq := from; seq <= upTo; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			return nil, nil, fmt.Errorf("log record %d: %w", seq, err)
		}
		o := f.apply(record{Seq: m.Sequence, Time: m.Time, Subject: m.Subject, Header: m.Header, Data: m.Data})
		if o.round != nil {
			rounds[o.round.Index] = o.round.Leases
		}
	}
	return f, rounds, nil
}

// sameState checks a status reply against the reference at its log position.
func sameState(t testing.TB, st *protocol.StatusReply, ref *fold) {
	t.Helper()
	want := append([]protocol.JobInfo{}, ref.core.Jobs()...)
	gotJ, _ := json.Marshal(st.Jobs)
	wantJ, _ := json.Marshal(want)
	if !bytes.Equal(gotJ, wantJ) {
		t.Errorf("job table at log record %d differs from the uninterrupted fold:\n got %s\nwant %s", st.LogSeq, gotJ, wantJ)
	}
	gotP, _ := json.Marshal(st.Plan)
	wantP, _ := json.Marshal(ref.core.LastPlan())
	if !bytes.Equal(gotP, wantP) {
		t.Errorf("plan at log record %d differs from the uninterrupted fold:\n got %s\nwant %s", st.LogSeq, gotP, wantP)
	}
	if st.Round != ref.core.NextRound() {
		t.Errorf("next round %d, uninterrupted %d", st.Round, ref.core.NextRound())
	}
}

// sameLeases checks every lease published live for the rounds the reference
// folded against the reference's lease of the same round and job. It
// returns the rounds it compared.
func sameLeases(t testing.TB, seen []protocol.Lease, ref map[int][]protocol.Lease, next int) map[int]bool {
	t.Helper()
	rounds := map[int]bool{}
	first := next
	for r := range ref {
		first = min(first, r)
	}
	for _, l := range seen {
		if l.Round >= next || l.Round < first {
			continue // published after the status the reference stops at, or before its snapshot
		}
		var want *protocol.Lease
		for i := range ref[l.Round] {
			if ref[l.Round][i].Job == l.Job {
				want = &ref[l.Round][i]
			}
		}
		got, _ := json.Marshal(l)
		if want == nil {
			t.Errorf("published lease %s is not in the uninterrupted round %d", got, l.Round)
			continue
		}
		if w, _ := json.Marshal(want); !bytes.Equal(got, w) {
			t.Errorf("published lease %s, uninterrupted %s", got, w)
		}
		rounds[l.Round] = true
	}
	return rounds
}

// jobDriver plays the SDKs of some jobs: it registers them, then every
// 20 ms reports progress for the jobs holding a RUN lease and a heartbeat
// for the others. It survives coordinator restarts (nats.go reconnects and
// buffers what it publishes meanwhile).
type jobDriver struct {
	t      testing.TB
	nc     *nats.Conn
	subj   protocol.Subjects
	mu     sync.Mutex
	run    map[string]bool
	seq    map[string]uint64
	done   map[string]int64
	leases []protocol.Lease
}

func startJobs(t testing.TB, nc *nats.Conn, subj protocol.Subjects, ids []string, workers int) (*jobDriver, func()) {
	d := &jobDriver{t: t, nc: nc, subj: subj, run: map[string]bool{}, seq: map[string]uint64{}, done: map[string]int64{}}
	if _, err := nc.Subscribe(subj.AllLeases(), d.onLease); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		d.register(newJob(id, workers))
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				d.report(ids)
			}
		}
	})
	return d, func() { cancel(); wg.Wait() }
}

// register retries until the coordinator answers: a reply lost to a crash
// is retried, and the retry resumes the job.
func (d *jobDriver) register(r protocol.Register) {
	data, _ := json.Marshal(r)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		m, err := d.nc.Request(d.subj.Register(), data, time.Second)
		if err != nil {
			continue
		}
		rep, err := protocol.DecodeRegisterReply(m.Data, 0)
		if err != nil || rep.Error != nil {
			d.t.Fatalf("register %s: %v %v", r.Job, err, rep.Error)
		}
		return
	}
	d.t.Fatalf("register %s: no answer", r.Job)
}

func (d *jobDriver) onLease(m *nats.Msg) {
	l, err := protocol.DecodeLease(m.Data, 0)
	if err != nil {
		d.t.Errorf("bad lease: %v", err)
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.leases = append(d.leases, *l)
	d.run[l.Job] = l.Action == protocol.Run
}

func (d *jobDriver) report(ids []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, id := range ids {
		d.seq[id]++
		ev := heartbeat(d.seq[id], d.done[id])
		if d.run[id] {
			d.done[id] += 20
			ev = progress(d.seq[id], 20, d.done[id], 0.02)
		}
		publishBatch(d.t, d.nc, d.subj, id, ev)
	}
}

func (d *jobDriver) seen() []protocol.Lease {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]protocol.Lease(nil), d.leases...)
}

func TestDurability_AGracefulRestartReplaysToTheStateOfAnUninterruptedRun(t *testing.T) {
	e := newEnv(t, 2, func(_ *EmbeddedConfig, s *ServiceConfig) { s.Policy = "shockwave" })
	nc := e.client(nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond))
	ids := []string{"a", "b", "c", "d"}
	d, stop := startJobs(t, nc, e.subj, ids, 1)
	defer stop()
	eventually(t, 10*time.Second, "five rounds", func() bool { return e.svc.Health().Rounds >= 5 })
	e.close()
	e.start() // the same data directory
	eventually(t, 10*time.Second, "three more rounds", func() bool { return e.svc.Health().Rounds >= 3 })
	client := e.client()
	st, ref, rounds := liveReference(t, e.coordClient(), e.subj.Prefix, func() *protocol.StatusReply { return status(t, client, e.subj) })
	sameState(t, st, ref)
	sameLeases(t, d.seen(), rounds, st.Round)
	if len(st.Jobs) != len(ids) {
		t.Errorf("jobs after the restart: %+v", st.Jobs)
	}
	if n := counterValue(t, e.reg, "shockwave_snapshot_errors_total", "", ""); n != 0 {
		t.Errorf("%g snapshot errors", n)
	}
}

// TestDurability_ChildCoordinator is the coordinator process of the kill -9
// test; it runs only when that test starts it.
func TestDurability_ChildCoordinator(t *testing.T) {
	dir, listen := os.Getenv("SHOCKWAVE_CHILD_DIR"), os.Getenv("SHOCKWAVE_CHILD_LISTEN")
	if dir == "" {
		t.Skip("started by TestDurability_KillNineAtAnyMoment")
	}
	exitWithParent()
	emb, err := StartEmbedded(EmbeddedConfig{DataDir: dir, Listen: listen})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := emb.Connect()
	if err != nil {
		t.Fatal(err)
	}
	cfg := childConfig()
	cfg.OwnServer = true // its embedded server: a crashed predecessor's lease is stale at once
	if ttl, err := time.ParseDuration(os.Getenv("SHOCKWAVE_CHILD_LEADER_TTL")); err == nil {
		cfg.LeaderTTL = ttl
	}
	svc, err := NewService(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Fatal(svc.Run(context.Background())) // runs until killed
}

// startChildCoordinator starts TestDurability_ChildCoordinator as an
// embedded coordinator process on dir, listening on listen, with env added
// to its environment.
func startChildCoordinator(t *testing.T, dir, listen string, logs *lockedBuffer, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDurability_ChildCoordinator$")
	cmd.Env = append(append(os.Environ(), "SHOCKWAVE_CHILD_DIR="+dir, "SHOCKWAVE_CHILD_LISTEN="+listen), env...)
	cmd.Stderr, cmd.Stdout = logs, logs
	holdStdin(t, cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

func childConfig() ServiceConfig {
	l := newStderrLogger()
	cfg := ServiceConfig{Core: Config{GPUs: 2, RoundSeconds: testRound, JobTimeoutSeconds: 60},
		Policy: "shockwave", Logger: &l, SnapshotRounds: 4} // the reference then spans several rounds
	if os.Getenv("SHOCKWAVE_FAILOVER_AGENTS") != "" { // nodes join as agents, which carry their residents
		cfg.Core.GPUs, cfg.Core.Dynamic, cfg.AgentsCarryResidents = 0, true, true
	}
	if v := os.Getenv("SHOCKWAVE_FAILOVER_SNAPSHOT_ROUNDS"); v != "" { // the snapshot interval (and so the log's compaction)
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			panic(fmt.Sprintf("SHOCKWAVE_FAILOVER_SNAPSHOT_ROUNDS=%q: want a positive count", v))
		}
		cfg.SnapshotRounds = n
	}
	if v := os.Getenv("SHOCKWAVE_FAILOVER_KEEP_ENDED"); v != "" { // the ended jobs kept (retention.go)
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			panic(fmt.Sprintf("SHOCKWAVE_FAILOVER_KEEP_ENDED=%q: want a positive count", v))
		}
		cfg.KeepEnded = n
	}
	if v := os.Getenv("SHOCKWAVE_CHILD_POLICY_CONFIG"); v != "" { // the Shockwave configuration
		cfg.PolicyOptions.Config = json.RawMessage(v)
	}
	if v := os.Getenv("SHOCKWAVE_FAILOVER_CARRY"); v != "" { // the carry window
		d, err := time.ParseDuration(v)
		if err != nil {
			panic(fmt.Sprintf("SHOCKWAVE_FAILOVER_CARRY=%q: %v", v, err))
		}
		cfg.CarryWindow = d
	}
	return cfg
}

func TestDurability_KillNineAtAnyMomentLosesNothingAndChangesNoPlan(t *testing.T) {
	killNineAtAnyMoment(t, 0)
}

// TestDurability_KillNineOverTheForecastBudget is the same with a forecast
// budget of one step: most rounds leave some waiting jobs' forecasts for
// later rounds, and where the refreshes left off is part of the state each
// restart restores (policy/shockwave_refresh.go).
func TestDurability_KillNineOverTheForecastBudget(t *testing.T) {
	killNineAtAnyMoment(t, 0, `SHOCKWAVE_CHILD_POLICY_CONFIG={"forecast_budget": 1}`)
}

// TestDurability_KillNineWhileEndedJobsAreForgotten is the same while short
// jobs register and end one after another beside the five, with at most
// two ended jobs kept: the jobs each restart forgets, and the order it
// forgets them in, are part of the state it restores (retention.go).
func TestDurability_KillNineWhileEndedJobsAreForgotten(t *testing.T) {
	killNineAtAnyMoment(t, 2, "SHOCKWAVE_FAILOVER_KEEP_ENDED=2")
}

// killNineAtAnyMoment kills a coordinator process four times at random
// moments while five jobs run, then compares its state and every lease the
// jobs saw with a fresh fold of its log; env configures the child. With
// keep > 0 short jobs register and end meanwhile, and the child keeps keep
// ended jobs.
func killNineAtAnyMoment(t *testing.T, keep int, env ...string) {
	if testing.Short() {
		t.Skip("starts coordinator processes")
	}
	dir, listen := t.TempDir(), freeAddr(t)
	var logs lockedBuffer
	child := func() *exec.Cmd { return startChildCoordinator(t, dir, listen, &logs, env...) }
	cmd := child()
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	subj := protocol.Subjects{Prefix: protocol.DefaultPrefix}
	nc := dialEventually(t, "nats://"+listen)
	waitServing(t, nc, subj)
	d, stop := startJobs(t, nc, subj, []string{"j0", "j1", "j2", "j3", "j4"}, 1)
	stopShort := func() int { return 0 }
	if keep > 0 {
		stopShort = churnShortJobs(t, nc, subj)
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	for kill := range 4 {
		time.Sleep(time.Duration(150+rng.IntN(450)) * time.Millisecond)
		if err := cmd.Process.Kill(); err != nil { // SIGKILL
			t.Fatal(err)
		}
		_ = cmd.Wait()
		cmd = child()
		waitServing(t, nc, subj)
		t.Logf("restart %d: replayed %d log records", kill+1, status(t, nc, subj).LogSeq)
	}
	time.Sleep(500 * time.Millisecond)
	n := stopShort()
	stop()
	st := status(t, nc, subj)
	ref, rounds := reference(t, dialEventually(t, "nats://"+listen, coordinatorToken(t, dir)), subj.Prefix, st.LogSeq)
	sameState(t, st, ref)
	seen := sameLeases(t, d.seen(), rounds, st.Round)
	ended := 0
	for _, j := range st.Jobs {
		if j.State != string(Active) && j.State != string(Pending) {
			ended++
		}
	}
	switch {
	case keep == 0 && len(st.Jobs) != 5:
		t.Errorf("jobs after four kills: %+v", st.Jobs)
	case keep > 0 && (ended > keep || n <= keep+1 || len(st.Jobs) >= 5+n):
		t.Errorf("%d short jobs ended; the table holds %d jobs, %d ended (at most %d kept): %+v", n, len(st.Jobs), ended, keep, st.Jobs)
	}
	t.Logf("%d log records, %d rounds, leases of %d rounds compared; %d short jobs, %d jobs in the table", st.LogSeq, st.Round, len(seen), n, len(st.Jobs))
	if strings.Contains(logs.String(), "differs from the stored snapshot") {
		t.Errorf("a replay disagreed with its snapshot:\n%s", logs.String())
	}
	if t.Failed() {
		t.Logf("coordinator logs:\n%s", logs.String())
	}
}

// churnShortJobs registers jobs short-0, short-1, … one after another on
// their own connection, each sending done once registered, until the
// returned stop, which says how many were registered.
func churnShortJobs(t *testing.T, nc *nats.Conn, subj protocol.Subjects) func() int {
	var n atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		d := &jobDriver{t: t, nc: nc, subj: subj}
		for ctx.Err() == nil {
			id := fmt.Sprintf("short-%d", n.Load())
			d.register(newJob(id, 1))
			publishBatch(t, nc, subj, id, protocol.Event{Type: protocol.EventDone, Seq: 1, StepsDone: 1_000_000, TotalSteps: 1_000_000, BatchSize: 32})
			n.Add(1)
			time.Sleep(20 * time.Millisecond)
		}
	})
	return func() int { cancel(); wg.Wait(); return int(n.Load()) }
}

// holdStdin gives a child process a stdin pipe this process keeps open: the
// child exits when it closes, i.e. when this process dies (exitWithParent).
func holdStdin(t testing.TB, cmd *exec.Cmd) {
	w, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
}

// exitWithParent ends a child process when its parent goes away.
func exitWithParent() {
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(3)
	}()
}

// lockedBuffer collects the output of child processes.
type lockedBuffer = syncbuf.Buffer

func freeAddr(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func dialEventually(t testing.TB, url string, opts ...nats.Option) *nats.Conn {
	var nc *nats.Conn
	eventually(t, 30*time.Second, "the coordinator accepts connections", func() bool {
		var err error
		nc, err = nats.Connect(url, append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(20 * time.Millisecond),
			nats.ReconnectBufSize(64 << 20)}, opts...)...)
		return err == nil
	})
	t.Cleanup(nc.Close)
	return nc
}

// waitServing waits until a coordinator answers status and has replayed.
func waitServing(t testing.TB, nc *nats.Conn, subj protocol.Subjects) {
	eventually(t, 30*time.Second, "the coordinator serves", func() bool {
		m, err := nc.Request(subj.Status(), nil, 500*time.Millisecond)
		if err != nil {
			return false
		}
		st, err := protocol.DecodeStatusReply(m.Data, 64<<20)
		return err == nil && st.Error == nil && !st.Recovering
	})
}

func newStderrLogger() zerolog.Logger { return zerolog.New(os.Stderr).With().Timestamp().Logger() }
