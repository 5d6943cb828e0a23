package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shockwave-sched/shockwave/protocol"
)

// Tests a job with valid credentials but bad intent would write.

// logRecords returns every record of the log, read with the coordinator's
// rights.
func logRecords(t *testing.T, e *env) []*jetstream.RawStreamMsg {
	t.Helper()
	return logRecordsOf(t, e.coordClient(), e.subj.Prefix)
}

// logRecordsOf reads the log of prefix through nc (coordinator rights).
func logRecordsOf(t *testing.T, nc *nats.Conn, prefix string) []*jetstream.RawStreamMsg {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	name, _ := streamNames(prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatalf("the log stream: %v", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		out = append(out, m)
	}
	return out
}

func TestSquatting_AJobPublishingTheTickIDsDoesNotStallRounds(t *testing.T) {
	e := credsEnv(t)
	a, _ := jobClient(t, e, "A")
	if rep := register(t, a, e.subj, newJob("A", 1)); rep.Error != nil {
		t.Fatal(rep.Error)
	}
	next := int(e.svc.Health().Rounds)
	// The attack of issue 13: events whose message ids are those of the
	// coordinator's next 200 ticks (the old scheme), of its config record,
	// and of the first ids of the current scheme without the nonce.
	ids := []string{"config"}
	for r := next; r < next+200; r++ {
		ids = append(ids, fmt.Sprintf("tick-%d", r))
	}
	for n := 1; n < 50; n++ {
		ids = append(ids, fmt.Sprintf("coord--%d", n))
	}
	for i, id := range ids {
		data, _ := json.Marshal(protocol.Batch{V: 1, Job: "A", Events: []protocol.Event{heartbeat(uint64(i+1), 0)}})
		m := nats.NewMsg(e.subj.Events("A"))
		m.Data = data
		m.Header.Set(jetstream.MsgIDHeader, id)
		if err := a.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	start := e.svc.Health().Rounds
	eventually(t, 10*time.Second, "ten more rounds", func() bool { return e.svc.Health().Rounds >= start+10 })
	if n := counterValue(t, e.reg, "shockwave_log_writes_total", "result", "duplicate"); n != 0 {
		t.Errorf("%g coordinator writes were taken for duplicates", n)
	}
}

func TestSquatting_ADuplicateAckOfACoordinatorWriteIsAnErrorAndRetried(t *testing.T) {
	e := newEnv(t, 1, nil)
	// Someone who learned the nonce (it never leaves the process; this
	// simulates a leak) writes the coordinator's next ids first.
	js, err := jetstream.New(e.coordClient())
	if err != nil {
		t.Fatal(err)
	}
	n := e.svc.writes.Load()
	for i := n + 1; i < n+40; i++ {
		if _, err := js.Publish(context.Background(), e.subj.Events("x"), []byte(`{}`),
			jetstream.WithMsgID(fmt.Sprintf("coord-%s-%d", e.svc.nonce, i))); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, "a duplicate ack counted", func() bool {
		return counterValue(t, e.reg, "shockwave_log_writes_total", "result", "duplicate") >= 1
	})
	start := e.svc.Health().Rounds
	eventually(t, 20*time.Second, "rounds go on with new ids", func() bool { return e.svc.Health().Rounds >= start+3 })
	eventually(t, 5*time.Second, "healthz recovers", func() bool { return e.svc.Health().OK })
}

// forgeries are what a job tries in none and token mode: coordinator
// records on the log's control subjects and JetStream API calls.
func forgeries(e *env) map[string][]byte {
	stream, bucket := streamNames(e.subj.Prefix)
	tick, _ := json.Marshal(tickRecord{V: 1, Round: 1 << 20, Epoch: 1 << 40})
	plan, _ := json.Marshal(planRecord{V: 1, Round: 0, Epoch: 1 << 40})
	cfg, _ := json.Marshal(configRecord{V: 1, GPUs: 9999, RoundSeconds: 1, Policy: "forged"})
	reg, _ := json.Marshal(newJob("forged", 1))
	lead, _ := json.Marshal(leaderRecord{V: 1, ID: "forged", Epoch: 1 << 40})
	return map[string][]byte{
		e.subj.Prefix + "." + logTick:                             tick,
		e.subj.Prefix + "." + logPlan:                             plan,
		e.subj.Prefix + "." + logConfig:                           cfg,
		e.subj.Prefix + "." + logRegister:                         reg,
		e.subj.Prefix + "." + logLeader:                           lead,
		e.subj.Prefix + "." + logCarried:                          encodeCarried(carriedBatch{"n0", "forged", nil, []byte(`{"v":1,"job":"forged"}`)}),
		e.subj.Prefix + "." + logRegisters:                        encodeRegisters(carriedRegistration{"", "_INBOX.forged", reg, nil}),
		"$JS.API.STREAM.PURGE." + stream:                          []byte(`{}`),
		"$JS.API.STREAM.DELETE." + stream:                         nil,
		"$JS.API.STREAM.DELETE.KV_" + bucket:                      nil,
		"$JS.API.STREAM.DELETE.KV_" + leaderBucket(e.subj.Prefix): nil,
		"$KV." + leaderBucket(e.subj.Prefix) + "." + leaderKey:    lead,
		e.subj.Lease("j"):                                         []byte(`{"v":1,"job":"j","round":1,"action":"EXIT","start":1,"expiry":2}`),
	}
}

func testForgeriesAreRefused(t *testing.T, e *env, job *nats.Conn, v *violations) {
	t.Helper()
	if rep := register(t, job, e.subj, newJob("j", 1)); rep.Error != nil {
		t.Fatal(rep.Error)
	}
	eventually(t, 10*time.Second, "two rounds", func() bool { return e.svc.Health().Rounds >= 2 })
	before := len(logRecords(t, e))
	for subject, data := range forgeries(e) {
		if err := job.Publish(subject, data); err != nil {
			t.Fatal(err)
		}
		eventually(t, 5*time.Second, "a permission violation for "+subject, func() bool {
			return v.has("Permissions Violation for Publish to \"" + subject + "\"")
		})
	}
	// A request to the JetStream API gets no answer either.
	if _, err := jetstream.New(job); err == nil {
		js, _ := jetstream.New(job)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		name, _ := streamNames(e.subj.Prefix)
		if err := js.DeleteStream(ctx, name); err == nil {
			t.Error("a job deleted the log")
		}
		cancel()
	}
	rounds := e.svc.Health().Rounds
	eventually(t, 10*time.Second, "rounds go on", func() bool { return e.svc.Health().Rounds >= rounds+2 })
	recs := logRecords(t, e)
	if len(recs) < before {
		t.Fatalf("the log shrank from %d to %d records", before, len(recs))
	}
	for _, m := range recs {
		if strings.Contains(string(m.Data), "forged") || strings.Contains(string(m.Data), `"gpus":9999`) {
			t.Errorf("a forged record reached the log: %s %s", m.Subject, m.Data)
		}
	}
	st := status(t, e.coordClient(), e.subj)
	if _, ok := jobRow(st, "forged"); ok || st.GPUs != 1 {
		t.Errorf("forged state: %+v", st)
	}
	if st.Round > 1000 {
		t.Errorf("a forged tick advanced the rounds to %d", st.Round)
	}
	if row, ok := jobRow(st, "j"); !ok || row.State == "completed" || row.State == "failed" {
		t.Errorf("the job's own state changed: %+v", row)
	}
}

// noCompaction keeps every record in the log, so that a test can see
// whether a job shrank it.
func noCompaction(_ *EmbeddedConfig, s *ServiceConfig) { s.SnapshotRounds = 1 << 20 }

func TestNoneMode_AJobCannotForgeLogRecordsOrCallTheJetStreamAPI(t *testing.T) {
	e := newEnv(t, 1, noCompaction)
	v := &violations{}
	job := e.client(nats.ErrorHandler(v.handler))
	testForgeriesAreRefused(t, e, job, v)
}

func TestTokenMode_AJobCannotForgeLogRecordsOrCallTheJetStreamAPI(t *testing.T) {
	e := newEnv(t, 1, func(ec *EmbeddedConfig, sc *ServiceConfig) {
		ec.Auth, ec.Token, ec.DontListen, ec.Listen = AuthToken, "job-token", false, "127.0.0.1:-1"
		noCompaction(ec, sc)
	})
	v := &violations{}
	job, err := nats.Connect(e.emb.ClientURL(), nats.Token("job-token"), nats.ErrorHandler(v.handler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(job.Close)
	testForgeriesAreRefused(t, e, job, v)
	// The job token reads no status in token mode; the admin secret does.
	if _, err := job.Request(e.subj.Status(), nil, 300*time.Millisecond); err == nil {
		t.Error("a job token read the status")
	}
	admin, err := nats.Connect(e.emb.ClientURL(), nats.Token(strings.TrimSpace(readFile(t, e.emb.AdminSecretFile(e.dir)))))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if st := status(t, admin, e.subj); st.GPUs != 1 {
		t.Errorf("admin status: %+v", st)
	}
}

func TestTokenMode_AJobTokenEqualToACoordinatorSecretIsRefused(t *testing.T) {
	dir := t.TempDir()
	e, err := StartEmbedded(EmbeddedConfig{DataDir: dir, DontListen: true})
	if err != nil {
		t.Fatal(err)
	}
	secret := strings.TrimSpace(readFile(t, e.AdminSecretFile(dir)))
	e.Shutdown()
	if _, err := StartEmbedded(EmbeddedConfig{DataDir: dir, DontListen: true, Auth: AuthToken, Token: secret}); err == nil ||
		!strings.Contains(err.Error(), "must differ") {
		t.Fatalf("job token = admin secret: %v", err)
	}
}

func TestConfig_AStartUpCheckReadsTheRecordTheFoldTrusts(t *testing.T) {
	e := newEnv(t, 1, nil)
	// A later, different config record (written with the coordinator's
	// rights: no job can) is ignored by the fold; the start-up check
	// must ignore it too.
	js, err := jetstream.New(e.coordClient())
	if err != nil {
		t.Fatal(err)
	}
	other, _ := json.Marshal(configRecord{V: 1, GPUs: 7, RoundSeconds: 3, Policy: "gavel"})
	if _, err := js.Publish(context.Background(), e.subj.Prefix+"."+logConfig, other); err != nil {
		t.Fatal(err)
	}
	e.stopService()
	e.startService() // fails if the check read the last config record
	if st := status(t, e.client(), e.subj); st.GPUs != 1 || st.Policy != "gandiva_fair" {
		t.Errorf("after restart: %d GPUs, %s", st.GPUs, st.Policy)
	}
}

func TestCaps_JobsBeyondTheTotalAndPerClientCapsAreRefusedAndCounted(t *testing.T) {
	e := newEnv(t, 1, func(_ *EmbeddedConfig, sc *ServiceConfig) { sc.MaxJobs, sc.MaxJobsPerClient = 3, 2 })
	a, b := e.client(), e.client()
	for _, id := range []string{"a1", "a2"} {
		if rep := register(t, a, e.subj, newJob(id, 1)); rep.Error != nil {
			t.Fatal(rep.Error)
		}
	}
	if rep := register(t, a, e.subj, newJob("a3", 1)); rep.Error == nil || !strings.Contains(rep.Error.Message, "max-jobs-per-client") {
		t.Errorf("third job of one client: %+v", rep.Error)
	}
	if rep := register(t, a, e.subj, newJob("a1", 1)); rep.Error != nil {
		t.Errorf("a registered job resumes whatever the caps: %v", rep.Error)
	}
	if rep := register(t, b, e.subj, newJob("b1", 1)); rep.Error != nil {
		t.Fatal(rep.Error)
	}
	if rep := register(t, b, e.subj, newJob("b2", 1)); rep.Error == nil || !strings.Contains(rep.Error.Message, "max-jobs") {
		t.Errorf("fourth job in all: %+v", rep.Error)
	}
	if n := counterValue(t, e.reg, "shockwave_registrations_total", "result", "rejected_client_cap"); n != 1 {
		t.Errorf("client cap refusals counted: %g", n)
	}
	if n := counterValue(t, e.reg, "shockwave_registrations_total", "result", "rejected_too_many_jobs"); n != 1 {
		t.Errorf("total cap refusals counted: %g", n)
	}
	if st := status(t, e.client(), e.subj); len(st.Jobs) != 3 {
		t.Errorf("jobs: %+v", st.Jobs)
	}
}

func TestCaps_AJobFloodingEventsIsRateLimitedAndCounted(t *testing.T) {
	e := newEnv(t, 1, nil)
	nc := e.client()
	if rep := register(t, nc, e.subj, newJob("f", 1)); rep.Error != nil {
		t.Fatal(rep.Error)
	}
	evs := make([]protocol.Event, 0, 500)
	seq := uint64(0)
	for range 10 { // 5,000 events at once: more than the burst
		evs = evs[:0]
		for range 500 {
			seq++
			evs = append(evs, heartbeat(seq, 0))
		}
		publishBatch(t, nc, e.subj, "f", evs...)
	}
	eventually(t, 10*time.Second, "rate-limited batches counted", func() bool {
		return counterValue(t, e.reg, "shockwave_events_rejected_total", "reason", "rate_limited") >= 1
	})
	if n := counterValue(t, e.reg, "shockwave_events_accepted_total", "", ""); n > eventBurst+500 {
		t.Errorf("%g events accepted in a burst, the budget is %d", n, eventBurst)
	}
}

func TestEmbedded_APortInUseIsReportedAsSuch(t *testing.T) {
	addr := freeAddr(t)
	first, err := StartEmbedded(EmbeddedConfig{DataDir: t.TempDir(), Listen: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Shutdown()
	_, err = StartEmbedded(EmbeddedConfig{DataDir: t.TempDir(), Listen: addr})
	if err == nil || !strings.Contains(err.Error(), "already in use") {
		t.Fatalf("second server on %s: %v", addr, err)
	}
}

func TestEmbedded_ASecondCoordinatorOnOneDataDirFailsFast(t *testing.T) {
	dir := t.TempDir()
	first, err := StartEmbedded(EmbeddedConfig{DataDir: dir, DontListen: true})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = StartEmbedded(EmbeddedConfig{DataDir: dir, DontListen: true})
	if err == nil || !strings.Contains(err.Error(), "in use by another coordinator") {
		t.Fatalf("second coordinator on one data dir: %v", err)
	}
	t.Logf("refused in %v: %v", time.Since(start), err)
	first.Shutdown()
	again, err := StartEmbedded(EmbeddedConfig{DataDir: dir, DontListen: true})
	if err != nil {
		t.Fatalf("after the first stopped: %v", err)
	}
	again.Shutdown()
}

func TestEvents_AnAbsurdSequenceNumberDoesNotWedgeTheJob(t *testing.T) {
	e := newEnv(t, 1, nil)
	nc := e.client()
	if rep := register(t, nc, e.subj, newJob("w", 1)); rep.Error != nil {
		t.Fatal(rep.Error)
	}
	publishBatch(t, nc, e.subj, "w", heartbeat(1, 0))
	raw := `{"v":1,"job":"w","events":[{"v":1,"type":"progress","job":"w","seq":18446744073709551615,"steps":1,"elapsed":1,"steps_done":1,"total_steps":1000,"epoch":0,"batch_size":32}]}`
	if err := nc.Publish(e.subj.Events("w"), []byte(raw)); err != nil {
		t.Fatal(err)
	}
	publishBatch(t, nc, e.subj, "w", heartbeat(1<<40, 0)) // within 2^53, but 2^40 ahead
	publishBatch(t, nc, e.subj, "w", heartbeat(2, 0))
	eventually(t, 10*time.Second, "the next event accepted", func() bool {
		row, _ := jobRow(status(t, nc, e.subj), "w")
		return row.LastSeq == 2
	})
	if n := counterValue(t, e.reg, "shockwave_events_rejected_total", "reason", "out_of_order"); n != 1 {
		t.Errorf("the 2^40 jump counted as out of order: %g", n)
	}
}

func TestCaps_AClientFloodingRegistrationsIsRateLimited(t *testing.T) {
	e := newEnv(t, 1, nil)
	nc := e.client()
	if rep := register(t, nc, e.subj, newJob("r", 1)); rep.Error != nil {
		t.Fatal(rep.Error)
	}
	refused := 0
	for range 2 * registerBurst { // resumes of a known job: each would be a log record
		if rep := register(t, nc, e.subj, newJob("r", 1)); rep.Error != nil && strings.Contains(rep.Error.Message, "retry later") {
			refused++
		}
	}
	if refused == 0 {
		t.Fatalf("%d registrations in a burst were all admitted", 2*registerBurst)
	}
	if n := counterValue(t, e.reg, "shockwave_registrations_total", "result", "rejected_client_rate"); n != float64(refused) {
		t.Errorf("refusals counted %g, seen %d", n, refused)
	}
	if rep := register(t, e.client(), e.subj, newJob("r", 1)); rep.Error != nil {
		t.Errorf("another client: %v", rep.Error)
	}
}

// TestCaps_AtTheJobCapSubmittedAndRestoredJobsStillRegister: with the job
// cap reached, the process of a submitted job registers (it was refused as
// a new job, so no submitted job could start in a full cluster), and so do
// the jobs of a restarted coordinator; a new job is still refused.
func TestCaps_AtTheJobCapSubmittedAndRestoredJobsStillRegister(t *testing.T) {
	e := newEnv(t, 1, func(_ *EmbeddedConfig, sc *ServiceConfig) { sc.MaxJobs = 2 })
	nc := e.client()
	data, _ := json.Marshal(protocol.Submit{V: protocol.Version, Job: "s1", Command: []string{"train"}, Workers: 1})
	if m, err := nc.Request(e.subj.Submit(), data, 5*time.Second); err != nil {
		t.Fatal(err)
	} else if rep, err := protocol.DecodeSubmitReply(m.Data, 1<<20); err != nil || rep.Error != nil {
		t.Fatalf("submit: %v %+v", err, rep)
	}
	if rep := register(t, nc, e.subj, newJob("r1", 1)); rep.Error != nil {
		t.Fatal(rep.Error)
	}
	if rep := register(t, nc, e.subj, newJob("s1", 1)); rep.Error != nil {
		t.Errorf("the submitted job's process at the cap: %v", rep.Error)
	}
	if rep := register(t, nc, e.subj, newJob("x", 1)); rep.Error == nil || !strings.Contains(rep.Error.Message, "max-jobs") {
		t.Errorf("a third job: %+v", rep.Error)
	}
	e.stopService()
	e.startService()
	nc = e.client()
	for _, id := range []string{"r1", "s1"} {
		if rep := register(t, nc, e.subj, newJob(id, 1)); rep.Error != nil {
			t.Errorf("%s after a restart at the cap: %v", id, rep.Error)
		}
	}
}
