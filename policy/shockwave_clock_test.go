package policy

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

// TestShockwave_DecisionsDoNotDependOnTheClockOrigin runs two Shockwave
// policies on the same rounds, one on a clock starting at 0 (the
// simulator's) and one on wall-clock seconds (a live coordinator's): plans
// and projected ρ must be the same. Fair-share targets on an absolute clock
// against Δ·R once made every projected ρ about 1e-8.
func TestShockwave_DecisionsDoNotDependOnTheClockOrigin(t *testing.T) {
	for _, info := range []string{InfoOnline, InfoProfile} {
		t.Run(info, func(t *testing.T) {
			cfg := DefaultShockwaveConfig()
			cfg.Info = info
			var plans [2][]*Plan
			for k, origin := range []float64{0, 1.7e9} {
				p, err := NewShockwave(cfg)
				if err != nil {
					t.Fatal(err)
				}
				var jobs []*Job
				for i := range 6 {
					j := &Job{ID: fmt.Sprint("j", i), Seq: i, Model: "ResNet-18", Mode: "static", Workers: 1 + i%2,
						InitialBatchSize: 32, BatchSize: 32, DatasetSize: 50000, TotalSteps: int64(20000 * (i + 1)),
						Throughput: 10, SubmitTime: origin, AdmitTime: origin, LastRun: -1}
					jobs = append(jobs, j)
					p.Admit(j)
				}
				for r := range 5 {
					now := origin + 120*float64(r)
					plan, err := p.Allocate(&Snapshot{Round: r, Now: now, GPUs: 3, RoundSeconds: 120, Jobs: jobs})
					if err != nil {
						t.Fatal(err)
					}
					plans[k] = append(plans[k], plan)
					for _, j := range jobs { // the jobs that ran made a round of progress
						if slices.Contains(plan.Run, j.ID) {
							j.StepsDone += 1200
							j.RunTime += 120
							j.Measurements = append(j.Measurements, Measurement{Round: r + 1, Throughput: 10, BatchSize: 32})
						}
					}
				}
			}
			for r := range plans[0] {
				a, b := plans[0][r], plans[1][r]
				if !slices.Equal(a.Run, b.Run) {
					t.Fatalf("round %d: run %v on a clock from 0, %v on wall-clock time", r, a.Run, b.Run)
				}
				for i := range a.Explain {
					ra, rb := a.Explain[i].ProjectedRho, b.Explain[i].ProjectedRho
					if math.Abs(ra-rb) > 1e-9*math.Max(1, ra) || (ra != 0 && ra < 1e-3) {
						t.Fatalf("round %d job %s: projected ρ %g vs %g", r, a.Explain[i].Job, ra, rb)
					}
				}
			}
		})
	}
}

// TestShockwaveConfig_InfoKey checks the configuration's information mode:
// online by default, "profile" accepted, anything else refused by name.
func TestShockwaveConfig_InfoKey(t *testing.T) {
	if c, err := ParseShockwaveConfig([]byte(`{"info": "profile"}`)); err != nil || c.Info != InfoProfile {
		t.Fatalf("profile: %+v, %v", c, err)
	}
	s, err := NewShockwave(DefaultShockwaveConfig())
	if err != nil || s.online == nil {
		t.Fatalf("default is not online: %v", err)
	}
	if _, err := ParseShockwaveConfig([]byte(`{"info": "oracle"}`)); err == nil || !strings.Contains(err.Error(), `"oracle"`) {
		t.Fatalf("bad info accepted or not named: %v", err)
	}
}
