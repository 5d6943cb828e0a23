package policy

import (
	"slices"
	"testing"
)

// TestShockwave_AChangedGangWidthReplansAtTheNewWidth: jobs whose width
// changes between rounds (elastic jobs of the Pollux adapter) are re-planned
// at once at the new width: two 4-wide jobs on 4 GPUs take turns, and once
// both are 2 wide they run together.
func TestShockwave_AChangedGangWidthReplansAtTheNewWidth(t *testing.T) {
	cfg := DefaultShockwaveConfig()
	cfg.Info = InfoOnline
	p, err := NewShockwave(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a, b := onlineJob("a", 50000, false), onlineJob("b", 50000, false)
	a.Seq, b.Seq = 0, 1
	a.Workers, b.Workers = 4, 4
	p.Admit(a)
	p.Admit(b)
	plan, err := p.Allocate(&Snapshot{Round: 0, GPUs: 4, RoundSeconds: 120, Jobs: []*Job{a, b}})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Run) != 1 {
		t.Fatalf("two 4-wide jobs on 4 GPUs: runs %v, want one", plan.Run)
	}
	a.Workers, b.Workers = 2, 2
	plan, err = p.Allocate(&Snapshot{Round: 1, Now: 120, GPUs: 4, RoundSeconds: 120, Jobs: []*Job{a, b}})
	if err != nil {
		t.Fatal(err)
	}
	if !plan.Solved || !slices.Equal(slices.Sorted(slices.Values(plan.Run)), []string{"a", "b"}) {
		t.Fatalf("after both shrank to 2: solved %v, runs %v, want a re-plan running both", plan.Solved, plan.Run)
	}
}
