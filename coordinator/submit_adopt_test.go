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
