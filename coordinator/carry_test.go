package coordinator

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/topology"
)

func encodeCarried(bs ...carriedBatch) []byte { return encodeItems(carriedVersion, appendCarried, bs) }

// encodeItems is a carried record of version holding items.
func encodeItems[T any](version byte, add func([]byte, T) []byte, items []T) []byte {
	buf := []byte{version}
	for _, it := range items {
		buf = add(buf, it)
	}
	return buf
}

// damage is a damaged carried record and what its error must name.
type damage struct {
	name, want string
	data       []byte
}

// refusedWhole checks that decode refuses each damaged record as damaged,
// naming what its case wants; the case "over the limit" is decoded with a
// limit of 4 bytes an item, the others with 1,024.
func refusedWhole[T any](t *testing.T, decode func([]byte, int) ([]T, error), cases []damage) {
	t.Helper()
	for _, c := range cases {
		limit := 1024
		if c.name == "over the limit" {
			limit = 4
		}
		_, err := decode(c.data, limit)
		if !errors.Is(err, errCarried) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want a damaged record naming %q", c.name, err, c.want)
		}
	}
}

// publishDamaged writes records on subject with the coordinator's rights
// and waits until the service refused them all as damaged.
func publishDamaged(t *testing.T, e *env, subject string, records [][]byte) {
	t.Helper()
	coord := e.coordClient()
	for _, bad := range records {
		if err := coord.Publish(subject, bad); err != nil {
			t.Fatal(err)
		}
	}
	if err := coord.Flush(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, fmt.Sprint(len(records), " damaged records refused"), func() bool {
		return rejectedAs(t, e, "bad_carried") == float64(len(records))
	})
}

func TestCarried_DecodesWhatItEncodesAndRefusesDamageWhole(t *testing.T) {
	in := []carriedBatch{{"n0", "a", nil, []byte(`{"v":1}`)},
		{"node-17", "job-b_2", nats.Header{"Shockwave-Sent": {"123"}, "X-Trace": {"a", "b"}}, []byte(`{}`)}, {"n0", "a", nil, nil}}
	data := encodeCarried(in...)
	out, err := decodeCarried(data, 1024)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) {
		t.Fatalf("%d batches, want %d", len(out), len(in))
	}
	for i := range in {
		if out[i].node != in[i].node || out[i].job != in[i].job || string(out[i].data) != string(in[i].data) || !reflect.DeepEqual(out[i].hdr, in[i].hdr) {
			t.Errorf("batch %d: %+v, want %+v", i, out[i], in[i])
		}
	}
	many := make([]carriedBatch, maxCarried+1)
	for i := range many {
		many[i] = carriedBatch{"n0", "a", nil, []byte("{}")}
	}
	refusedWhole(t, decodeCarried, []damage{
		{"empty", "version none", nil},
		{"another version", "version 2", append([]byte{2}, data[1:]...)},
		{"no batches", "no batches", []byte{carriedVersion}},
		{"cut short", "batch 0: its batch is cut short", encodeCarried(in[0])[:9]},
		{"a length missing", "batch 2: bad length of its batch", data[:len(data)-1]},
		{"a length cut", "batch 0: bad length of its node", []byte{carriedVersion, 0x80}},
		{"over the limit", "batch 0: its batch has 7 bytes, more than 4", encodeCarried(in[0])},
		{"a bad node", "batch 1", encodeCarried(in[0], carriedBatch{"bad node", "a", nil, nil})},
		{"a bad job", "batch 0", encodeCarried(carriedBatch{"n0", "../a", nil, nil})},
		{"a reserved header", `batch 0: header "Shockwave-Via" may not be carried`, encodeCarried(carriedBatch{"n0", "a", nats.Header{hdrVia: {"n1"}}, nil})},
		{"a NATS header", `batch 0: header "Nats-Msg-Id" may not be carried`, encodeCarried(carriedBatch{"n0", "a", nats.Header{"Nats-Msg-Id": {"x"}}, nil})},
		{"headers too large", "batch 0: its headers exceed 2048 bytes", encodeCarried(carriedBatch{"n0", "a", nats.Header{"K": {strings.Repeat("v", 2000), strings.Repeat("w", 200)}}, nil})},
		{"too many", "more than 512 batches", encodeCarried(many...)},
	})
}

func FuzzDecodeCarried(f *testing.F) {
	f.Add(encodeCarried(carriedBatch{"n0", "a", nats.Header{"K": {"v"}}, []byte(`{"v":1}`)}, carriedBatch{"n1", "b", nil, nil}))
	f.Add([]byte{carriedVersion, 0x80})
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrips(t, data, decodeCarried, encodeCarried, func(a, b carriedBatch) bool {
			return a.node == b.node && a.job == b.job && string(a.data) == string(b.data) && reflect.DeepEqual(a.hdr, b.hdr)
		})
	})
}

// roundTrips checks that what decode takes from data, encoded again,
// decodes to the same items (same), and that decode's only error is a
// damaged record.
func roundTrips[T any](t *testing.T, data []byte, decode func([]byte, int) ([]T, error), encode func(...T) []byte, same func(a, b T) bool) {
	t.Helper()
	items, err := decode(data, 4096)
	if err != nil {
		if !errors.Is(err, errCarried) {
			t.Fatalf("an error that does not say the record is damaged: %v", err)
		}
		return
	}
	again, err := decode(encode(items...), 4096)
	if err != nil || len(again) != len(items) {
		t.Fatalf("re-encoded: %v, %d items of %d", err, len(again), len(items))
	}
	for i := range items {
		if !same(again[i], items[i]) {
			t.Fatalf("item %d changed: %+v, %+v", i, again[i], items[i])
		}
	}
}

// carriedRecords returns the batches per carried record in the log and the
// records on job's own events subject.
func carriedRecords(t *testing.T, e *env, job string) (sizes []int, own int) {
	t.Helper()
	for _, m := range logRecords(t, e) {
		switch m.Subject {
		case e.subj.Events(job):
			own++
		case e.subj.Prefix + "." + logCarried:
			bs, err := decodeCarried(m.Data, 0)
			if err != nil {
				t.Fatal(err)
			}
			sizes = append(sizes, len(bs))
		}
	}
	return sizes, own
}

// TestCarry_AgentsBatchesShareLogRecordsAndFoldAsTheirOwnWould: two agents
// carry batches of the jobs they run, with a batch for a job placed
// elsewhere between them, within one carry window. They enter the log
// several to a record and none on a job's own subject; each is folded as
// it would have been alone (the misplaced one refused, the others
// applied, in order); a restarted coordinator replays the records to the
// same state.
func TestCarry_AgentsBatchesShareLogRecordsAndFoldAsTheirOwnWould(t *testing.T) {
	var mu sync.Mutex
	traced := map[string]int{} // the agent's own header, as each folded batch of a has it
	e := newEnv(t, 0, func(_ *EmbeddedConfig, s *ServiceConfig) {
		s.Core.Dynamic, s.Policy, s.CarryWindow = true, "shockwave", 50*time.Millisecond
		s.onApply = func(r record, o *outcome) {
			if o.kind == kindEvents && o.job == "a" && o.accepted > 0 {
				mu.Lock()
				traced[r.Header.Get("X-Trace")]++
				mu.Unlock()
			}
		}
	})
	nc := e.client()
	agents := twoRelayAgents(t, e, nc, "a", "b")
	onA, offA := placedNode(t, "a", agents)
	onB, _ := placedNode(t, "b", agents)
	for job, node := range map[string]string{"a": onA, "b": onB} {
		reg := newJob(job, 1)
		reg.Relayed = true
		if rep := agentRegister(t, nc, e.subj, node, reg); rep.Error != nil {
			t.Fatalf("registration of %s via %s: %v", job, node, rep.Error)
		}
	}
	const n = 30
	for i := uint64(1); i <= n; i++ {
		ev := progress(i, 10, int64(10*i), 1)
		ev.V, ev.Job = protocol.Version, "a"
		m := nats.NewMsg(e.subj.AgentEvents(onA))
		m.Header.Set(protocol.HdrJob, "a")
		m.Header.Set("X-Trace", fmt.Sprint("t", i))
		m.Data, _ = json.Marshal(protocol.Batch{V: protocol.Version, Job: "a", Events: []protocol.Event{ev}})
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
		if i == n/2 {
			agentEvents(t, nc, e.subj, offA, "a", "a", progress(1000, 10, 99_999, 1)) // not a's node
		}
		agentEvents(t, nc, e.subj, onB, "b", "b", progress(i, 5, int64(5*i), 1))
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "every carried batch folded", func() bool {
		st := status(t, nc, e.subj)
		a, _ := jobRow(st, "a")
		b, _ := jobRow(st, "b")
		return a.LastSeq == n && b.LastSeq == n
	})
	if got := rejectedAs(t, e, "not_placed"); got != 1 {
		t.Errorf("batches refused as not placed: %v, want 1", got)
	}
	st := status(t, nc, e.subj)
	a, _ := jobRow(st, "a")
	b, _ := jobRow(st, "b")
	if a.StepsDone != 10*n || b.StepsDone != 5*n {
		t.Errorf("steps done: a %d, b %d; want %d, %d (the misplaced batch applied, or one lost)", a.StepsDone, b.StepsDone, 10*n, 5*n)
	}
	mu.Lock()
	if len(traced) != n || traced["t1"] != 1 || traced[fmt.Sprint("t", n)] != 1 {
		t.Errorf("the agent's own header on a's folded batches: %v, want t1 … t%d once each", traced, n)
	}
	mu.Unlock()
	sizes, own := carriedRecords(t, e, "a")
	total, most := 0, 0
	for _, k := range sizes {
		total, most = total+k, max(most, k)
	}
	if own != 0 || total != 2*n+1 || most < 2 {
		t.Errorf("the log holds %d of a's batches on its own subject and carried records of %v batches; want none, %d batches in all, some together", own, sizes, 2*n+1)
	}

	// Headers too large for a carried record: refused before the log.
	big := nats.NewMsg(e.subj.AgentEvents(onA))
	big.Header.Set(protocol.HdrJob, "a")
	big.Header.Set("X-Trace", strings.Repeat("x", maxCarriedHeader))
	ev := progress(n+1, 10, 10*(n+1), 1)
	ev.V, ev.Job = protocol.Version, "a"
	big.Data, _ = json.Marshal(protocol.Batch{V: protocol.Version, Job: "a", Events: []protocol.Event{ev}})
	if err := nc.PublishMsg(big); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the batch with large headers refused", func() bool { return rejectedAs(t, e, "uplink_invalid") == 1 })

	// A fold of the raw log, records as they are, reaches the same state.
	coord := e.coordClient()
	st, ref, _ := liveReference(t, coord, e.subj.Prefix, func() *protocol.StatusReply { return status(t, coord, e.subj) })
	for i := range st.Jobs {
		st.Jobs[i].Leases = "" // the service's, not the fold's: who delivers the job's leases
	}
	sameState(t, st, ref)

	e.stopService()
	e.startService()
	eventually(t, 10*time.Second, "the restarted coordinator replays the carried records", func() bool {
		st := status(t, e.client(), e.subj)
		ra, _ := jobRow(st, "a")
		rb, _ := jobRow(st, "b")
		return ra.LastSeq == n && rb.LastSeq == n && ra.StepsDone == a.StepsDone && rb.StepsDone == b.StepsDone
	})
}

// TestCarry_ADamagedCarriedRecordIsRefusedWholeAndChangesNothing: carried
// records damaged in several ways reach the log (written with the
// coordinator's own rights, as a faulty coordinator or a damaged store
// would). Each is refused and counted, the job's state is unchanged, the
// batches after them fold, and a restart replays past them.
func TestCarry_ADamagedCarriedRecordIsRefusedWholeAndChangesNothing(t *testing.T) {
	e := newEnv(t, 1, nil)
	nc := e.client()
	if rep := register(t, nc, e.subj, newJob("a", 1)); rep.Error != nil {
		t.Fatal(rep.Error)
	}
	publishBatch(t, nc, e.subj, "a", progress(1, 10, 10, 1))
	eventually(t, 5*time.Second, "a's first batch", func() bool {
		r, _ := jobRow(status(t, nc, e.subj), "a")
		return r.LastSeq == 1
	})
	good, _ := json.Marshal(protocol.Batch{V: protocol.Version, Job: "a", Events: []protocol.Event{{V: protocol.Version, Job: "a",
		Type: protocol.EventProgress, Seq: 2, Steps: 10, StepsDone: 20, TotalSteps: 1_000_000, BatchSize: 32, Elapsed: 1}}})
	whole := encodeCarried(carriedBatch{"n0", "a", nil, good})
	publishDamaged(t, e, e.subj.Prefix+"."+logCarried, [][]byte{
		whole[:len(whole)-3], // cut short: the whole record goes, the sound batch in it too
		append(encodeCarried(carriedBatch{"n0", "a", nil, good}), 0x05, 'n'),
		append([]byte{9}, whole[1:]...),
		nil,
	})
	if r, _ := jobRow(status(t, nc, e.subj), "a"); r.LastSeq != 1 || r.StepsDone != 10 {
		t.Errorf("a damaged carried record changed a: %+v", r)
	}
	publishBatch(t, nc, e.subj, "a", progress(2, 10, 20, 1))
	eventually(t, 5*time.Second, "the next batch folds", func() bool {
		r, _ := jobRow(status(t, nc, e.subj), "a")
		return r.LastSeq == 2 && r.StepsDone == 20
	})
	e.stopService()
	e.startService()
	if r, _ := jobRow(status(t, e.client(), e.subj), "a"); r.LastSeq != 2 || r.StepsDone != 20 {
		t.Errorf("after a restart: %+v, want seq 2, 20 steps", r)
	}
}

// FuzzFold_ACarriedRecordFoldsAsItsBatchesWouldAlone: a carried record of
// arbitrary bytes, folded whole, leaves the same state as its batches
// folded one by one as the single records an agent's batches were before
// (on the job's events subject, hdrVia naming the node); a record that
// does not decode is refused and changes nothing.
func FuzzFold_ACarriedRecordFoldsAsItsBatchesWouldAlone(f *testing.F) {
	batchOf := func(job string, seq uint64) []byte {
		ev := progress(seq, 10, int64(10*seq), 1)
		ev.V, ev.Job = protocol.Version, job
		b, _ := json.Marshal(protocol.Batch{V: protocol.Version, Job: job, Events: []protocol.Event{ev}})
		return b
	}
	batch, later := batchOf("a", 1), batchOf("a", 2)
	f.Add(encodeCarried(carriedBatch{"n0", "a", nil, batch}, carriedBatch{"n0", "a", nil, later}), true)
	f.Add(encodeCarried(carriedBatch{"n0", "a", nats.Header{"K": {"v"}}, batch}, carriedBatch{"n1", "b", nil, later}), false)
	f.Add([]byte{carriedVersion, 1}, true)
	f.Add(encodeCarried(carriedBatch{"n0", "r", nil, batchOf("r", 1)}, carriedBatch{"n1", "r", nil, batchOf("r", 2)},
		carriedBatch{"n0", "a", nil, batch}, carriedBatch{"n0", "r", nil, batchOf("r", 3)}), true)
	resident := newJob("r", 1)
	resident.Node = "n0"
	reg, _ := json.Marshal(resident)
	f.Fuzz(func(t *testing.T, data []byte, residents bool) {
		whole, apart := carryFold(t), carryFold(t)
		for _, fl := range []*fold{whole, apart} { // r: a job resident on n0
			h := nats.Header{hdrVia: {"n0"}, hdrResidents: {"1"}}
			if o := fl.apply(record{Seq: 4, Time: time.Unix(1000, 0), Subject: "shockwave." + logRegister, Header: h, Data: reg}); o.err != nil {
				t.Fatalf("registering r: %v", o.err)
			}
		}
		before, _, _ := digest(whole.core)
		o, got := foldWhole(t, whole, logCarried, data, residents)
		bs, err := decodeCarried(data, 4096)
		if err != nil {
			return
		}
		if len(o.held) != len(bs) {
			t.Fatalf("%d outcomes for %d batches", len(o.held), len(bs))
		}
		accepted := 0
		for _, h := range o.held {
			accepted += h.o.accepted
		}
		for _, b := range bs {
			h := carriedHeader(b.hdr, b.node, residents)
			apart.apply(record{Seq: 5, Time: time.Unix(1000, 0), Subject: apart.subj.Events(b.job), Header: h, Data: b.data})
		}
		if want, _, _ := digest(apart.core); got != want {
			t.Fatalf("folded whole: state %s; its batches alone: %s", got, want)
		}
		if accepted > 0 && got == before {
			t.Fatalf("%d events accepted and the state unchanged", accepted)
		}
	})
}

// foldWhole folds data as a carried record on subject (hdrResidents set
// when residents), returning the outcome and the state after; a record
// that does not decode must be refused and leave the state as it was.
func foldWhole(t *testing.T, f *fold, subject string, data []byte, residents bool) (outcome, string) {
	t.Helper()
	before, _, _ := digest(f.core)
	hdr := nats.Header{}
	if residents {
		hdr.Set(hdrResidents, "1")
	}
	o := f.apply(record{Seq: 5, Time: time.Unix(1000, 0), Subject: "shockwave." + subject, Header: hdr, Data: data})
	got, _, _ := digest(f.core)
	if _, err := f.unpack(record{Subject: "shockwave." + subject, Data: data}); err != nil && (o.err == nil || got != before) {
		t.Fatalf("a damaged record (%v) was not refused, or changed the state: %+v", err, o)
	}
	return o, got
}

// carryFold is fuzzFold's on a cluster of two nodes, n0 and n1.
func carryFold(t *testing.T) *fold {
	return foldOn(t, &topology.Cluster{Nodes: []topology.Node{{Name: "n0", GPUs: 1}, {Name: "n1", GPUs: 1}}})
}
