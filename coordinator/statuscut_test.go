package coordinator

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/topology"
)

// statusOf builds the reply answerStatus builds for the whole table.
func statusOf(c *Core) protocol.StatusReply {
	rep := protocol.StatusReply{V: protocol.Version, Jobs: c.Jobs(), Plan: c.LastPlan(), Nodes: c.NodeStatus(), GPUs: c.GPUs()}
	return rep
}

func rowIDs(rows []protocol.JobInfo) []string {
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.Job
	}
	return ids
}

// A status reply over the server's message limit is cut, not lost: it
// lists the jobs the web view would show (the unfinished ones furthest from
// their fair share, then the table's order), says how many there are, and
// explains only the jobs it lists; what it was given is not changed.
func TestStatus_AReplyOverTheLimitListsTheJobsFurthestFromTheirShare(t *testing.T) {
	c := plannedCore(t, topology.Uniform(8, 4), 300, "job-7")
	rep := statusOf(c)
	full, _ := json.Marshal(rep)
	before := slices.Clone(rep.Jobs)
	explained := len(rep.Plan.Explain)

	for _, limit := range []int64{int64(len(full)), int64(len(full)) / 2, int64(len(full)) / 10, 4 << 10} {
		data := encodeStatus(rep, limit, true)
		got, err := protocol.DecodeStatusReply(data, 64<<20)
		if err != nil || got.Error != nil {
			t.Fatalf("limit %d: %v %v", limit, err, got.Error)
		}
		if int64(len(data)) > limit {
			t.Errorf("limit %d: %d bytes", limit, len(data))
		}
		if limit == int64(len(full)) {
			if got.JobsTotal != 0 || len(got.Jobs) != 300 {
				t.Errorf("a reply that fits: %d jobs, jobs_total %d", len(got.Jobs), got.JobsTotal)
			}
			continue
		}
		n := len(got.Jobs)
		if n == 0 || n >= 300 || got.JobsTotal != 300 {
			t.Fatalf("limit %d: %d jobs listed of %d", limit, n, got.JobsTotal)
		}
		want, _ := c.ShownJobs(n)
		if !slices.Equal(rowIDs(got.Jobs), rowIDs(want)) {
			t.Errorf("limit %d: listed %v, the web view shows %v", limit, rowIDs(got.Jobs)[:min(n, 5)], rowIDs(want)[:min(n, 5)])
		}
		listed := map[string]bool{}
		for _, j := range got.Jobs {
			listed[j.Job] = true
		}
		for _, e := range got.Plan.Explain {
			if !listed[e.Job] {
				t.Fatalf("limit %d: the plan explains %s, which is not listed", limit, e.Job)
			}
		}
		t.Logf("limit %d: %d bytes, %d jobs, %d explained", limit, len(data), n, len(got.Plan.Explain))
	}
	if !slices.Equal(rowIDs(rep.Jobs), rowIDs(before)) || len(rep.Plan.Explain) != explained {
		t.Error("cutting changed the reply it was given")
	}

	// Nothing fits: an error naming both sizes, not silence.
	got, err := protocol.DecodeStatusReply(encodeStatus(rep, 200, true), 64<<20)
	if err != nil || got.Error == nil || got.Error.Code != protocol.CodeTooLarge || !strings.Contains(got.Error.Message, "with 0 jobs listed, more than the server's limit of 200 bytes") {
		t.Errorf("a limit nothing fits: %+v, %v", got, err)
	}
	// A reply not to be cut (one job's) that does not fit is an error too.
	got, err = protocol.DecodeStatusReply(encodeStatus(rep, int64(len(full))-1, false), 64<<20)
	if err != nil || got.Error == nil || got.Error.Code != protocol.CodeTooLarge || !strings.Contains(got.Error.Message, "with 300 jobs listed") {
		t.Errorf("a reply not to be cut: %+v, %v", got, err)
	}
}

// Live, on a server that takes 32 KiB a message: the whole table of 150
// jobs does not fit, and the status reply lists what does; a request's
// limit lists that many, a huge one what fits; a negative limit is
// refused, naming it.
func TestStatus_ALiveReplyFitsTheServersLimitAndHonorsTheRequestsLimit(t *testing.T) {
	e := newEnv(t, 8, func(ec *EmbeddedConfig, s *ServiceConfig) {
		ec.MaxPayload = 32 << 10
		s.Policy = "shockwave"
		s.SnapshotRounds = 1 << 20
	})
	// Three clients: one may register 64 jobs at once.
	for k := range 3 {
		nc := e.client()
		for i := range 50 {
			if rep := register(t, nc, e.subj, newJob(fmt.Sprintf("job-%d-%02d", k, i), 1)); rep.Error != nil {
				t.Fatal(rep.Error)
			}
		}
	}
	nc := e.client()
	ask := func(req string) (*protocol.StatusReply, int) {
		t.Helper()
		m, err := nc.Request(e.subj.Status(), []byte(req), 5*time.Second)
		if err != nil {
			t.Fatalf("status %s: %v", req, err)
		}
		rep, err := protocol.DecodeStatusReply(m.Data, 64<<20)
		if err != nil {
			t.Fatalf("status reply: %v", err)
		}
		return rep, len(m.Data)
	}
	eventually(t, 10*time.Second, "a plan of the 150 jobs", func() bool {
		rep, _ := ask(`{"v":1,"limit":1}`)
		return rep.Plan != nil && len(rep.Plan.Explain) == 1 && rep.JobsTotal == 150 && rep.Jobs[0].State == "active"
	})
	rep, size := ask(`{"v":1}`)
	if rep.Error != nil || rep.JobsTotal != 150 || len(rep.Jobs) == 0 || len(rep.Jobs) >= 150 || size > 32<<10 {
		t.Fatalf("the whole table: %d jobs listed of %d in %d bytes (%v)", len(rep.Jobs), rep.JobsTotal, size, rep.Error)
	}
	for i := 1; i < len(rep.Jobs); i++ {
		if a, b := rhoOf(rep, rep.Jobs[i-1].Job), rhoOf(rep, rep.Jobs[i].Job); a < b {
			t.Fatalf("listed %s (ρ %v) before %s (ρ %v)", rep.Jobs[i-1].Job, a, rep.Jobs[i].Job, b)
		}
	}
	t.Logf("the whole table: %d of %d jobs in %d bytes", len(rep.Jobs), rep.JobsTotal, size)
	if rep, _ := ask(`{"v":1,"limit":3}`); len(rep.Jobs) != 3 || rep.JobsTotal != 150 || len(rep.Plan.Explain) != 3 {
		t.Errorf("limit 3: %d jobs of %d, %d explained", len(rep.Jobs), rep.JobsTotal, len(rep.Plan.Explain))
	}
	// One job's reply explains that job only: the whole plan would not fit.
	if rep, _ := ask(`{"v":1,"job":"job-1-07"}`); len(rep.Jobs) != 1 || rep.JobsTotal != 0 || len(rep.Plan.Explain) != 1 || rep.Plan.Explain[0].Job != "job-1-07" {
		t.Errorf("one job: %d jobs, jobs_total %d, %d explained", len(rep.Jobs), rep.JobsTotal, len(rep.Plan.Explain))
	}
	// A limit past the table (any client may ask) lists what fits, as none.
	if rep, size := ask(`{"v":1,"limit":4611686018427387904}`); rep.Error != nil || rep.JobsTotal != 150 || len(rep.Jobs) == 0 || size > 32<<10 {
		t.Errorf("limit 2^62: %d jobs of %d in %d bytes (%v)", len(rep.Jobs), rep.JobsTotal, size, rep.Error)
	}
	if rep, _ := ask(`{"v":1,"limit":-1}`); rep.Error == nil || rep.Error.Code != protocol.CodeBadRequest || !strings.Contains(rep.Error.Message, "limit") {
		t.Errorf("limit -1: %+v", rep.Error)
	}
}

func rhoOf(rep *protocol.StatusReply, job string) float64 {
	for _, e := range rep.Plan.Explain {
		if e.Job == job {
			return e.ProjectedRho
		}
	}
	return -1
}

// TestJobs_ATableBuiltIntoAnOldBufferIsTheFreshTable: the round summary's
// table, built into the buffer of an earlier (longer) one, encodes and
// digests as a fresh table does, the empty table included ([], not null:
// a replay compares the digest of a fresh one), and rows share no slice a
// later round changes.
func TestJobs_ATableBuiltIntoAnOldBufferIsTheFreshTable(t *testing.T) {
	p, err := policy.New("shockwave", policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	empty, err := NewCore(Config{GPUs: 4}, p)
	if err != nil {
		t.Fatal(err)
	}
	for _, got := range [][]JobStatus{empty.Jobs(), empty.AppendJobs(nil), empty.AppendJobs(make([]JobStatus, 3)[:0])} {
		if b, _ := json.Marshal(got); string(b) != "[]" {
			t.Fatalf("an empty table encodes as %s", b)
		}
	}
	c := plannedCore(t, topology.Uniform(2, 2), 9, "job-8")
	old := plannedCore(t, topology.Uniform(4, 4), 30, "job-3").Jobs()
	fresh := c.Jobs()
	reused := c.AppendJobs(old[:0])
	want, _ := json.Marshal(fresh)
	got, _ := json.Marshal(reused)
	d1, _ := digestOf(fresh, c.LastPlan())
	d2, _ := digestOf(reused, c.LastPlan())
	if string(got) != string(want) || d1 != d2 {
		t.Fatalf("the table built into an old buffer differs:\n%s\n%s", got, want)
	}
	held := 0
	for _, r := range fresh {
		if len(r.GPUs) > 0 {
			held++
		}
	}
	if held == 0 {
		t.Fatal("no job holds GPUs: the test shows nothing about shared grants")
	}
	if _, err := c.Tick(120); err != nil { // the next round replaces the grants
		t.Fatal(err)
	}
	if again, _ := json.Marshal(fresh); string(again) != string(want) {
		t.Fatalf("a round changed a table taken before it:\n%s\n%s", again, want)
	}
}
