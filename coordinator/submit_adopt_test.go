package coordinator

import (
	"testing"

	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
)

// TestSubmit_AnAdoptedJobKeepsItsAllocationInTheGavelRoundBaselines: under
// the Gavel round mechanism with the original reset rule (re-allocation at
// most every MinResetSeconds, ReallocateOnChange off), two submitted jobs
// granted the two GPUs at a reset keep running after their processes
// register. Adoption updates the job in the policy (policy.Updater); a
// Remove and Admit had dropped its allocation, deficit and time, leaving
// both GPUs idle until the next reset, 1,000 s later.
func TestSubmit_AnAdoptedJobKeepsItsAllocationInTheGavelRoundBaselines(t *testing.T) {
	for _, name := range []string{"max_min_fairness", "gandiva_fair", "themis", "allox"} {
		t.Run(name, func(t *testing.T) {
			pol, err := policy.New(name, policy.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := pol.(policy.Updater); !ok {
				t.Fatalf("%s does not take updates", name)
			}
			const delta = 5.0
			c, err := NewCore(Config{GPUs: 2, RoundSeconds: delta}, pol)
			if err != nil {
				t.Fatal(err)
			}
			ids := []string{"a", "b"}
			for _, id := range ids {
				if err := c.Submit(0, &protocol.Submit{V: protocol.Version, Job: id, Command: []string{"train"}, Workers: 1}); err != nil {
					t.Fatal(err)
				}
			}
			seq, done, enrolled := map[string]uint64{}, map[string]int64{}, map[string]bool{}
			for k := range 8 {
				now := 10 + float64(k)*delta // the first reset is not at time 0 (GavelRound resets again after one at 0)
				r, err := c.Tick(now)
				if err != nil {
					t.Fatal(err)
				}
				running := map[string]bool{}
				for _, l := range r.Leases {
					if l.Action == protocol.Run {
						running[l.Job] = true
					}
				}
				if len(running) != 2 {
					t.Fatalf("round %d: running %v, want both jobs on the two GPUs", k, running)
				}
				for _, id := range ids {
					if !enrolled[id] { // the agent started its process: it registers
						reg := newJob(id, 1)
						if _, err := c.Enroll(now+0.5, &reg); err != nil {
							t.Fatalf("round %d: %s registers: %v", k, id, err)
						}
						enrolled[id] = true
					}
				}
				for _, id := range ids {
					seq[id]++
					done[id] += 100 * int64(delta)
					ev := progress(0, 100*int64(delta), done[id], delta)
					ev.V, ev.Job, ev.Seq = protocol.Version, id, seq[id]
					if _, err := c.Deliver(now+1, &ev); err != nil {
						t.Fatalf("round %d: %s: %v", k, id, err)
					}
				}
			}
		})
	}
}

// TestSubmit_AnAdoptedJobKeepsItsPlaceInTiresias: two submitted jobs on one
// GPU under Tiresias; the first granted keeps the GPU after its process
// registers. Adoption updates it in place (policy.Updater); a Remove and
// Admit had put it behind the waiting job in its queue, so the job it had
// just started was suspended a round later.
func TestSubmit_AnAdoptedJobKeepsItsPlaceInTiresias(t *testing.T) {
	pol, err := policy.New("tiresias", policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const delta = 5.0
	c, err := NewCore(Config{GPUs: 1, RoundSeconds: delta}, pol)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if err := c.Submit(0, &protocol.Submit{V: protocol.Version, Job: id, Command: []string{"train"}, Workers: 1}); err != nil {
			t.Fatal(err)
		}
	}
	var first string
	var seq uint64
	var done int64
	for k := range 4 {
		now := 10 + float64(k)*delta
		r, err := c.Tick(now)
		if err != nil {
			t.Fatal(err)
		}
		var running []string
		for _, l := range r.Leases {
			if l.Action == protocol.Run {
				running = append(running, l.Job)
			}
		}
		if len(running) != 1 {
			t.Fatalf("round %d: running %v, want one job on the GPU", k, running)
		}
		if k == 0 {
			first = running[0]
			reg := newJob(first, 1) // the agent started its process: it registers
			if _, err := c.Enroll(now+0.5, &reg); err != nil {
				t.Fatal(err)
			}
		} else if running[0] != first {
			t.Fatalf("round %d: %s runs, want %s, which started in round 0, to keep the GPU", k, running[0], first)
		}
		seq++
		done += 100 * int64(delta)
		ev := progress(0, 100*int64(delta), done, delta)
		ev.V, ev.Job, ev.Seq = protocol.Version, first, seq
		if _, err := c.Deliver(now+1, &ev); err != nil {
			t.Fatalf("round %d: %v", k, err)
		}
	}
}
