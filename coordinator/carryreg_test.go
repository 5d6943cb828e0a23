package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
)

func encodeRegisters(gs ...carriedRegistration) []byte {
	return encodeItems(registersVersion, appendRegistration, gs)
}

func TestCarriedRegistrations_DecodeWhatIsEncodedAndRefuseDamageWhole(t *testing.T) {
	in := []carriedRegistration{{"", "_INBOX.abc.1", []byte(`{"v":1}`), nil},
		{"node-17", "_INBOX.def.22", []byte(`{}`), nil}, {"n0", "r", nil, nil}}
	data := encodeRegisters(in...)
	out, err := decodeRegisters(data, 1024)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) {
		t.Fatalf("%d registrations, want %d", len(out), len(in))
	}
	for i := range in {
		if out[i].node != in[i].node || out[i].reply != in[i].reply || string(out[i].data) != string(in[i].data) {
			t.Errorf("registration %d: %+v, want %+v", i, out[i], in[i])
		}
	}
	many := make([]carriedRegistration, maxCarried+1)
	for i := range many {
		many[i] = carriedRegistration{"", "r", []byte("{}"), nil}
	}
	refusedWhole(t, decodeRegisters, []damage{
		{"empty", "version none", nil},
		{"another version", "version 2", append([]byte{2}, data[1:]...)},
		{"no registrations", "no registrations", []byte{registersVersion}},
		{"cut short", "registration 0: its registration is cut short", encodeRegisters(in[0])[:17]},
		{"a length missing", "registration 2: bad length of its registration", data[:len(data)-1]},
		{"a length cut", "registration 0: bad length of its node", []byte{registersVersion, 0x80}},
		{"over the limit", "registration 0: its registration has 7 bytes, more than 4", encodeRegisters(in[0])},
		{"a bad node", "registration 1", encodeRegisters(in[0], carriedRegistration{"bad node", "r", nil, nil})},
		{"no reply", "registration 0: reply subject of 0 bytes", encodeRegisters(carriedRegistration{"", "", nil, nil})},
		{"a reply with a space", "registration 0: reply subject \"a b\"", encodeRegisters(carriedRegistration{"", "a b", nil, nil})},
		{"a reply with a control byte", "registration 0: reply subject", encodeRegisters(carriedRegistration{"", "a\x00b", nil, nil})},
		{"a long reply", "registration 0: its reply subject has 513 bytes, more than 512", encodeRegisters(carriedRegistration{"", strings.Repeat("r", 513), nil, nil})},
		{"too many", "more than 512 registrations", encodeRegisters(many...)},
	})
}

func FuzzDecodeRegisters(f *testing.F) {
	f.Add(encodeRegisters(carriedRegistration{"n0", "_INBOX.x", []byte(`{"v":1}`), nil}, carriedRegistration{"", "y", nil, nil}))
	f.Add([]byte{registersVersion, 0x80})
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrips(t, data, decodeRegisters, encodeRegisters, func(a, b carriedRegistration) bool {
			return a.node == b.node && a.reply == b.reply && string(a.data) == string(b.data)
		})
	})
}

// FuzzFold_ARegistersRecordFoldsAsItsRegistrationsWouldAlone: a record of
// carried registrations of arbitrary bytes, folded whole, leaves the same
// state and gives the same answers, to the same replies, as its
// registrations folded one by one as the single register records they
// were before (hdrReply; hdrVia naming the node for an agent's); a record
// that does not decode is refused and changes nothing.
func FuzzFold_ARegistersRecordFoldsAsItsRegistrationsWouldAlone(f *testing.F) {
	reg := func(job, node string, relayed bool) []byte {
		r := newJob(job, 1)
		r.Node, r.Relayed = node, relayed
		b, _ := json.Marshal(r)
		return b
	}
	f.Add(encodeRegisters(carriedRegistration{"", "_INBOX.1", reg("a", "", false), nil},
		carriedRegistration{"n0", "_INBOX.2", reg("r", "n0", true), nil}), true)
	f.Add(encodeRegisters(carriedRegistration{"n1", "_INBOX.1", reg("s", "n0", false), nil}, // not n1's
		carriedRegistration{"n0", "_INBOX.2", reg("s", "n0", false), nil},
		carriedRegistration{"", "_INBOX.3", reg("s", "n0", true), nil}, // again, its own
		carriedRegistration{"n1", "_INBOX.4", []byte(`{"v":1}`), nil}), true)
	f.Add(encodeRegisters(carriedRegistration{"n0", "_INBOX.2", reg("r", "n0", true), nil}), false)
	f.Add([]byte{registersVersion, 1}, true)
	f.Fuzz(func(t *testing.T, data []byte, residents bool) {
		whole, apart := carryFold(t), carryFold(t)
		o, got := foldWhole(t, whole, logRegisters, data, residents)
		gs, err := decodeRegisters(data, 4096)
		if err != nil {
			return
		}
		if len(o.held) != len(gs) {
			t.Fatalf("%d outcomes for %d registrations", len(o.held), len(gs))
		}
		for i, g := range gs {
			h := nats.Header{hdrReply: {g.reply}}
			if g.node != "" {
				h.Set(hdrVia, g.node)
				if residents {
					h.Set(hdrResidents, "1")
				}
			}
			alone := apart.apply(record{Seq: 5, Time: time.Unix(1000, 0), Subject: "shockwave." + logRegister, Header: h, Data: g.data})
			in := o.held[i].o
			if in.kind != kindRegister || in.reply != g.reply || in.job != alone.job || !reflect.DeepEqual(in.answer, alone.answer) {
				t.Fatalf("registration %d: %s to %q for %q answered %+v; alone: to %q for %q answered %+v",
					i, in.kind, in.reply, in.job, in.answer, alone.reply, alone.job, alone.answer)
			}
		}
		if want, _, _ := digest(apart.core); got != want {
			t.Fatalf("folded whole: state %s; its registrations alone: %s", got, want)
		}
		if !reflect.DeepEqual(whole.relayedReg, apart.relayedReg) {
			t.Fatalf("relayed registrations: %v whole, %v alone", whole.relayedReg, apart.relayedReg)
		}
	})
}

// TestFold_ARegistersRecordWhileARoundIsOpenIsHeldRegistrationByRegistration:
// the registrations of a record that arrives while a round is open wait
// for the round's close, as single ones do, and are answered then.
func TestFold_ARegistersRecordWhileARoundIsOpenIsHeldRegistrationByRegistration(t *testing.T) {
	h := newHistory(t, "gavel", policy.Options{}, 4, 3)
	h.run(2, 2)
	round := h.f.core.NextRound()
	tick, _ := json.Marshal(tickRecord{V: 1, Round: round, Open: true})
	if o := h.append(h.subj.Prefix+"."+logTick, nil, tick); o.err != nil || h.f.open == nil {
		t.Fatalf("the tick did not open round %d: %+v", round, o)
	}
	rec := encodeRegisters(carriedRegistration{"", "_INBOX.late1", mustJSON(t, newJob("late1", 1)), nil},
		carriedRegistration{"", "_INBOX.late2", mustJSON(t, newJob("late2", 1)), nil})
	o := h.append(h.subj.Prefix+"."+logRegisters, nil, rec)
	if o.kind != kindCarried || len(o.held) != 2 || o.held[0].o.kind != kindHeld || o.held[1].o.kind != kindHeld {
		t.Fatalf("registrations while the round is open: %+v, want both held", o)
	}
	if _, ok := h.f.core.Managed("late1"); ok {
		t.Fatal("a held registration was enrolled before the round closed")
	}
	o = h.plan(round)
	if o.round == nil || len(o.held) != 2 {
		t.Fatalf("the plan record: %+v, want the round closed and two held registrations folded", o)
	}
	for i, want := range []string{"late1", "late2"} {
		g := o.held[i].o
		if g.kind != kindRegister || g.job != want || g.reply != "_INBOX."+want || g.answer == nil || g.answer.Error != nil {
			t.Errorf("held registration %d: %+v, want %s answered to _INBOX.%s", i, g, want, want)
		}
	}
}

// registrationRecords returns the registrations per carried record in the
// log and the single register records.
func registrationRecords(t *testing.T, e *env) (sizes []int, single int) {
	t.Helper()
	for _, m := range logRecords(t, e) {
		switch m.Subject {
		case e.subj.Prefix + "." + logRegister:
			single++
		case e.subj.Prefix + "." + logRegisters:
			jobs, err := RegisteredJobs(m.Data)
			if err != nil {
				t.Fatal(err)
			}
			sizes = append(sizes, len(jobs))
		}
	}
	return sizes, single
}

// TestCarry_RegistrationsShareLogRecordsAndEachIsAnsweredAsAlone: jobs
// registering on their own connections and agents registering their
// residents, at once, within one carry window. Their registrations enter
// the log several to a record; each requester gets the answer a single
// record got (a resident registered via another node's agent is refused,
// an unknown job's agent registration too); a registration whose reply
// subject is too long to carry is appended alone and answered; a fold of
// the raw log reaches the service's state; a restarted coordinator
// replays the records to it.
func TestCarry_RegistrationsShareLogRecordsAndEachIsAnsweredAsAlone(t *testing.T) {
	e := newEnv(t, 0, func(_ *EmbeddedConfig, s *ServiceConfig) {
		s.Core.Dynamic, s.Policy, s.AgentsCarryResidents, s.CarryWindow = true, "shockwave", true, 50*time.Millisecond
	})
	nc := e.client()
	joinRelayAgent(t, e, nc, "n0", 2, true)
	joinRelayAgent(t, e, nc, "n1", 2, true)
	const n = 12
	type result struct {
		name string
		rep  *protocol.RegisterReply
	}
	results := make(chan result, 3*n+2)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			job := fmt.Sprint("own-", i)
			results <- result{job, register(t, nc, e.subj, newJob(job, 1))}
		})
		wg.Go(func() {
			r := newJob(fmt.Sprint("res-", i), 1)
			r.Node, r.Relayed = "n0", i%2 == 0
			results <- result{r.Job, agentRegister(t, nc, e.subj, "n0", r)}
		})
	}
	wg.Go(func() { // resident on n0, carried by n1's agent
		r := newJob("elsewhere", 1)
		r.Node = "n0"
		results <- result{"elsewhere", agentRegister(t, nc, e.subj, "n1", r)}
	})
	wg.Go(func() { // a reply subject too long to carry: appended alone (a job's replies come through the
		// jobs' account's import, whose reply subjects are short; a client of the coordinator's own may send any)
		long := e.client(coordinatorToken(t, e.dir), nats.CustomInboxPrefix("_INBOX."+strings.Repeat("x", maxCarriedReply)))
		results <- result{"long", register(t, long, e.subj, newJob("long", 1))}
	})
	wg.Wait()
	close(results)
	if len(results) != 2*n+2 {
		t.Fatalf("%d of %d registrations answered", len(results), 2*n+2)
	}
	for r := range results {
		switch {
		case r.rep == nil:
			t.Errorf("%s: no answer", r.name)
		case r.name == "elsewhere":
			if r.rep.Error == nil || r.rep.Error.Code != protocol.CodeForbidden {
				t.Errorf("a resident of n0 via n1's agent: %+v, want forbidden", r.rep)
			}
		case r.rep.Error != nil || r.rep.Job != r.name:
			t.Errorf("%s: %+v", r.name, r.rep)
		}
	}
	sizes, single := registrationRecords(t, e)
	total, most := 0, 0
	for _, k := range sizes {
		total, most = total+k, max(most, k)
	}
	if single != 1 || total != 2*n+1 || most < 2 {
		t.Errorf("the log holds %d single registrations and carried records of %v registrations; want 1 (the long reply), %d carried, some together", single, sizes, 2*n+1)
	}
	st := status(t, nc, e.subj)
	if len(st.Jobs) != 2*n+1 {
		t.Errorf("%d jobs registered, want %d", len(st.Jobs), 2*n+1)
	}
	if got := counterValue(t, e.reg, "shockwave_registrations_total", "result", "new"); got != 2*n+1 {
		t.Errorf("registrations counted new: %v, want %d", got, 2*n+1)
	}

	coord := e.coordClient()
	st, ref, _ := liveReference(t, coord, e.subj.Prefix, func() *protocol.StatusReply { return status(t, coord, e.subj) })
	for i := range st.Jobs {
		st.Jobs[i].Leases = ""
	}
	sameState(t, st, ref)
	if !ref.relayedReg["res-0"] || ref.relayedReg["res-1"] {
		t.Errorf("relayed residents in the reference fold: %v, want res-0 and not res-1", ref.relayedReg)
	}

	e.stopService()
	e.startService()
	eventually(t, 10*time.Second, "the restarted coordinator replays the registrations", func() bool {
		return len(status(t, e.client(), e.subj).Jobs) == 2*n+1
	})
	if rep := register(t, e.client(), e.subj, newJob("own-0", 1)); rep.Error != nil || !rep.Resumed {
		t.Errorf("own-0 registering again after the restart: %+v, want resumed", rep)
	}
}

// TestCarry_ADamagedRegistersRecordIsRefusedWholeAndChangesNothing:
// records of carried registrations damaged in several ways reach the log
// (written with the coordinator's own rights). Each is refused and
// counted, no job is registered, and a restart replays past them.
func TestCarry_ADamagedRegistersRecordIsRefusedWholeAndChangesNothing(t *testing.T) {
	e := newEnv(t, 1, nil)
	nc := e.client()
	whole := encodeRegisters(carriedRegistration{"", "_INBOX.x", mustJSON(t, newJob("a", 1)), nil},
		carriedRegistration{"", "_INBOX.y", mustJSON(t, newJob("b", 1)), nil})
	publishDamaged(t, e, e.subj.Prefix+"."+logRegisters, [][]byte{
		whole[:len(whole)-3], // cut short: the whole record goes, the sound registration in it too
		append(encodeRegisters(carriedRegistration{"", "_INBOX.x", mustJSON(t, newJob("a", 1)), nil}), 0x05, 'n'),
		append([]byte{9}, whole[1:]...),
		encodeRegisters(carriedRegistration{"", "_INBOX.x", mustJSON(t, newJob("a", 1)), nil}, carriedRegistration{"", "no reply", nil, nil}),
	})
	if st := status(t, nc, e.subj); len(st.Jobs) != 0 {
		t.Errorf("damaged records registered %+v", st.Jobs)
	}
	if rep := register(t, nc, e.subj, newJob("c", 1)); rep.Error != nil {
		t.Fatal(rep.Error)
	}
	e.stopService()
	e.startService()
	if st := status(t, e.client(), e.subj); len(st.Jobs) != 1 || st.Jobs[0].Job != "c" {
		t.Errorf("after a restart: %+v, want c alone", st.Jobs)
	}
}

// TestCarry_RegistrationsTheLogDoesNotTakeAreAnsweredUnavailable: while
// the log stream captures no registration subject (as a store that
// refuses writes would), a registration, carried or appended alone, is
// answered unavailable and counted; none is enrolled; once the stream
// takes them again, the job registers.
func TestCarry_RegistrationsTheLogDoesNotTakeAreAnsweredUnavailable(t *testing.T) {
	for _, c := range []struct {
		name   string
		window time.Duration
	}{{"carried", 0}, {"alone", -1}} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, 1, func(_ *EmbeddedConfig, s *ServiceConfig) { s.CarryWindow = c.window })
			nc := e.client()
			ctx := context.Background()
			js, str := logJetStream(t, e)
			cfg := str.CachedInfo().Config
			narrow := cfg
			narrow.Subjects = []string{e.subj.AllEvents()}
			for _, s := range []string{logTick, logPlan, logConfig, logLeader, logCarried, logCluster} {
				narrow.Subjects = append(narrow.Subjects, e.subj.Prefix+"."+s)
			}
			if _, err := js.UpdateStream(ctx, narrow); err != nil {
				t.Fatal(err)
			}
			rep := register(t, nc, e.subj, newJob("a", 1))
			if rep.Error == nil || rep.Error.Code != protocol.CodeUnavailable {
				t.Fatalf("a registration the log did not take: %+v, want unavailable", rep)
			}
			if n := counterValue(t, e.reg, "shockwave_registrations_total", "result", "rejected_unavailable"); n != 1 {
				t.Errorf("registrations counted unavailable: %v, want 1", n)
			}
			if _, err := js.UpdateStream(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			if st := status(t, nc, e.subj); len(st.Jobs) != 0 {
				t.Errorf("a registration the log did not take was enrolled: %+v", st.Jobs)
			}
			if rep := register(t, nc, e.subj, newJob("a", 1)); rep.Error != nil || rep.Job != "a" {
				t.Errorf("registering again once the log takes it: %+v", rep)
			}
		})
	}
}

// TestService_ALogConsumerDeletedOnTheServerIsRecreatedWhereItStopped: the
// service's consumer of the log is deleted on the server (an operator's
// mistake, a server that lost it). The error is counted, the client
// recreates the consumer after the last record folded: later records are
// folded, none twice (the registration folded before is not folded again
// as a resumed one).
func TestService_ALogConsumerDeletedOnTheServerIsRecreatedWhereItStopped(t *testing.T) {
	e := newEnv(t, 1, nil)
	nc := e.client()
	if rep := register(t, nc, e.subj, newJob("a", 1)); rep.Error != nil {
		t.Fatal(rep.Error)
	}
	ctx := context.Background()
	_, str := logJetStream(t, e)
	deleted := 0
	for c := range str.ListConsumers(ctx).Info() {
		if err := str.DeleteConsumer(ctx, c.Name); err != nil {
			t.Fatal(err)
		}
		deleted++
	}
	if deleted == 0 {
		t.Fatal("the log has no consumer to delete")
	}
	eventually(t, 10*time.Second, "the deletion counted", func() bool {
		return counterValue(t, e.reg, "shockwave_log_consumer_errors_total", "error", "consumer_deleted") >= 1
	})
	if rep := register(t, nc, e.subj, newJob("b", 1)); rep.Error != nil || rep.Job != "b" {
		t.Fatalf("a registration after the consumer was deleted: %+v", rep)
	}
	if n := counterValue(t, e.reg, "shockwave_registrations_total", "result", "resumed"); n != 0 {
		t.Errorf("%v registrations folded again as resumed: the recreated consumer started before the last record folded", n)
	}
	if st := status(t, nc, e.subj); len(st.Jobs) != 2 {
		t.Errorf("jobs after the consumer was recreated: %+v, want a and b", st.Jobs)
	}
}

// logJetStream is the JetStream context of e's coordinator account and the
// log stream in it.
func logJetStream(t *testing.T, e *env) (jetstream.JetStream, jetstream.Stream) {
	t.Helper()
	js, err := jetstream.New(e.coordClient())
	if err != nil {
		t.Fatal(err)
	}
	name, _ := streamNames(e.subj.Prefix)
	str, err := js.Stream(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return js, str
}
