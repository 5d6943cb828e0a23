package policy

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// tiresiasRound builds a snapshot of jobs (id → width, admission order)
// at time now.
func tiresiasRound(round int, now float64, gpus int, jobs ...*Job) *Snapshot {
	return &Snapshot{Round: round, Now: now, GPUs: gpus, RoundSeconds: 60, Jobs: jobs}
}

func tiresiasJobOf(id string, seq, workers int, admit float64) *Job {
	return &Job{ID: id, Seq: seq, Model: "m", Workers: workers, AdmitTime: admit, TotalSteps: 100, LastRun: -1}
}

func mustTiresias(t *testing.T, thresholds ...float64) *Tiresias {
	t.Helper()
	p, err := NewTiresias(TiresiasConfig{Thresholds: thresholds})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func mustAllocate(t *testing.T, p Policy, s *Snapshot) []string {
	t.Helper()
	plan, err := p.Allocate(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Explain) != len(s.Jobs) || !plan.Solved {
		t.Fatalf("plan %+v: want one explanation per job and Solved", plan)
	}
	return plan.Run
}

// TestTiresias_BackfillsPastAWideJobThenPreemptsOnDemotion follows the
// spec's example: a job past its threshold moves to the second queue and
// loses its GPUs to first-queue jobs, and a narrow job later in a queue
// takes GPUs a wider job ahead of it cannot use.
func TestTiresias_BackfillsPastAWideJobThenPreemptsOnDemotion(t *testing.T) {
	p := mustTiresias(t, 240) // GPU-seconds
	old, wide, small := tiresiasJobOf("old", 0, 2, 0), tiresiasJobOf("wide", 1, 4, 0), tiresiasJobOf("small", 2, 1, 0)
	for _, j := range []*Job{old, wide, small} {
		p.Admit(j)
	}
	steps := []struct {
		now  float64
		want []string
	}{
		{0, []string{"old", "small"}},    // wide (4) does not fit beside old (2): small backfills
		{60, []string{"old", "small"}},   // old: 2 GPUs × 60 s = 120 GPU-s
		{120, []string{"wide"}},          // old: 240 ≥ 240: demoted; wide takes all 4, small is preempted
		{180, []string{"small", "old"}},  // wide: 4 × 60 = 240: demoted behind old
		{240, []string{"small", "old"}},  // small: 180 GPU-s after 3 granted minutes
		{300, []string{"old", "small"}},  // small: 240: demoted behind wide; queue 1 is old, wide, small
		{1000, []string{"old", "small"}}, // the last queue: no further demotion, FIFO for ever
	}
	for k, st := range steps {
		got := mustAllocate(t, p, tiresiasRound(k, st.now, 4, old, wide, small))
		if !slices.Equal(got, st.want) {
			t.Fatalf("at %v s: runs %v, want %v", st.now, got, st.want)
		}
	}
}

// TestTiresias_QueuesAreFirstInFirstOut: a job that arrives after another
// in the same queue waits behind it, whatever their attained service.
func TestTiresias_QueuesAreFirstInFirstOut(t *testing.T) {
	p := mustTiresias(t)
	a, b := tiresiasJobOf("a", 0, 2, 0), tiresiasJobOf("b", 1, 2, 60)
	p.Admit(a)
	mustAllocate(t, p, tiresiasRound(0, 0, 2, a))
	p.Admit(b)
	for k := 1; k < 5; k++ {
		if got := mustAllocate(t, p, tiresiasRound(k, float64(60*k), 2, a, b)); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("round %d: %v, want a ahead of the later b in queue 0", k, got)
		}
	}
}

// TestTiresias_ThreeQueuesDemoteInTurn: with two thresholds a job passes
// through three queues; a newcomer to queue 0 goes first.
func TestTiresias_ThreeQueuesDemoteInTurn(t *testing.T) {
	p := mustTiresias(t, 60, 600)
	a := tiresiasJobOf("a", 0, 1, 0)
	p.Admit(a)
	mustAllocate(t, p, tiresiasRound(0, 0, 1, a))
	mustAllocate(t, p, tiresiasRound(1, 60, 1, a)) // a: 60: queue 1
	b := tiresiasJobOf("b", 1, 1, 60)
	p.Admit(b)
	if got := mustAllocate(t, p, tiresiasRound(2, 120, 1, a, b)); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("b in queue 0 should preempt a in queue 1: %v", got)
	}
	if got := mustAllocate(t, p, tiresiasRound(3, 180, 1, a, b)); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("b (60 GPU-s) joins queue 1 behind a: %v", got)
	}
	if p.jobs["a"].queue != 1 || p.jobs["b"].queue != 1 {
		t.Fatalf("queues: a %d, b %d", p.jobs["a"].queue, p.jobs["b"].queue)
	}
	mustAllocate(t, p, tiresiasRound(4, 720, 1, a, b)) // a: 120 + 540 = 660 ≥ 600: queue 2
	if p.jobs["a"].queue != 2 {
		t.Fatalf("a after 600 GPU-s is in queue %d, want 2", p.jobs["a"].queue)
	}
}

// TestTiresias_JobsLeftOutOfASnapshotAttainNothingWhileAbsent: a job absent from a
// round (its node away) accrues no service for the time it was absent.
func TestTiresias_JobsLeftOutOfASnapshotAttainNothingWhileAbsent(t *testing.T) {
	p := mustTiresias(t)
	a := tiresiasJobOf("a", 0, 1, 0)
	p.Admit(a)
	mustAllocate(t, p, tiresiasRound(0, 0, 1, a))
	mustAllocate(t, p, tiresiasRound(1, 60, 1))
	mustAllocate(t, p, tiresiasRound(2, 10000, 1, a))
	if got := p.jobs["a"].executed; got != 60 {
		t.Fatalf("granted time %v, want the 60 s before it left", got)
	}
}

// TestTiresias_RejectsGangsWiderThanTheCluster: bad input is an error
// naming the job.
func TestTiresias_RejectsGangsWiderThanTheCluster(t *testing.T) {
	p := mustTiresias(t)
	j := tiresiasJobOf("huge", 0, 8, 0)
	p.Admit(j)
	if _, err := p.Allocate(tiresiasRound(0, 0, 4, j)); err == nil || !strings.Contains(err.Error(), "huge") {
		t.Fatalf("error %v", err)
	}
}

func TestTiresias_ConfigurationErrorsNameTheField(t *testing.T) {
	for _, raw := range []string{`{"thresholds_gpu_seconds":[0]}`, `{"thresholds_gpu_seconds":[10,5]}`, `{"threshold":[10]}`, `[1]`} {
		_, err := New("tiresias", Options{Config: json.RawMessage(raw)})
		if err == nil || !strings.Contains(err.Error(), "tiresias") {
			t.Errorf("config %s: error %v", raw, err)
		}
	}
	p, err := New("tiresias", Options{Config: json.RawMessage(`{"thresholds_gpu_seconds":[100,1000]}`)})
	if err != nil || len(p.(*Tiresias).cfg.Thresholds) != 2 {
		t.Fatalf("valid config: %v", err)
	}
}

// TestTiresias_RestoredStateContinuesIdentically: a policy restored from
// its state mid-run makes the same plans as the original, and damaged or
// foreign state is refused without changing the policy.
func TestTiresias_RestoredStateContinuesIdentically(t *testing.T) {
	jobs := []*Job{tiresiasJobOf("a", 0, 2, 0), tiresiasJobOf("b", 1, 4, 0), tiresiasJobOf("c", 2, 1, 0), tiresiasJobOf("d", 3, 3, 0)}
	orig := mustTiresias(t, 300, 1200)
	for _, j := range jobs {
		orig.Admit(j)
	}
	var state []byte
	var restored *Tiresias
	for k := range 40 {
		s := tiresiasRound(k, float64(60*k), 4, jobs...)
		want := mustAllocate(t, orig, s)
		if restored != nil {
			if got := mustAllocate(t, restored, s); !slices.Equal(got, want) {
				t.Fatalf("round %d: restored runs %v, original %v", k, got, want)
			}
		}
		if k == 7 {
			state = orig.MarshalState()
			restored = mustTiresias(t, 300, 1200)
			if err := restored.UnmarshalState(state); err != nil {
				t.Fatal(err)
			}
			if string(restored.MarshalState()) != string(state) {
				t.Fatal("state does not survive a restore byte for byte")
			}
		}
	}
	fresh := mustTiresias(t, 300, 1200)
	for _, bad := range [][]byte{state[:len(state)-3], append(state[:len(state):len(state)], 0), []byte("junk")} {
		if err := fresh.UnmarshalState(bad); err == nil {
			t.Errorf("damaged state of %d bytes accepted", len(bad))
		}
	}
	if len(fresh.jobs) != 0 {
		t.Fatal("a refused state changed the policy")
	}
	if orig.jobs["b"].queue != 2 {
		t.Fatalf("b ended in queue %d; the test wants one job in the third queue", orig.jobs["b"].queue)
	}
	if err := mustTiresias(t).UnmarshalState(orig.MarshalState()); err == nil || !strings.Contains(err.Error(), "range") {
		t.Errorf("a state with queues the configuration lacks: %v", err)
	}
	if err := fresh.UnmarshalState(NewGavelRound(NewMaxMinFairness()).MarshalState()); err == nil {
		t.Error("gavel state accepted")
	}
}

// TestTiresias_AJobsReportsDoNotMoveItInTheQueues: service is the
// coordinator's granted time, so a job that reports no progress, fails
// its leases or reports absurd progress is demoted exactly like an honest
// one.
func TestTiresias_AJobsReportsDoNotMoveItInTheQueues(t *testing.T) {
	honest, liar := mustTiresias(t, 120), mustTiresias(t, 120)
	a := tiresiasJobOf("a", 0, 1, 0)
	honest.Admit(a)
	liar.Admit(a)
	for k := range 5 {
		s := tiresiasRound(k, float64(60*k), 1, a)
		h, l := mustAllocate(t, honest, s), mustAllocate(t, liar, s)
		if !slices.Equal(h, l) {
			t.Fatalf("round %d: honest %v, liar %v", k, h, l)
		}
		honest.Observe("a", 60, 60)
		liar.Observe("a", 0, 0)
		liar.Fail("a")
		liar.Observe("a", -1e18, 1<<40)
	}
	if string(honest.MarshalState()) != string(liar.MarshalState()) {
		t.Fatal("reports changed the policy's state")
	}
}
