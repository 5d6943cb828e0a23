package coordinator

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/shockwave-sched/shockwave/protocol"
)

func TestService_RegisterReturnsTheJobsIdentityAndRoundLength(t *testing.T) {
	e := newEnv(t, 2, nil)
	nc := e.client()
	rep := register(t, nc, e.subj, newJob("j1", 1))
	if rep.Error != nil {
		t.Fatal(rep.Error)
	}
	if err := rep.Validate(); err != nil {
		t.Fatal(err)
	}
	if rep.Job != "j1" || rep.RoundSeconds != testRound || rep.Resumed || rep.LastSeq != 0 {
		t.Errorf("reply %+v", rep)
	}
	if rep.Now < 1.6e9 {
		t.Errorf("coordinator clock %g is not Unix seconds", rep.Now)
	}
}

func TestService_BadRegistrationsGetErrorRepliesAndChangeNothing(t *testing.T) {
	e := newEnv(t, 2, func(_ *EmbeddedConfig, s *ServiceConfig) { s.MaxMessageBytes = 4096 })
	nc := e.client()
	good, _ := json.Marshal(newJob("j1", 1))
	wide, _ := json.Marshal(newJob("wide", 3))
	cases := []struct {
		name string
		data string
		code protocol.ErrorCode
	}{
		{"malformed JSON", `{"v":1,"job":`, protocol.CodeBadRequest},
		{"unknown version", strings.Replace(string(good), `"v":1`, `"v":2`, 1), protocol.CodeVersion},
		{"wrong field type", strings.Replace(string(good), `"workers":1`, `"workers":"one"`, 1), protocol.CodeBadRequest},
		{"NaN-like absurd value", strings.Replace(string(good), `"throughput":10`, `"throughput":1e300`, 1), protocol.CodeBadRequest},
		{"negative steps", strings.Replace(string(good), `"total_steps":1000000`, `"total_steps":-5`, 1), protocol.CodeBadRequest},
		{"oversized", string(good[:len(good)-1]) + `,"name":"` + strings.Repeat("x", 5000) + `"}`, protocol.CodeTooLarge},
		{"gang wider than the cluster", string(wide), protocol.CodeRejected},
	}
	for _, c := range cases {
		rep := registerRaw(t, nc, e.subj, []byte(c.data))
		if rep.Error == nil || rep.Error.Code != c.code {
			t.Errorf("%s: reply %+v, want code %s", c.name, rep, c.code)
		}
	}
	if st := status(t, nc, e.subj); len(st.Jobs) != 0 {
		t.Errorf("rejected registrations left jobs: %+v", st.Jobs)
	}
	if rep := register(t, nc, e.subj, newJob("j1", 1)); rep.Error != nil {
		t.Fatal(rep.Error)
	}
	conflict := newJob("j1", 2)
	if rep := register(t, nc, e.subj, conflict); rep.Error == nil || rep.Error.Code != protocol.CodeConflict {
		t.Errorf("a conflicting registration: %+v", rep)
	}
	if rep := register(t, nc, e.subj, newJob("j1", 1)); rep.Error != nil || !rep.Resumed {
		t.Errorf("the same registration again must resume: %+v", rep)
	}
}

func TestService_AJobKeepsItsLeaseAcrossConsecutiveRounds(t *testing.T) {
	e := newEnv(t, 1, nil)
	nc := e.client()
	leases := watchLeases(t, nc, e.subj.Lease("solo"))
	register(t, nc, e.subj, newJob("solo", 1))
	seq, done := uint64(0), int64(0)
	eventually(t, 10*time.Second, "three RUN leases", func() bool {
		seq++
		done += 10
		publishBatch(t, nc, e.subj, "solo", progress(seq, 10, done, 0.01))
		n := 0
		for _, l := range leases.all() {
			if l.Action == protocol.Run {
				n++
			}
		}
		return n >= 3
	})
	ls := leases.all()
	if ls[0].Action != protocol.Run || ls[0].Extension {
		t.Errorf("first lease %+v: want a fresh RUN", ls[0])
	}
	for _, l := range ls[1:3] {
		if l.Action != protocol.Run || !l.Extension || l.Workers[0] != 0 {
			t.Errorf("lease %+v: want an extension on GPU 0", l)
		}
		if l.Expiry <= l.Start+testRound {
			t.Errorf("lease %+v expires before the next round plus grace", l)
		}
	}
}

func TestService_BadEventsAreCountedAndDroppedWithoutChangingState(t *testing.T) {
	e := newEnv(t, 1, func(_ *EmbeddedConfig, s *ServiceConfig) { s.MaxMessageBytes = 4096 })
	nc := e.client()
	register(t, nc, e.subj, newJob("j", 1))
	eventually(t, 10*time.Second, "the job is admitted", func() bool {
		r, _ := jobRow(status(t, nc, e.subj), "j")
		return r.State == "active"
	})
	publishBatch(t, nc, e.subj, "j", progress(5, 100, 100, 1))
	eventually(t, 5*time.Second, "the good batch is applied", func() bool {
		r, _ := jobRow(status(t, nc, e.subj), "j")
		return r.LastSeq == 5
	})
	before, _ := jobRow(status(t, nc, e.subj), "j")
	raw := func(job, data string) {
		if err := nc.Publish(e.subj.Events(job), []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	raw("j", `{"v":1,"job":"j","events":[`)                      // malformed
	raw("j", `{"v":9,"job":"j","events":[]}`)                    // version
	raw("j", `{"v":1,"job":"j","events":[{"v":1,"seq":"six"}]}`) // wrong type
	raw("j", `{"v":1,"job":"j","events":[{"v":1,"type":"progress","job":"j","seq":6,"steps":-1,"steps_done":1,"total_steps":9,"batch_size":1}]}`)
	raw("j", `{"v":1,"job":"j","events":[{"v":1,"type":"progress","job":"j","seq":6,"elapsed":1e999,"steps_done":1,"total_steps":9,"batch_size":1}]}`)
	raw("j", `{"v":1,"job":"j","events":[{"pad":"`+strings.Repeat("x", 5000)+`"}]}`) // oversized
	publishBatch(t, nc, e.subj, "j", progress(3, 1, 1, 1))                           // out of order
	publishBatch(t, nc, e.subj, "ghost", progress(1, 1, 1, 1))                       // unknown job
	data, _ := json.Marshal(protocol.Batch{V: 1, Job: "other", Events: []protocol.Event{{V: 1, Type: "done", Job: "other", Seq: 9}}})
	raw("j", string(data)) // a batch of another job on j's subject
	want := map[string]float64{"malformed": 3, "version": 1, "invalid": 1, "too_large": 1, "out_of_order": 1, "unknown_job": 1, "subject_mismatch": 1}
	eventually(t, 5*time.Second, "every bad batch is counted", func() bool {
		for reason, n := range want {
			if counterValue(t, e.reg, "shockwave_events_rejected_total", "reason", reason) != n {
				return false
			}
		}
		return true
	})
	after, _ := jobRow(status(t, nc, e.subj), "j")
	if after.LastSeq != before.LastSeq || after.StepsDone != before.StepsDone || after.RunTime != before.RunTime {
		t.Errorf("state changed: before %+v, after %+v", before, after)
	}
}

func TestService_ASilentJobIsLostItsGPUGoesToAnotherAndItResumesWithItsProgress(t *testing.T) {
	// Gavel's round mechanism re-allocates at most every 1000 s, so a job
	// admitted later waits that long for GPUs; the Shockwave policy does not.
	e := newEnv(t, 1, func(_ *EmbeddedConfig, s *ServiceConfig) { s.Policy = "shockwave" })
	nc := e.client()
	aLeases := watchLeases(t, nc, e.subj.Lease("a"))
	register(t, nc, e.subj, newJob("a", 1))
	eventually(t, 10*time.Second, "a runs", func() bool {
		_, ok := aLeases.find(func(l *protocol.Lease) bool { return l.Action == protocol.Run })
		return ok
	})
	publishBatch(t, nc, e.subj, "a", progress(1, 500, 500, 0.05))
	register(t, nc, e.subj, newJob("b", 1))
	// b keeps reporting progress; a falls silent.
	seq := uint64(0)
	bTalks := func() {
		seq++
		publishBatch(t, nc, e.subj, "b", progress(seq, 10, int64(seq)*10, 0.01))
		time.Sleep(10 * time.Millisecond)
	}
	eventually(t, 10*time.Second, "a is lost", func() bool {
		bTalks()
		r, _ := jobRow(status(t, nc, e.subj), "a")
		return r.State == "lost"
	})
	row, _ := jobRow(status(t, nc, e.subj), "a")
	if row.StepsDone != 500 || len(row.GPUs) != 0 {
		t.Errorf("lost job row %+v", row)
	}
	// The job is lost when its round begins; the SUSPEND lease goes out
	// when the round's plan closes it, a moment later.
	eventually(t, 10*time.Second, "a gets its revocation", func() bool {
		_, ok := aLeases.find(func(l *protocol.Lease) bool { return l.Action != protocol.Run })
		return ok
	})
	if l, ok := aLeases.find(func(l *protocol.Lease) bool { return l.Action != protocol.Run }); !ok {
		t.Errorf("a got no SUSPEND lease: %v", aLeases)
	} else if l.Action != protocol.Suspend {
		t.Errorf("a's revocation %+v", l)
	}
	eventually(t, 10*time.Second, "b holds the GPU", func() bool {
		bTalks()
		r, _ := jobRow(status(t, nc, e.subj), "b")
		return len(r.GPUs) == 1
	})
	// a comes back (its SDK restarted): it re-registers and learns where it was.
	rep := register(t, nc, e.subj, newJob("a", 1))
	if rep.Error != nil || !rep.Resumed || rep.LastSeq != 1 || rep.StepsDone != 500 || rep.State != "pending" {
		t.Errorf("resume reply %+v", rep)
	}
	publishBatch(t, nc, e.subj, "a", heartbeat(rep.LastSeq+1, rep.StepsDone))
	eventually(t, 10*time.Second, "a is active again with its progress", func() bool {
		r, _ := jobRow(status(t, nc, e.subj), "a")
		return r.State == "active" && r.StepsDone == 500 && r.RunTime == 0.05
	})
	// The gauges follow when the round that admitted it closes (its plan
	// record), a moment after the status shows it.
	eventually(t, 10*time.Second, "the active jobs gauge says 2", func() bool {
		return counterValue(t, e.reg, "shockwave_jobs", "state", "active") == 2
	})
}

func TestService_StatusReturnsTheJobTableAndTheLastPlan(t *testing.T) {
	e := newEnv(t, 2, nil)
	nc := e.client()
	register(t, nc, e.subj, newJob("x", 1))
	register(t, nc, e.subj, newJob("y", 2))
	eventually(t, 10*time.Second, "a plan with both jobs", func() bool {
		st := status(t, nc, e.subj)
		return st.Plan != nil && len(st.Plan.Explain) == 2
	})
	st := status(t, nc, e.subj)
	if st.Policy != "gandiva_fair" || st.GPUs != 2 || st.RoundSeconds != testRound || st.Recovering || st.LogSeq == 0 {
		t.Errorf("status header %+v", st)
	}
	if len(st.Jobs) != 2 || st.Jobs[0].Job != "x" || st.Jobs[1].Job != "y" {
		t.Errorf("job table %+v", st.Jobs)
	}
	m, err := nc.Request(e.subj.Status(), []byte(`{"v":1,"job":"y"}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	one, err := protocol.DecodeStatusReply(m.Data, 1<<20)
	if err != nil || len(one.Jobs) != 1 || one.Jobs[0].Job != "y" {
		t.Errorf("status of one job: %+v, %v", one, err)
	}
	m, err = nc.Request(e.subj.Status(), []byte(`{"v":3}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var bad protocol.StatusReply
	if err := json.Unmarshal(m.Data, &bad); err != nil || bad.Error == nil || bad.Error.Code != protocol.CodeVersion {
		t.Errorf("status request of version 3: %s", m.Data)
	}
}
