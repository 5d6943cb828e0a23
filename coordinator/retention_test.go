package coordinator

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
)

// checkRetained fails when the Core keeps more ended and lost jobs than
// its bound, keeps any but the latest to leave, or the fold keeps an event
// budget or a submission of a job the Core forgot.
func checkRetained(t *testing.T, f *fold, keep int) (retired int) {
	t.Helper()
	c := f.core
	var last []uint64
	for _, j := range c.jobs {
		if retires(j.state) {
			retired++
			last = append(last, j.retiredAt)
		}
	}
	if retired > keep || retired != c.nRetired {
		t.Fatalf("%d ended or lost jobs kept (counted %d), bound %d", retired, c.nRetired, keep)
	}
	for _, at := range last {
		if at+uint64(keep) <= c.retireSeq && retired == keep {
			// a job that left more than keep retirements ago is only kept
			// when later ones came back
			n := 0
			for _, j := range c.jobs {
				if j.retiredAt > at {
					n++
				}
			}
			if n >= keep {
				t.Fatalf("a job retired at %d is kept behind %d later ones (bound %d)", at, n, keep)
			}
		}
	}
	for id := range f.budgets {
		if _, ok := c.jobs[id]; !ok {
			t.Fatalf("the fold keeps the event budget of %s, which the Core forgot", id)
		}
	}
	for id := range f.run.subs {
		if _, ok := c.jobs[id]; !ok {
			t.Fatalf("the fold keeps the submission of %s, which the Core forgot", id)
		}
	}
	return retired
}

// TestRetention_TheEarliestEndedJobsAreForgottenAndRestoresAgree: a
// history of 32 jobs over 14 rounds (completions, losses and returns) with
// at most 3 ended or lost jobs kept. After every record the Core keeps at
// most 3, the latest to leave, and the fold keeps no budget of a forgotten
// job; a fold restored from a snapshot taken anywhere forgets the same
// jobs (checkRestores compares every later outcome and the final state).
func TestRetention_TheEarliestEndedJobsAreForgottenAndRestoresAgree(t *testing.T) {
	cfg := historyConfig(8)
	cfg.KeepEnded = 3
	h := newHistoryOn(t, "shockwave", policy.Options{}, cfg, 42)
	h.onApply = func(_ int, _ record, _ *outcome) {
		if h.f.core == nil {
			return
		}
		if h.f.core.onForget == nil {
			t.Fatal("the fold did not hook the Core's forgetting")
		}
		checkRetained(t, h.f, 3)
	}
	checkRestores(t, h)
	if h.f.core.retireSeq <= 3 || len(h.f.core.jobs) >= len(h.jobs) {
		t.Fatalf("the history retired %d jobs and keeps %d of %d: nothing was forgotten", h.f.core.retireSeq, len(h.f.core.jobs), len(h.jobs))
	}
	t.Logf("%d retirements, %d of %d jobs kept", h.f.core.retireSeq, len(h.f.core.jobs), len(h.jobs))
}

// TestRetention_AForgottenJobsIdStartsANewJob: with one ended job kept,
// the first job's completion is forgotten once a second job ends; its
// events are then refused as an unknown job's, and a registration of its
// id starts a new job (pending) where an ended one would be refused.
func TestRetention_AForgottenJobsIdStartsANewJob(t *testing.T) {
	cfg := historyConfig(8)
	cfg.KeepEnded = 1
	h := newHistoryOn(t, "gavel", policy.Options{}, cfg, 1)
	reply := nats.Header{hdrReply: []string{"_INBOX.reply"}}
	regs := []protocol.Register{
		{V: protocol.Version, Job: "first", Model: "LM", Mode: "static", Workers: 1, BatchSize: 8, DatasetSize: 80, TotalSteps: 100},
		{V: protocol.Version, Job: "second", Model: "LM", Mode: "static", Workers: 1, BatchSize: 8, DatasetSize: 80, TotalSteps: 100},
	}
	done := func(id string, seq uint64) outcome {
		b := protocol.Batch{V: protocol.Version, Job: id, Events: []protocol.Event{{V: protocol.Version, Job: id, Seq: seq, Type: protocol.EventDone}}}
		return h.append(h.subj.Events(id), nil, mustJSON(t, b))
	}
	for _, r := range regs {
		if o := h.append(h.subj.Prefix+"."+logRegister, reply, mustJSON(t, r)); o.answer == nil || o.answer.Error != nil {
			t.Fatalf("register %s: %+v", r.Job, o.answer)
		}
	}
	done("first", 1)
	if o := h.append(h.subj.Prefix+"."+logRegister, reply, mustJSON(t, regs[0])); o.answer == nil || o.answer.Error == nil {
		t.Fatalf("an ended job registered again: %+v", o.answer)
	}
	done("second", 1)
	if _, ok := h.f.core.Job("first"); ok {
		t.Fatal("the first job is still kept with the bound at 1 and a later job ended")
	}
	if st, ok := h.f.core.Job("second"); !ok || st.State != string(Completed) {
		t.Fatalf("the second job: %+v %v, want kept and completed", st, ok)
	}
	if o := done("first", 2); o.accepted != 0 || len(o.rejected) == 0 {
		t.Fatalf("events of the forgotten job: accepted %d, rejected %v", o.accepted, o.rejected)
	}
	o := h.append(h.subj.Prefix+"."+logRegister, reply, mustJSON(t, regs[0]))
	if o.answer == nil || o.answer.Error != nil || o.answer.State != string(Pending) {
		t.Fatalf("the forgotten job's id registered again: %+v, want a new pending job", o.answer)
	}
	checkRetained(t, h.f, 1)
}

// TestRetention_ALogKeepsItsBoundAndRefusesAnother: a new log records the
// default bound; a coordinator that leaves it unset continues a log with
// its own, and one that asks for another is refused, naming the log's.
func TestRetention_ALogKeepsItsBoundAndRefusesAnother(t *testing.T) {
	e := newEnv(t, 1, func(_ *EmbeddedConfig, s *ServiceConfig) { s.KeepEnded = 7 })
	if got := e.svc.fold.cfg.KeepEnded; got != 7 {
		t.Fatalf("the log records %d ended jobs kept, want 7", got)
	}
	nc := e.stoppedConn()
	cfg := e.scfg
	cfg.KeepEnded = 8
	_, done, cancel := startService(t, nc, cfg)
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "ended jobs kept 7") {
			t.Fatalf("restart with --keep-ended 8 on a log of 7: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a coordinator asking for another bound than the log's still runs")
	}
	cancel()
	cfg.KeepEnded = 0
	svc, done, cancel := startService(t, nc, cfg)
	eventually(t, 20*time.Second, "the coordinator serves with the log's bound", func() bool { return svc.Health().OK })
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("run: %v", err)
	}
	if svc.fold.cfg.KeepEnded != 7 || svc.fold.core.cfg.KeepEnded != 7 {
		t.Fatalf("continuing the log: bound %d (core %d), want the log's 7", svc.fold.cfg.KeepEnded, svc.fold.core.cfg.KeepEnded)
	}
}

// startService runs a service with cfg on nc until cancel; done receives
// what Run returned.
func startService(t *testing.T, nc *nats.Conn, cfg ServiceConfig) (svc *Service, done <-chan error, cancel context.CancelFunc) {
	t.Helper()
	svc, err := NewService(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := make(chan error, 1)
	go func() { d <- svc.Run(ctx) }()
	return svc, d, cancel
}

// TestRetention_ADamagedOrderIsRefused: a state whose retention order
// contradicts itself is refused by name, whatever the bound.
func TestRetention_ADamagedOrderIsRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		hurt func(c *Core)
		want string
	}{
		{"a live job with a retirement", func(c *Core) {
			for _, j := range c.jobs {
				if !retires(j.state) {
					j.retiredAt = 1
					return
				}
			}
		}, "with retirement"},
		{"an ended job without one", func(c *Core) {
			for _, j := range c.jobs {
				if retires(j.state) {
					j.retiredAt = 0
					return
				}
			}
		}, "with retirement 0"},
		{"a retirement after the last", func(c *Core) {
			for _, j := range c.jobs {
				if retires(j.state) {
					j.retiredAt = c.retireSeq + 1
					return
				}
			}
		}, "after the last retirement"},
		{"two jobs at one retirement", func(c *Core) {
			var at uint64
			for _, j := range c.jobs {
				if retires(j.state) {
					if at == 0 {
						at = j.retiredAt
					} else {
						j.retiredAt = at
						return
					}
				}
			}
		}, "retired at"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHistory(t, "gavel", policy.Options{}, 8, 42)
			h.run(16, 12)
			c.hurt(h.f.core)
			if _, _, err := saveAndRestore(t, h); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("restore of a damaged order: %v, want an error naming %q", err, c.want)
			}
		})
	}
}

// TestRetention_AVersion3StateLoadsAndContinuesTheUninterruptedFold: a
// snapshot written before retention (Core state version 3, whose logs keep
// every ended job) restores, numbers its ended and lost jobs, and the
// restored fold gives the uninterrupted one's outcome for every later
// record and the same final state (as version 3 writes it).
func TestRetention_AVersion3StateLoadsAndContinuesTheUninterruptedFold(t *testing.T) {
	h := newHistory(t, "shockwave", policy.Options{}, 8, 42)
	var outs [][]byte
	var v3 []byte
	at, ticks := 0, 0
	h.onApply = func(i int, _ record, o *outcome) {
		outs = append(outs, outcomeBytes(o))
		if o.kind == kindTick {
			ticks++
		}
		if o.kind == kindPlan && ticks == 9 && v3 == nil {
			v3, at = encodeStateAs(t, h.f, 3), i
		}
	}
	h.run(14, 16)
	if v3 == nil || h.f.core.retireSeq == 0 {
		t.Fatalf("no version-3 snapshot, or no job ended (%d retirements)", h.f.core.retireSeq)
	}
	s, err := DecodeStateSnapshot(v3)
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.restore(h.subj, protocol.DefaultMaxMessageBytes)
	if err != nil {
		t.Fatalf("restoring a version-3 state: %v", err)
	}
	if f.core.nRetired == 0 {
		t.Fatal("the version-3 state's ended jobs were not numbered")
	}
	for k := at + 1; k < len(h.records); k++ {
		o := f.apply(h.records[k])
		if got := outcomeBytes(&o); string(got) != string(outs[k-1]) {
			t.Fatalf("restored from version 3, record %d gives\n%s\nuninterrupted\n%s", k+1, got, outs[k-1])
		}
	}
	if a, b := encodeStateAs(t, f, 3), encodeStateAs(t, h.f, 3); string(a) != string(b) {
		t.Fatal("restored from version 3, the final state differs")
	}
}

// TestRetention_TheEndedCounterCountsWhatTheTableForgets: with one ended
// job kept, three completed jobs leave one completed row in the table
// (shockwave_jobs) and count three in shockwave_jobs_ended_total, and the
// registration check (which lets known jobs past the job cap) forgets the
// two the table forgot.
func TestRetention_TheEndedCounterCountsWhatTheTableForgets(t *testing.T) {
	e := newEnv(t, 1, func(_ *EmbeddedConfig, s *ServiceConfig) { s.KeepEnded = 1 })
	nc := e.client()
	for _, id := range []string{"r1", "r2", "r3"} {
		register(t, nc, e.subj, newJob(id, 1))
		publishBatch(t, nc, e.subj, id, protocol.Event{Type: protocol.EventDone, Seq: 1, StepsDone: 1_000_000, TotalSteps: 1_000_000, BatchSize: 32})
	}
	eventually(t, 10*time.Second, "three completions counted", func() bool {
		return counterValue(t, e.reg, "shockwave_jobs_ended_total", "state", "completed") == 3
	})
	eventually(t, 10*time.Second, "one completed job in the table", func() bool {
		n := 0
		for _, j := range status(t, nc, e.subj).Jobs {
			if j.State == string(Completed) {
				n++
			}
		}
		return n == 1
	})
	known := 0
	e.svc.admit.known.Range(func(k, _ any) bool { known++; return true })
	if known > 1 {
		t.Errorf("the service's registration check still knows %d jobs, the table keeps 1", known)
	}
}

// TestRetention_AConfigurationRecordWithANegativeBoundIsRefused: a damaged
// or forged configuration record asking for a negative number of ended
// jobs kept configures nothing, and the error names the setting.
func TestRetention_AConfigurationRecordWithANegativeBoundIsRefused(t *testing.T) {
	subj := protocol.Subjects{Prefix: protocol.DefaultPrefix}
	f := newFold(subj, protocol.DefaultMaxMessageBytes)
	rec, err := newConfigRecord(historyConfig(8), "gavel", policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec.KeepEnded = -1
	o := f.apply(record{Seq: 1, Time: time.Unix(1_700_000_000, 0), Subject: subj.Prefix + "." + logConfig, Data: mustJSON(t, rec)})
	if f.core != nil || o.err == nil || !strings.Contains(o.err.Error(), "ended jobs to keep") {
		t.Fatalf("a record keeping -1 ended jobs: core %v, error %v", f.core != nil, o.err)
	}
}
