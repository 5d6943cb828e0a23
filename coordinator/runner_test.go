package coordinator

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
)

// runnerLog builds log records for fold tests, one second apart.
type runnerLog struct {
	t    *testing.T
	subj protocol.Subjects
	recs []record
}

func (l *runnerLog) add(subject string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		l.t.Fatal(err)
	}
	n := uint64(len(l.recs) + 1)
	l.recs = append(l.recs, record{Seq: n, Time: time.Unix(1_700_000_000+int64(n), 0), Subject: l.subj.Prefix + "." + subject,
		Header: nats.Header{}, Data: data})
}

func newRunnerLog(t *testing.T) *runnerLog { return newRunnerLogWith(t, 1) }

// newRunnerLogWith is newRunnerLog with leases of leaseRounds rounds.
func newRunnerLogWith(t *testing.T, leaseRounds int) *runnerLog {
	l := &runnerLog{t: t, subj: protocol.Subjects{Prefix: "sw"}}
	cfg := Config{Dynamic: true, RoundSeconds: 10, LeaseGraceSeconds: 2, JobTimeoutSeconds: 30, ExpireLeases: true, LeaseRounds: leaseRounds}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	rec, err := newConfigRecord(cfg, "shockwave", policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	l.add(logConfig, rec)
	l.add(logNode, nodeRecord{V: protocol.Version, Op: "join", Hello: protocol.AgentHello{V: protocol.Version, Node: "n0", GPUs: 2}})
	l.add(logSubmit, protocol.Submit{V: protocol.Version, Job: "j", Command: []string{"train"}, Workers: 2, RanksPerNode: 2, MaxRetries: 1})
	l.add(logTick, tickRecord{V: protocol.Version, Round: 0, Open: true})
	l.add(logPlan, planRecord{V: protocol.Version, Round: 0})
	return l
}

func (l *runnerLog) fold() (*fold, []outcome) {
	f := newFold(l.subj, 0)
	var outs []outcome
	for _, r := range l.recs {
		outs = append(outs, f.apply(r))
	}
	return f, outs
}

func exited(node string, attempt, since, code int) protocol.AgentReport {
	return protocol.AgentReport{V: protocol.Version, Node: node, Job: "j", Attempt: attempt, Since: since, Event: protocol.ReportExited, Code: code}
}

func TestRunner_SubmittedGangIsPlacedWithOneRankPerDevice(t *testing.T) {
	f, outs := newRunnerLog(t).fold()
	for i, o := range outs {
		if o.err != nil {
			t.Fatalf("record %d: %v", i, o.err)
		}
	}
	d := f.desired("n0")
	if len(d.Jobs) != 1 {
		t.Fatalf("desired state %+v", d)
	}
	a := d.Jobs[0]
	if a.Procs != 2 || a.WorldSize != 2 || len(a.Devices) != 2 || a.Attempt != 0 || a.Since != 0 || a.Command[0] != "train" {
		t.Errorf("assignment %+v", a)
	}
	if other := f.desired("n1"); len(other.Jobs) != 0 {
		t.Errorf("a node without the job has %+v", other.Jobs)
	}
}

func TestRunner_FailedExitsAreRetriedThenTheJobFails(t *testing.T) {
	l := newRunnerLog(t)
	l.add(logAgent, exited("n0", 0, 0, 9))
	f, _ := l.fold()
	if a := f.desired("n0").Jobs; len(a) != 1 || a[0].Attempt != 1 {
		t.Fatalf("after one failure: %+v, want attempt 1", a)
	}
	st, _ := f.core.Job("j")
	if !strings.Contains(st.Reason, "exited with status 9 on n0") {
		t.Errorf("reason %q", st.Reason)
	}
	l.add(logAgent, exited("n0", 0, 0, 9)) // a stale duplicate: ignored
	l.add(logAgent, exited("n0", 1, 0, 9))
	f, outs := l.fold()
	st, _ = f.core.Job("j")
	if st.State != string(Failed) || !strings.Contains(st.Reason, "retries exhausted (max 1)") {
		t.Errorf("after a second failure: %s, %q", st.State, st.Reason)
	}
	if last := outs[len(outs)-1]; len(last.exits) != 1 || last.exits[0].Action != protocol.Exit {
		t.Errorf("no EXIT lease for the failed job: %+v", last.exits)
	}
	if a := f.desired("n0").Jobs; len(a) != 0 {
		t.Errorf("a failed job is still desired: %+v", a)
	}
}

func TestRunner_ExitsOfRunsThatLostTheirGrantChangeNothing(t *testing.T) {
	l := newRunnerLog(t)
	l.add(logAgent, exited("n1", 0, 0, 1)) // another node
	l.add(logAgent, exited("n0", 0, 7, 1)) // another grant
	l.add(logAgent, exited("n0", 3, 0, 1)) // another attempt
	for range 15 {                         // past the lease's expiry
		l.add(logAgent, protocol.AgentReport{V: protocol.Version, Node: "n0", Job: "j", Event: protocol.ReportStarted})
	}
	l.add(logAgent, exited("n0", 0, 0, 1))
	f, _ := l.fold()
	st, _ := f.core.Job("j")
	if st.State != string(Active) || st.Reason != "" {
		t.Errorf("state %s, reason %q: an exit that did not hold the grant counted", st.State, st.Reason)
	}
}

func TestRunner_NodeLeavingEndsItsGrantsAndTheReplayIsIdentical(t *testing.T) {
	l := newRunnerLog(t)
	l.add(logNode, nodeRecord{V: protocol.Version, Op: "join", Hello: protocol.AgentHello{V: protocol.Version, Node: "n1", GPUs: 2}})
	l.add(logNode, nodeRecord{V: protocol.Version, Op: "leave", Hello: protocol.AgentHello{V: protocol.Version, Node: "n0", GPUs: 2}, Reason: "no heartbeat"})
	f, _ := l.fold()
	if a := f.desired("n0").Jobs; len(a) != 0 {
		t.Errorf("the departed node still has %+v", a)
	}
	l.add(logTick, tickRecord{V: protocol.Version, Round: 1, Open: true})
	l.add(logPlan, planRecord{V: protocol.Version, Round: 1})
	f, _ = l.fold()
	a := f.desired("n1").Jobs
	if len(a) != 1 || a[0].Since != 1 {
		t.Fatalf("the job did not move to n1 in round 1: %+v", a)
	}
	g, _ := l.fold()
	d1, _, _ := digest(f.core)
	d2, _, _ := digest(g.core)
	x, _ := json.Marshal(f.desired("n1"))
	y, _ := json.Marshal(g.desired("n1"))
	if d1 != d2 || string(x) != string(y) {
		t.Errorf("two folds of one log differ")
	}
}

// TestRunner_StateSnapshotsCarrySubmissionsNodesAndGrants: a fold restored
// from a state snapshot taken after any record continues exactly as the
// original: same desired states, same runner state, same answers to the
// records that follow.
func TestRunner_StateSnapshotsCarrySubmissionsNodesAndGrants(t *testing.T) {
	l := newRunnerLog(t)
	l.add(logAgent, exited("n0", 0, 0, 9))
	l.add(logNode, nodeRecord{V: protocol.Version, Op: "join", Hello: protocol.AgentHello{V: protocol.Version, Node: "n1", GPUs: 2, Addr: "h1"}})
	l.add(logTick, tickRecord{V: protocol.Version, Round: 1, Open: true})
	l.add(logPlan, planRecord{V: protocol.Version, Round: 1})
	l.add(logCancel, protocol.Cancel{V: protocol.Version, Job: "j"})
	whole, _ := l.fold()
	for cut := 1; cut < len(l.recs); cut++ {
		f := newFold(l.subj, 0)
		for _, r := range l.recs[:cut] {
			f.apply(r)
		}
		if f.open != nil {
			if _, err := f.encodeState(); err == nil {
				t.Fatalf("a snapshot after record %d, inside an open round, was taken", cut)
			}
			continue // the service snapshots only between rounds
		}
		data, err := f.encodeState()
		if err != nil {
			t.Fatal(err)
		}
		snap, err := DecodeStateSnapshot(data)
		if err != nil {
			t.Fatal(err)
		}
		g, err := snap.restore(l.subj, 0)
		if err != nil {
			t.Fatalf("restore after record %d: %v", cut, err)
		}
		for _, r := range l.recs[cut:] {
			g.apply(r)
		}
		a, _ := whole.run.marshal()
		b, _ := g.run.marshal()
		d1, _, _ := digest(whole.core)
		d2, _, _ := digest(g.core)
		x, _ := json.Marshal([]any{whole.desired("n0"), whole.desired("n1")})
		y, _ := json.Marshal([]any{g.desired("n0"), g.desired("n1")})
		if string(a) != string(b) || d1 != d2 || string(x) != string(y) {
			t.Errorf("restored after record %d, the state differs:\n%s\n%s", cut, a, b)
		}
	}
}

// A snapshot captures the runner on the loop and encodes it on another
// goroutine while the loop goes on (snapshot.go): the capture's encoding
// is the runner's at the capture, whatever the records after it change.
// Here the job's grant moves from n0 to n1, which rewrites its last nodes
// in place (afterTick).
func TestRunner_ACaptureEncodesTheStateAtTheCapture(t *testing.T) {
	l := newRunnerLog(t)
	l.add(logNode, nodeRecord{V: protocol.Version, Op: "join", Hello: protocol.AgentHello{V: protocol.Version, Node: "n1", GPUs: 2, Addr: "h1"}})
	l.add(logNode, nodeRecord{V: protocol.Version, Op: "leave", Hello: protocol.AgentHello{V: protocol.Version, Node: "n0", GPUs: 2}, Reason: "test"})
	for r := 1; r <= 2; r++ {
		l.add(logTick, tickRecord{V: protocol.Version, Round: r, Open: true})
		l.add(logPlan, planRecord{V: protocol.Version, Round: r})
	}
	l.add(logSubmit, protocol.Submit{V: protocol.Version, Job: "k", Command: []string{"train"}, Workers: 1})
	l.add(logCancel, protocol.Cancel{V: protocol.Version, Job: "j"})
	whole, _ := l.fold()
	if !slices.Equal(whole.run.last["j"], nil) && !slices.Equal(whole.run.last["j"], []string{"n1"}) {
		t.Fatalf("the job's last nodes at the end: %v", whole.run.last["j"])
	}
	moved := false
	for cut := 1; cut < len(l.recs); cut++ {
		f := newFold(l.subj, 0)
		for _, r := range l.recs[:cut] {
			f.apply(r)
		}
		img := f.run.capture()
		want, err := f.run.marshal()
		if err != nil {
			t.Fatal(err)
		}
		before := slices.Clone(f.run.last["j"])
		for _, r := range l.recs[cut:] {
			f.apply(r)
		}
		moved = moved || (len(before) > 0 && len(f.run.last["j"]) > 0 && !slices.Equal(before, f.run.last["j"]))
		got, err := img.marshal()
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("captured after record %d, encoded after the rest:\n got %s\nwant %s", cut, got, want)
		}
	}
	if !moved {
		t.Fatal("the log never moved the job's grant: the test checks nothing")
	}
}
