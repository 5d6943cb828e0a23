package policy

import (
	"slices"
	"testing"
)

// TestBaselines_RunAJobThatDeclaredNoThroughput checks that every Gavel-round
// baseline eventually dispatches a job registered without a throughput (a
// live SDK job learns its rate only by running), and does not modify the
// snapshot it was given.
func TestBaselines_RunAJobThatDeclaredNoThroughput(t *testing.T) {
	for _, name := range []string{"gavel", "themis", "allox", "gandiva_fair", "mst", "ossp"} {
		t.Run(name, func(t *testing.T) {
			p, err := New(name, Options{})
			if err != nil {
				t.Fatal(err)
			}
			s := optSnap(2, 0, optJob{w: 1, theta: 0, rem: 1000}, optJob{w: 1, theta: 0, rem: 1000})
			for _, j := range s.Jobs {
				p.Admit(j)
			}
			plan, err := p.Allocate(s)
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range s.Jobs {
				if j.Throughput != 0 {
					t.Fatalf("snapshot modified: job %s throughput %g", j.ID, j.Throughput)
				}
			}
			if !slices.Contains(plan.Run, "0") || !slices.Contains(plan.Run, "1") {
				t.Fatalf("jobs without a declared throughput not dispatched on two free GPUs: run %v, %+v", plan.Run, plan.Explain)
			}
		})
	}
}
