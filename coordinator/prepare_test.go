package coordinator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
)

// TestPrepare_PreparedAdmissionsGiveWhatPlainOnesGive: a Core whose
// policy prepares each job at its registration (policy.Preparer) plans,
// leases and saves exactly what a Core that drops every preparation
// does, through jobs registered before the first boundary, jobs
// registered while a round is open (not prepared: the policy belongs to
// the solve), a pending job whose batch size and length changed before
// its admission (its preparation no longer matches) and a pending job
// that ended before it.
func TestPrepare_PreparedAdmissionsGiveWhatPlainOnesGive(t *testing.T) {
	var cores [2]*Core // 0 prepares, 1 drops the preparations
	for i := range cores {
		pol, err := policy.New("shockwave", policy.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if cores[i], err = NewCore(Config{GPUs: 8, RoundSeconds: 60, MaxFailedLeases: -1}, pol); err != nil {
			t.Fatal(err)
		}
	}
	seq, done := map[string]uint64{}, map[string]int64{}
	register := func(now float64, from, to int, cs ...*Core) {
		if cs == nil {
			cs = cores[:]
		}
		for i := from; i < to; i++ {
			r := newJob(fmt.Sprintf("job-%02d", i), 1+i%3/2)
			r.TotalSteps, r.Throughput = int64(20_000+3_000*i), float64(5+i%4)
			for _, c := range cs {
				if err := c.Register(now, &r); err != nil {
					t.Fatal(err)
				}
			}
			seq[r.Job] = 0
		}
	}
	deliver := func(now float64, e protocol.Event) {
		seq[e.Job]++
		e.V, e.Seq = protocol.Version, seq[e.Job]
		for _, c := range cores {
			if _, err := c.Deliver(now, &e); err != nil {
				t.Fatalf("%s: %v", e.Job, err)
			}
		}
	}
	prepared := func() (n int) {
		for _, j := range cores[0].pending {
			if j.prepared != nil {
				n++
			}
		}
		return n
	}
	register(1, 0, 12)
	if n := prepared(); n != 12 {
		t.Fatalf("%d of 12 registered jobs prepared", n)
	}
	deliver(2, protocol.Event{Job: "job-03", Type: protocol.EventBatchSize, StepsDone: 0, TotalSteps: 11_500, BatchSize: 64})
	deliver(3, protocol.Event{Job: "job-04", Type: protocol.EventDone})
	for k := range 6 {
		now := 60 * float64(k+1)
		for _, j := range cores[1].pending {
			j.prepared = nil
		}
		var rounds [2][]byte
		for i, c := range cores {
			open, err := c.BeginTick(now, nil)
			if err != nil {
				t.Fatal(err)
			}
			if i == 0 && k == 0 {
				if n := len(open.prepared); n != 11 {
					t.Fatalf("the first boundary admits %d jobs, want 11", n)
				}
			}
			plan, solveErr := open.Solve()
			if k == 2 { // registrations folded while the round is open
				register(now+1, 16, 20, c)
				if n := prepared(); i == 0 && n != 0 {
					t.Fatalf("%d jobs prepared while the round was open", n)
				}
			}
			r, err := c.EndTick(plan, solveErr)
			if err != nil {
				t.Fatal(err)
			}
			rounds[i], _ = json.Marshal(r)
		}
		if !bytes.Equal(rounds[0], rounds[1]) {
			t.Fatalf("round %d differs:\nprepared %s\nplain    %s", k, rounds[0], rounds[1])
		}
		var r Round
		if err := json.Unmarshal(rounds[0], &r); err != nil {
			t.Fatal(err)
		}
		for _, l := range r.Leases { // the jobs granted GPUs make progress
			if l.Action == protocol.Run {
				done[l.Job] += 300
				deliver(now+50, protocol.Event{Job: l.Job, Type: protocol.EventProgress, Steps: 300, Elapsed: 50, Throughput: 6,
					StepsDone: done[l.Job], TotalSteps: 1_000_000, BatchSize: 32})
			}
		}
		if k == 3 {
			register(now+55, 20, 24) // between rounds: prepared again
			if n := prepared(); n != 4 {
				t.Fatalf("%d of 4 jobs registered between rounds prepared", n)
			}
		}
		if !bytes.Equal(coreState(t, cores[0]), coreState(t, cores[1])) {
			t.Fatalf("after round %d the states (Core and policy) differ", k)
		}
	}
	if got := len(cores[0].active); got != 19 {
		t.Fatalf("%d jobs active, want 19", got)
	}
}
