package coordinator

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shockwave-sched/shockwave/protocol"
)

// A job chooses the reply subject of every message it publishes. JetStream
// answers each message it captures on that subject, so the path by which
// events reach the log decides where those answers go: through a stream
// import the reply would arrive in the coordinator's account unchanged and
// a job could make the server publish onto the log's own subjects or the
// JetStream API (docs/scale.md, session 7). These tests publish event
// batches whose replies name such subjects, in each auth mode, and check
// that nothing lands there.

// replyTargets are the subjects a job names as the reply of its batches:
// one the log captures, and the purge and delete calls of the log itself.
func replyTargets(e *env) []string {
	stream, _ := streamNames(e.subj.Prefix)
	return []string{
		e.subj.Prefix + ".log.forged",
		"$JS.API.STREAM.PURGE." + stream,
		"$JS.API.STREAM.DELETE." + stream,
	}
}

func testEventRepliesStayInTheJobsAccount(t *testing.T, e *env, job *nats.Conn, name string) {
	t.Helper()
	if rep := register(t, job, e.subj, newJob(name, 1)); rep.Error != nil {
		t.Fatal(rep.Error)
	}
	checkForgedReplies(t, e, name, func(seq uint64, round int, reply string) {
		publishBatchWithReply(t, job, e.subj, name, reply, heartbeat(seq, int64(round)))
	}, job.Flush)
}

// checkForgedReplies has publish send job's batches seq 1, 2, … (three
// rounds of one batch per reply target, each naming that target as its
// reply), then checks that every batch was folded and stored in the log,
// that nothing reached a target in the coordinator's account, and that
// the log captured nothing on a forged or agent subject.
func checkForgedReplies(t *testing.T, e *env, job string, publish func(seq uint64, round int, reply string), flush func() error) {
	t.Helper()
	targets := replyTargets(e)
	// The coordinator's account sees everything published on the targets.
	coord := e.coordClient()
	var seen atomic.Int64
	var first atomic.Value
	for _, subject := range targets {
		sub, err := coord.Subscribe(subject, func(m *nats.Msg) {
			if seen.Add(1) == 1 {
				first.Store(m.Subject + " " + string(m.Data))
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
	}
	if err := coord.Flush(); err != nil {
		t.Fatal(err)
	}
	seq := uint64(0)
	for round := range 3 {
		for _, reply := range targets {
			seq++
			publish(seq, round, reply)
		}
	}
	if err := flush(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "every batch folded", func() bool {
		row, ok := jobRow(status(t, coord, e.subj), job)
		return ok && row.LastSeq == seq
	})
	// Answers, had they gone astray, are published once JetStream stored
	// the batch, before the fold sees it; give a slow server a moment more.
	time.Sleep(200 * time.Millisecond)
	if n := seen.Load(); n > 0 {
		t.Errorf("%d messages reached a reply target in the coordinator's account, the first: %v", n, first.Load())
	}
	batches := 0
	for _, m := range logRecords(t, e) {
		if strings.Contains(m.Subject, "forged") || strings.Contains(m.Subject, ".agent.") {
			t.Errorf("the log captured %s: %s", m.Subject, m.Data)
		}
		batches += batchesOf(t, m, e.subj, job)
	}
	if batches != int(seq) {
		t.Errorf("the log holds %d of the job's %d batches (a purge or delete got through?)", batches, seq)
	}
}

func publishBatchWithReply(t *testing.T, nc *nats.Conn, subj protocol.Subjects, job, reply string, ev protocol.Event) {
	t.Helper()
	ev.V, ev.Job = protocol.Version, job
	data := mustJSON(t, protocol.Batch{V: protocol.Version, Job: job, Events: []protocol.Event{ev}})
	if err := nc.PublishMsg(&nats.Msg{Subject: subj.Events(job), Reply: reply, Data: data}); err != nil {
		t.Fatal(err)
	}
}

func TestNoneMode_AnEventBatchsReplySubjectReachesNeitherTheLogNorTheJetStreamAPI(t *testing.T) {
	e := newEnv(t, 1, noCompaction)
	testEventRepliesStayInTheJobsAccount(t, e, e.client(), "r")
}

func TestTokenMode_AnEventBatchsReplySubjectReachesNeitherTheLogNorTheJetStreamAPI(t *testing.T) {
	e := newEnv(t, 1, func(ec *EmbeddedConfig, sc *ServiceConfig) {
		ec.Auth, ec.Token, ec.DontListen, ec.Listen = AuthToken, "job-token", false, "127.0.0.1:-1"
		noCompaction(ec, sc)
	})
	job, err := nats.Connect(e.emb.ClientURL(), nats.Token("job-token"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(job.Close)
	testEventRepliesStayInTheJobsAccount(t, e, job, "r")
}

func TestCreds_AnEventBatchsReplySubjectReachesNeitherTheLogNorTheJetStreamAPI(t *testing.T) {
	e := newEnv(t, 1, func(ec *EmbeddedConfig, sc *ServiceConfig) {
		ec.Auth = AuthCreds
		noCompaction(ec, sc)
	})
	job, _ := jobClient(t, e, "r")
	testEventRepliesStayInTheJobsAccount(t, e, job, "r")
}

// testAgentEventRepliesGoNowhere: a node agent (in none and token mode a
// client of the jobs' account, like the jobs) publishes its job's batches
// on its node's events subject with replies naming the log and the
// JetStream API. They arrive in the coordinator's account as a stream,
// with the reply, but only the events handler listens there, and it never
// answers: nothing reaches the targets, and the log holds every batch.
func testAgentEventRepliesGoNowhere(t *testing.T, e *env, agent *nats.Conn) {
	t.Helper()
	n0 := joinRelayAgent(t, e, agent, "n0", 1, true)
	submitRelayJob(t, e, e.coordClient(), "a") // token mode: submitting takes the admin secret
	placedNode(t, "a", map[string]*relayAgent{"n0": n0})
	reg := newJob("a", 1)
	reg.Relayed = true
	if rep := agentRegister(t, agent, e.subj, "n0", reg); rep.Error != nil {
		t.Fatal(rep.Error)
	}
	checkForgedReplies(t, e, "a", func(seq uint64, round int, reply string) {
		ev := heartbeat(seq, int64(round))
		ev.V, ev.Job = protocol.Version, "a"
		m := &nats.Msg{Subject: e.subj.AgentEvents("n0"), Reply: reply, Header: nats.Header{},
			Data: mustJSON(t, protocol.Batch{V: protocol.Version, Job: "a", Events: []protocol.Event{ev}})}
		m.Header.Set(protocol.HdrJob, "a")
		if err := agent.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}, agent.Flush)
}

func TestNoneMode_AnAgentsBatchReplySubjectReachesNeitherTheLogNorTheJetStreamAPI(t *testing.T) {
	e := newEnv(t, 0, func(ec *EmbeddedConfig, sc *ServiceConfig) {
		sc.Core.Dynamic, sc.Policy = true, "shockwave"
		noCompaction(ec, sc)
	})
	testAgentEventRepliesGoNowhere(t, e, e.client())
}

func TestTokenMode_AnAgentsBatchReplySubjectReachesNeitherTheLogNorTheJetStreamAPI(t *testing.T) {
	e := newEnv(t, 0, func(ec *EmbeddedConfig, sc *ServiceConfig) {
		ec.Auth, ec.Token, ec.DontListen, ec.Listen = AuthToken, "job-token", false, "127.0.0.1:-1"
		sc.Core.Dynamic, sc.Policy = true, "shockwave"
		noCompaction(ec, sc)
	})
	agent, err := nats.Connect(e.emb.ClientURL(), nats.Token("job-token"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agent.Close)
	testAgentEventRepliesGoNowhere(t, e, agent)
}

// batchesOf counts job's batches in a log record: 1 for a record on the
// job's events subject, the job's batches in a carried record (carry.go).
func batchesOf(t *testing.T, m *jetstream.RawStreamMsg, subj protocol.Subjects, job string) int {
	t.Helper()
	switch m.Subject {
	case subj.Events(job):
		return 1
	case subj.Prefix + "." + logCarried:
		bs, err := decodeCarried(m.Data, 0)
		if err != nil {
			t.Fatalf("log record %s: %v", m.Subject, err)
		}
		n := 0
		for _, b := range bs {
			if b.job == job {
				n++
			}
		}
		return n
	}
	return 0
}
