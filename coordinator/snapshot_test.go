package coordinator

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/shockwave-sched/shockwave/bayes"
	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/topology"
)

// The bounded-restart claim: a fold restored from a snapshot taken at any
// record — right after a tick, or mid-round with events after it — and
// fed the rest of the log produces exactly what the uninterrupted fold
// produces: byte-identical rounds (plans and leases), registration
// answers, event outcomes, job table, and state.

// snapshotPolicies is every registered policy, and Shockwave in both
// information modes.
func snapshotPolicies() []struct {
	name string
	opts policy.Options
} {
	var out []struct {
		name string
		opts policy.Options
	}
	for _, n := range policy.Names() {
		out = append(out, struct {
			name string
			opts policy.Options
		}{n, policy.Options{}})
	}
	return append(out, struct {
		name string
		opts policy.Options
	}{"shockwave", policy.Options{Config: json.RawMessage(`{"info":"profile"}`)}})
}

// outcomeBytes is what a record's outcome shows the world.
func outcomeBytes(o *outcome) []byte {
	b, err := json.Marshal(struct {
		Kind     string
		Job      string
		Answer   *protocol.RegisterReply
		Accepted int
		Rejected []string
		Err      string
		Round    *Round
		Exits    []protocol.Lease
	}{o.kind, o.job, o.answer, o.accepted, o.rejected, errString(o.err), o.round, o.exits})
	if err != nil {
		panic(err)
	}
	return b
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestSnapshot_RestoredFoldMatchesTheUninterruptedOneForEveryPolicy(t *testing.T) {
	for _, pc := range snapshotPolicies() {
		name := pc.name
		if pc.opts.Config != nil {
			name += "-profile"
		}
		t.Run(name, func(t *testing.T) { checkRestores(t, newHistory(t, pc.name, pc.opts, 8, 42)) })
	}
}

// TestSnapshot_RestoresMatchWithLeasesOfSeveralRounds: the same with
// leases of three rounds, whose covered renewals (Round.Covered) and lease
// history (job.runUntil) a restore keeps.
func TestSnapshot_RestoresMatchWithLeasesOfSeveralRounds(t *testing.T) {
	for _, name := range []string{"shockwave", "gavel"} {
		t.Run(name, func(t *testing.T) {
			cfg := historyConfig(8)
			cfg.LeaseRounds = 3
			h := newHistoryOn(t, name, policy.Options{}, cfg, 42)
			covered := 0
			h.onApply = func(_ int, _ record, o *outcome) {
				if o.round != nil {
					covered += len(o.round.Covered)
				}
			}
			checkRestores(t, h)
			if covered == 0 {
				t.Errorf("no lease was covered")
			}
		})
	}
}

// checkRestores runs h (14 rounds of 32 jobs at most), snapshots the fold
// at points along it, and checks that a fold restored from each gives the
// same outcome for every later record and the same final state.
func checkRestores(t *testing.T, h *history) {
	t.Helper()
	outer := h.onApply
	outs := make([][]byte, len(h.records)) // the configuration record came before onApply
	snaps := map[int][]byte{}              // record index → snapshot after it
	ticks := 0
	h.onApply = func(i int, r record, o *outcome) {
		if outer != nil {
			outer(i, r, o)
		}
		outs = append(outs, outcomeBytes(o))
		if h.f.core == nil {
			return
		}
		if o.kind == kindTick {
			ticks++
		}
		// after a round closed, and a few records into a round (a
		// snapshot is never taken while a round solves)
		if (o.kind == kindPlan && ticks%5 == 2) || (ticks%5 == 3 && o.kind == kindEvents && i%4 == 0 && h.f.open == nil) {
			data, err := h.f.encodeState()
			if err != nil {
				t.Fatalf("snapshot after record %d: %v", r.Seq, err)
			}
			snaps[i] = data
		}
	}
	h.run(14, 32)
	final, err := h.f.encodeState()
	if err != nil {
		t.Fatal(err)
	}
	if len(snaps) < 6 {
		t.Fatalf("only %d snapshots taken", len(snaps))
	}
	solved, ended := 0, 0
	for i, data := range snaps {
		s, err := DecodeStateSnapshot(data)
		if err != nil {
			t.Fatal(err)
		}
		f, err := s.restore(h.subj, protocol.DefaultMaxMessageBytes)
		if err != nil {
			t.Fatalf("restore of the snapshot after record %d: %v", i+1, err)
		}
		if again, _ := f.encodeState(); !bytes.Equal(again, data) {
			t.Fatalf("snapshot after record %d does not survive a restore byte for byte", i+1)
		}
		for k := i + 1; k < len(h.records); k++ {
			o := f.apply(h.records[k])
			h.changeMembers(f.core, k)
			if o.round != nil && o.round.Plan.Solved {
				solved++
			}
			if o.round != nil {
				ended += len(o.round.Ended)
			}
			if got := outcomeBytes(&o); !bytes.Equal(got, outs[k]) {
				t.Fatalf("restored from the snapshot after record %d, record %d (%s) gives\n%s\nuninterrupted\n%s",
					i+1, k+1, h.records[k].Subject, got, outs[k])
			}
		}
		if got, _ := f.encodeState(); !bytes.Equal(got, final) {
			t.Fatalf("restored from the snapshot after record %d, the final state differs", i+1)
		}
	}
	if solved == 0 || ended == 0 {
		t.Errorf("the history exercised too little: %d solved rounds, %d ended jobs after restores", solved, ended)
	}
	t.Logf("%d records, %d rounds, %d snapshots, final snapshot %d bytes", len(h.records), ticks, len(snaps), len(final))
}

func TestSnapshot_EveryPolicyCanSaveItsState(t *testing.T) {
	for _, n := range policy.Names() {
		p, err := policy.New(n, policy.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := p.(policy.Stateful); !ok {
			t.Errorf("policy %s does not implement policy.Stateful", n)
		}
	}
}

func TestSnapshot_DamagedSnapshotsAreRefusedWithTheReason(t *testing.T) {
	h := newHistory(t, "shockwave", policy.Options{}, 8, 3)
	h.run(6, 5)
	data, err := h.f.encodeState()
	if err != nil {
		t.Fatal(err)
	}
	flip := func(i int) []byte {
		b := bytes.Clone(data)
		b[i] ^= 0x20
		return b
	}
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "shorter than"},
		{"magic", flip(1), "bad magic"},
		{"version", flip(8), "format version"},
		{"flags", flip(13), "unknown flags"},
		{"length", flip(33), "body bytes"},
		{"truncated", data[:len(data)-1], "body bytes"},
		{"payload bit", flip(len(data) - 10), "SHA-256 mismatch"},
		{"digest bit", flip(50), "SHA-256 mismatch"},
		{"sequence", flip(16), "SHA-256 mismatch"},
	} {
		_, err := DecodeStateSnapshot(c.data)
		if !errors.Is(err, ErrSnapshotCorrupt) || !bytes.Contains([]byte(err.Error()), []byte(c.want)) {
			t.Errorf("%s: got %v, want an ErrSnapshotCorrupt naming %q", c.name, err, c.want)
		}
	}
	// A valid envelope around a payload that is not a state.
	if _, _, err := RestoreStateSnapshot(sealSnapshot(3, 1, []byte("not a state")), protocol.DefaultPrefix); !errors.Is(err, ErrSnapshotCorrupt) {
		t.Errorf("garbage payload: %v", err)
	}
	if _, _, err := RestoreStateSnapshot(data, protocol.DefaultPrefix); err != nil {
		t.Errorf("the intact snapshot: %v", err)
	}
	// The same state as coordinators before the compressed format stored
	// it restores to the same state.
	payload, err := h.f.encodePayload()
	if err != nil {
		t.Fatal(err)
	}
	core, seq, err := RestoreStateSnapshot(sealPlain(h.f.seq, h.f.core.NextRound(), payload), protocol.DefaultPrefix)
	if err != nil {
		t.Fatalf("an uncompressed snapshot: %v", err)
	}
	if seq != h.f.seq || core.NextRound() != h.f.core.NextRound() {
		t.Errorf("an uncompressed snapshot restored record %d, round %d; want %d, %d", seq, core.NextRound(), h.f.seq, h.f.core.NextRound())
	}
	if data[12] != snapshotDeflate || !bytes.Equal(sealSnapshot(h.f.seq, h.f.core.NextRound(), payload), data) {
		t.Errorf("the snapshot written is not the compressed seal of its payload (flags %d)", data[12])
	}
}

// TestSnapshot_NodesAndMembershipSurviveARestore runs the same proof on a
// cluster of typed nodes with resident jobs, where nodes leave and join
// mid-run (Core.LeaveNode, Core.JoinNode), for Shockwave and Gavel.
func TestSnapshot_NodesAndMembershipSurviveARestore(t *testing.T) {
	for _, name := range []string{"shockwave", "gavel"} {
		t.Run(name, func(t *testing.T) {
			cfg := Config{Cluster: topology.Cluster{Nodes: []topology.Node{{Name: "n0", GPUs: 4, Type: "v100"},
				{Name: "n1", GPUs: 4, Type: "v100"}, {Name: "n2", GPUs: 2}}},
				RoundSeconds: 60, JobTimeoutSeconds: 150, LeaseGraceSeconds: 15, ExpireLeases: true}
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			h := newHistoryOn(t, name, policy.Options{}, cfg, 77)
			h.resident = "n0"
			outs := make([][]byte, len(h.records))
			snaps := map[int][]byte{}
			ticks := 0
			h.onApply = func(i int, r record, o *outcome) {
				outs = append(outs, outcomeBytes(o))
				if o.kind == kindTick {
					ticks++
					switch ticks {
					case 6:
						h.at(func(c *Core) error { return c.LeaveNode("n1") })
					case 11:
						h.at(func(c *Core) error { return c.JoinNode(topology.Node{Name: "n1", GPUs: 4, Type: "v100"}) })
					case 15:
						h.at(func(c *Core) error { return c.JoinNode(topology.Node{Name: "n3", GPUs: 2, Type: "a100"}) })
					}
				}
				if (o.kind == kindPlan && ticks%3 == 1) || (o.kind == kindEvents && i%7 == 0 && h.f.open == nil) {
					data, err := h.f.encodeState()
					if err != nil {
						t.Fatal(err)
					}
					snaps[i] = data
				}
			}
			h.run(12, 24)
			final, _ := h.f.encodeState()
			for i, data := range snaps {
				s, err := DecodeStateSnapshot(data)
				if err != nil {
					t.Fatal(err)
				}
				f, err := s.restore(h.subj, protocol.DefaultMaxMessageBytes)
				if err != nil {
					t.Fatalf("restore of the snapshot after record %d: %v", i+1, err)
				}
				for k := i + 1; k < len(h.records); k++ {
					o := f.apply(h.records[k])
					h.changeMembers(f.core, k)
					if got := outcomeBytes(&o); !bytes.Equal(got, outs[k]) {
						t.Fatalf("restored after record %d, record %d gives\n%s\nuninterrupted\n%s", i+1, k+1, got, outs[k])
					}
				}
				if got, _ := f.encodeState(); !bytes.Equal(got, final) {
					t.Fatalf("restored after record %d, the final state differs", i+1)
				}
			}
			if nodes := h.f.core.Nodes(); len(nodes) != 4 {
				t.Errorf("membership at the end: %+v", nodes)
			}
			t.Logf("%d records, %d snapshots restored", len(h.records), len(snaps))
		})
	}
}

// TestSnapshot_EveryStateFieldIsSaved fails when a field is added to a
// type whose state snapshots carry, so that whoever adds it also saves it
// (snapshot_core.go, policy/state.go, bayes/state.go) and lists it here.
func TestSnapshot_EveryStateFieldIsSaved(t *testing.T) {
	fc := reflect.TypeOf(bayes.Forecaster{})
	fjob := fieldType(t, fc, "jobs").Elem().Elem()
	sw := reflect.TypeOf(policy.Shockwave{})
	for _, c := range []struct {
		typ  reflect.Type
		want string
	}{
		// open, frozen and later are empty between rounds, where every snapshot is
		// taken; lent is false but while one is being taken (snapshot.go).
		// marks only makes marks unique (newMark).
		{reflect.TypeOf(Core{}), "cfg pol jobs pending active nextSeq round now plan ended life open frozen later lent nodes nodeAt total dynamic marks retention"},
		// retired, head and nRetired are rebuilt from the jobs' retiredAt
		// after a load; onForget is the fold's, set when it makes the Core.
		{reflect.TypeOf(retention{}), "retireSeq retired head nRetired onForget"},
		// prepared is what the policy built ahead of the job's admission: a
		// restored pending job is admitted without it, to the same state.
		// inSnapshot and mark are a round boundary's scratch (tick.go).
		{reflect.TypeOf(job{}), "view state lastSeq failures limit leaseRound leaseSteps leaseElapsed leaseBatch workers devices next void runUntil resuspended node visible ident lastHeard readmit prepared inSnapshot mark managed adopted reason retiredAt"},
		{reflect.TypeOf(liveness{}), "lastTick ticked lost"},
		{reflect.TypeOf(policy.Job{}), "ID Seq Model Mode Workers Priority SubmitTime AdmitTime AdmitRound InitialBatchSize BatchSize DatasetSize Throughput StepsDone TotalSteps Epoch RunTime PlannedBatchSizes PlannedEpochSeconds IsolatedSeconds Measurements LastRun"},
		{reflect.TypeOf(policy.GavelRound{}), "alloc MinResetSeconds ReallocateOnChange x jobTime deficit workerTime lastReset update gpus"},
		{reflect.TypeOf(policy.Themis{}), "cum prevRem prevIso"},
		{reflect.TypeOf(policy.AlloX{}), "Alpha prev"},
		{reflect.TypeOf(policy.Tiresias{}), "cfg jobs next"},
		{fieldType(t, reflect.TypeOf(policy.Tiresias{}), "jobs").Elem().Elem(), "queue entry executed running lastCheck"},
		// onSolve and terse (SetExplain) are the caller's settings, not state: a
		// live coordinator leaves both unset. orderAt and removed index order
		// and are rebuilt from it after a load. stateSize only sizes the
		// next MarshalState's buffer.
		{sw, "cfg settings meta order orderAt removed round counter resolve shape capNote jobsMoved plan prevList lastResult lastIndex lastIDs stamp onSolve online t0 started admitErrs terse stateSize"},
		// lastIDs and stamp (Shockwave), stamp, ran and at (its per-job
		// metadata) and still (a forecaster job) are caches of the last
		// round's lookups and forecasts that a restored policy starts without.
		// est and on are caches that are rebuilt after a load (swMeta.derive).
		{fieldType(t, sw, "meta").Elem().Elem(), "epochs workers segs dur dataset epoch submit modes alpha est on targets guessed stamp ran at"},
		// budget is from the configuration; over, cursor and dueCursor are saved.
		{fieldType(t, sw, "online").Elem(), "fc ignoreMode jobs budget over cursor dueCursor"},
		{fieldType(t, fieldType(t, sw, "online").Elem(), "jobs").Elem().Elem(), "seen tracked forecast cached due ranAt"},
		// det is the detectors' tables and scratch, from the configuration; ver and
		// memo a cache of forecasts that a restored forecaster starts without;
		// steps a count of work whose callers read only differences within a
		// round (policy's refresh); rows is counted from the nodes on load.
		{fc, "cfg jobs nodes thr ratio batch cal det ver memo steps rows"},
		{fjob, "spec nodes epochs bs steps total pos segs truncated taught changes det own thr exec cal ncal still"},
		// tab and scr are the configuration's tables and a scratch.
		{reflect.TypeOf(bayes.Detector{}), "cfg tab scr w mu beta logBeta hi t changeProb"},
	} {
		var got []string
		for i := range c.typ.NumField() {
			got = append(got, c.typ.Field(i).Name)
		}
		if strings.Join(got, " ") != c.want {
			t.Errorf("%s has fields\n  %s\nthe snapshot saves (or derives from the configuration)\n  %s\nsave the new state and update this list",
				c.typ, strings.Join(got, " "), c.want)
		}
	}
}

func fieldType(t *testing.T, typ reflect.Type, name string) reflect.Type {
	f, ok := typ.FieldByName(name)
	if !ok {
		t.Fatalf("%s has no field %s", typ, name)
	}
	return f.Type
}
