package agent_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shockwave-sched/shockwave/protocol"
)

// TestAgent_JobIgnoringSuspendIsKilledAndTheNextJobGetsTheDevice: a job
// whose processes ignore SUSPEND and SIGTERM is killed (SIGKILL) once its
// grant expired plus the grace, and only then does the next job start on
// the device.
func TestAgent_JobIgnoringSuspendIsKilledAndTheNextJobGetsTheDevice(t *testing.T) {
	c := newCluster(t, "--gpus", "1")
	c.startAgent("node-0", 1)
	stubborn := c.submit([]string{"--name", "stubborn", "--max-retries", "0"},
		"sh", "-c", `trap "" TERM; echo running; while :; do sleep 0.2; done`)
	eventually(t, 20*time.Second, "the stubborn job runs", func() bool { return strings.Contains(c.output(stubborn), "running") })
	next := c.submit([]string{"--name", "next"}, train(4, "5ms")...)
	c.waitState(next, "completed", 90*time.Second)
	log := c.read("agent-node-0")
	kill := strings.Index(log, "still running after SIGTERM: SIGKILL")
	start := strings.Index(log, "started") // the stubborn job's start
	nextStart := strings.Index(log[start+1:], "started") + start + 1
	if kill < 0 || !strings.Contains(log[kill:min(len(log), kill+300)], stubborn) {
		t.Fatalf("the stubborn job was never killed:\n%s", log)
	}
	if nextStart < kill {
		t.Errorf("the next job started before the stubborn one was killed:\n%s", log)
	}
	if !strings.Contains(log, "stopped after its grant expired") {
		t.Errorf("the exit of the stubborn job does not say why it was stopped:\n%s", log)
	}
}

// TestAgent_NonZeroExitsAreRetriedThenTheJobFailsWithTheReason: a command
// that exits 7 is restarted max-retries times, then fails, and status
// shows the exit status.
func TestAgent_NonZeroExitsAreRetriedThenTheJobFailsWithTheReason(t *testing.T) {
	c := newCluster(t, "--gpus", "1")
	c.startAgent("node-0", 1)
	job := c.submit([]string{"--max-retries", "2"}, "sh", "-c", "echo trying; exit 7")
	st := c.waitState(job, "failed", 30*time.Second)
	for _, want := range []string{"exited with status 7", "retries exhausted (max 2)"} {
		if !strings.Contains(st.Reason, want) {
			t.Errorf("reason %q does not say %q", st.Reason, want)
		}
	}
	if n := strings.Count(c.output(job), "trying"); n != 3 {
		t.Errorf("the command ran %d times, want 3 (1 + 2 retries):\n%s", n, c.output(job))
	}
	out, _, _ := c.shockwave("status", "--nats-url", c.url())
	if !strings.Contains(out, "retries exhausted") {
		t.Errorf("shockwave status does not show the reason:\n%s", out)
	}
}

// TestCoordinator_Kill9LosesNoSubmittedJob: the coordinator is killed with
// SIGKILL while submitted jobs run and wait; restarted on the same data
// directory (a state snapshot every round, the log compacted behind it)
// it still has every job, and all of them finish.
func TestCoordinator_Kill9LosesNoSubmittedJob(t *testing.T) {
	c := newCluster(t, "--gpus", "1", "--snapshot-rounds", "1")
	c.startAgent("node-0", 1)
	var jobs []string
	for range 3 {
		jobs = append(jobs, c.submit(nil, train(6, "20ms")...))
	}
	eventually(t, 20*time.Second, "a job runs", func() bool { return strings.Contains(c.output(jobs[0])+c.output(jobs[1])+c.output(jobs[2]), "epoch 1") })
	c.killCoordinator()
	c.startCoordinator()
	if !strings.Contains(c.read("coordinator"), "restored the newest snapshot") {
		t.Errorf("the restarted coordinator did not start from a state snapshot")
	}
	rep, err := c.status()
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Jobs) != 3 {
		t.Fatalf("after kill -9 and restart the coordinator has %d jobs, want 3", len(rep.Jobs))
	}
	for _, j := range jobs {
		c.waitState(j, "completed", 90*time.Second)
	}
}

// TestCancel_StopsARunningJob: a cancelled job ends as cancelled and its
// process stops; cancelling it again is refused.
func TestCancel_StopsARunningJob(t *testing.T) {
	c := newCluster(t, "--gpus", "1")
	c.startAgent("node-0", 1)
	job := c.submit(nil, train(200, "20ms")...)
	eventually(t, 20*time.Second, "the job runs", func() bool { return strings.Contains(c.output(job), "epoch 0") })
	out, errs, code := c.shockwave("cancel", "--nats-url", c.url(), job)
	if code != 0 || !strings.Contains(out, "cancelled") {
		t.Fatalf("cancel: status %d, %q %q", code, out, errs)
	}
	c.waitState(job, "cancelled", 10*time.Second)
	eventually(t, 10*time.Second, "the process exits", func() bool {
		return strings.Contains(c.read("agent-node-0"), "exited")
	})
	if _, errs, code := c.shockwave("cancel", "--nats-url", c.url(), job); code == 0 || !strings.Contains(errs, "cancelled") {
		t.Errorf("a second cancel: status %d, %q", code, errs)
	}
}

// TestSubmit_BadInputIsRefusedWithAClearErrorAndChangesNothing: bad
// submissions are refused by the CLI and by the coordinator, naming what
// was wrong, and the coordinator's state and log do not change.
func TestSubmit_BadInputIsRefusedWithAClearErrorAndChangesNothing(t *testing.T) {
	c := newCluster(t, "--gpus", "2")
	for _, tc := range []struct {
		args    []string
		mention string
	}{
		{[]string{"--workers", "0", "--", "true"}, "workers"},
		{[]string{"--env", "NOEQUALS", "--", "true"}, "KEY=VALUE"},
		{[]string{"--env", "CUDA_VISIBLE_DEVICES=3", "--", "true"}, "reserved"},
		{[]string{"--workers", "2"}, "no command"},
		{[]string{"--", ""}, "empty command"},
	} {
		_, errs, code := c.shockwave(append([]string{"submit", "--nats-url", c.url()}, tc.args...)...)
		if code != 2 || !strings.Contains(errs, tc.mention) {
			t.Errorf("submit %v: status %d, %q; want 2 and a mention of %q", tc.args, code, errs, tc.mention)
		}
	}
	before, err := c.status()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		body    string
		mention string
	}{
		{`{"v":1,"job":"x1","command":[],"workers":1,"max_retries":0}`, "empty command"},
		{`{"v":1,"job":"x1","command":["true"],"workers":0,"max_retries":0}`, "workers"},
		{`{"v":1,"job":"x1","command":["true"],"workers":1,"env":["1A=b"],"max_retries":0}`, "variable name"},
		{`{"v":1,"job":"x1","command":["true"],"workers":1,"env":["SHOCKWAVE_JOB_ID=other"],"max_retries":0}`, "reserved"},
		{`{"v":1,"job":"x1","command":["true"],"workers":1,"max_retries":0,"gpus":4}`, "unknown field"},
		{`{"v":1,"command":["true"],"workers":1,"max_retries":0}`, "empty job id"},
		{`{"v":1,"job":"a.b","command":["true"],"workers":1,"max_retries":0}`, "job id"},
		{`{"v":1,"job":"x1","command":["true"],"workers":1,"max_retries":1000}`, "max_retries"},
	} {
		var rep protocol.SubmitReply
		raw := c.requestRaw(c.subj.Submit(), []byte(tc.body))
		if err := json.Unmarshal(raw, &rep); err != nil || rep.Error == nil || !strings.Contains(rep.Error.Message, tc.mention) {
			t.Errorf("%s: reply %s; want an error naming %q", tc.body, raw, tc.mention)
		}
	}
	after, err := c.status()
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Jobs) != 0 || after.LogSeq != before.LogSeq {
		t.Errorf("refused submissions changed the state: %d jobs, log %d -> %d", len(after.Jobs), before.LogSeq, after.LogSeq)
	}
	// A gang wider than the cluster reaches the log and is refused there.
	var rep protocol.SubmitReply
	raw := c.requestRaw(c.subj.Submit(), []byte(`{"v":1,"job":"wide","command":["true"],"workers":3,"max_retries":0}`))
	if err := json.Unmarshal(raw, &rep); err != nil || rep.Error == nil || !strings.Contains(rep.Error.Message, "wider") {
		t.Errorf("a 3-GPU gang on 2 GPUs: reply %s", raw)
	}
	if after, _ := c.status(); len(after.Jobs) != 0 {
		t.Errorf("a refused gang was registered: %+v", after.Jobs)
	}
}

func (c *cluster) requestRaw(subject string, data []byte) []byte {
	m, err := c.nc.Request(subject, data, 3*time.Second)
	if err != nil {
		c.t.Fatalf("request %s: %v", subject, err)
	}
	return m.Data
}

// TestAgentReport_ForgedReportsChangeNothing: a report on another node's
// subject, or for a job not placed on the reporting node, is refused or
// ignored: the job keeps its attempt and runs to completion.
func TestAgentReport_ForgedReportsChangeNothing(t *testing.T) {
	c := newCluster(t, "--gpus", "1")
	c.startAgent("node-0", 1)
	job := c.submit([]string{"--max-retries", "0"}, train(8, "20ms")...)
	eventually(t, 20*time.Second, "the job runs", func() bool { return strings.Contains(c.output(job), "epoch 0") })
	forged := protocol.AgentReport{V: protocol.Version, Node: "node-0", Job: job, Event: protocol.ReportExited, Code: 1}
	var rep protocol.AgentReply
	// the body names node-0, the subject node-1: refused
	if err := json.Unmarshal(c.request(c.subj.AgentReport("node-1"), forged), &rep); err != nil || rep.Error == nil || rep.Error.Code != protocol.CodeForbidden {
		t.Errorf("a report naming another node than its subject: %+v", rep)
	}
	// node-1 (never joined) reports the job failed: ignored
	forged.Node = "node-1"
	_ = c.request(c.subj.AgentReport("node-1"), forged)
	st := c.waitState(job, "completed", 60*time.Second)
	if strings.Contains(st.Reason, "status 1") {
		t.Errorf("a forged report left a reason: %q", st.Reason)
	}
	if n := len(c.starts(job)); n < 1 || strings.Contains(c.output(job), "attempt 1") {
		t.Errorf("the job was restarted after a forged report:\n%s", c.output(job))
	}
}

// TestAgent_CredsModeGivesAgentsTheirOwnRole: with --auth creds the agent
// runs a submitted job with credentials it fetched for it; a job's
// credentials cannot act as an agent, an agent's cannot act as a job or
// as another node, and an agent gets no credentials of a job placed
// elsewhere.
func TestAgent_CredsModeGivesAgentsTheirOwnRole(t *testing.T) {
	c := newCluster(t, "--gpus", "1", "--auth", "creds")
	agentCreds := c.issue("agent-node-0", "--agent", "node-0")
	c.startAgent("node-0", 1, "--creds", agentCreds)
	job := c.submit(nil, train(2, "5ms")...)
	c.waitState(job, "completed", 60*time.Second)

	jobCreds := c.issue(job, job)
	jc := connectWith(t, c.url(), jobCreds, c.subj.Inbox(job))
	assertDenied(t, jc, c.subj.AgentReport("node-0"), protocol.AgentReport{V: protocol.Version, Node: "node-0", Job: job, Event: "exited", Code: 1})
	assertDenied(t, jc, c.subj.Submit(), protocol.Submit{V: protocol.Version, Job: "evil", Command: []string{"true"}, Workers: 1})

	ac := connectWith(t, c.url(), agentCreds, c.subj.AgentInbox("node-0"))
	assertDenied(t, ac, c.subj.Register(), protocol.Register{V: protocol.Version, Job: job})
	assertDenied(t, ac, c.subj.Events(job), protocol.Batch{V: protocol.Version, Job: job})
	assertDenied(t, ac, c.subj.AgentJoin("node-1"), protocol.AgentHello{V: protocol.Version, Node: "node-1", GPUs: 8})
	assertDenied(t, ac, c.subj.Prefix+".log.submit", protocol.Submit{V: protocol.Version, Job: "evil", Command: []string{"true"}, Workers: 1})
	// the agent may ask, but gets no credentials of a job not placed on it
	data, _ := json.Marshal(protocol.CredsRequest{V: protocol.Version, Node: "node-0", Job: job})
	m, err := ac.Request(c.subj.AgentCreds("node-0"), data, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var rep protocol.CredsReply
	if err := json.Unmarshal(m.Data, &rep); err != nil || rep.Error == nil || rep.Error.Code != protocol.CodeForbidden {
		t.Errorf("credentials of a job not placed on the node: %s", m.Data)
	}
	if _, err := os.Stat(filepath.Join(c.dir, "work", job)); err != nil {
		t.Errorf("no work directory for the job: %v", err)
	}
}
