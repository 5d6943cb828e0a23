package policy

import (
	"slices"
	"strings"
	"testing"
)

// lateArrival runs a Gavel-round baseline from t = 120 s (its first reset
// then is not at time 0, which the original treats specially) with the
// early jobs, admits job "1" at t = 360 s, and returns the plan of each
// round from the arrival on (120 s rounds, up to t = 1440 s).
func lateArrival(t *testing.T, gpus int, opts Options, early ...optJob) []*Plan {
	t.Helper()
	p, err := New("gavel", opts)
	if err != nil {
		t.Fatal(err)
	}
	jobs := append(slices.Clone(early), optJob{w: 1, theta: 10, rem: 1e6})
	var out []*Plan
	for k := 0; k <= 11; k++ {
		now := 120 + float64(k)*120
		n := len(early)
		if now >= 360 {
			n++
		}
		s := optSnap(gpus, now, jobs[:n]...)
		s.Round = k
		switch now {
		case 120:
			for _, j := range s.Jobs {
				p.Admit(j)
			}
		case 360:
			p.Admit(s.Jobs[n-1])
		}
		plan, err := p.Allocate(s)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range plan.Run {
			p.Observe(id, 120, 0)
		}
		if now >= 360 {
			out = append(out, plan)
		}
	}
	return out
}

func TestGavelRound_ALateJobWaitsBesideIdleGPUsUntilTheNextResetByDefault(t *testing.T) {
	plans := lateArrival(t, 2, Options{}, optJob{w: 1, theta: 10, rem: 1e6})
	for i, plan := range plans {
		now := 360 + 120*float64(i)
		runs := slices.Contains(plan.Run, "1")
		if now < 1120 && runs {
			t.Errorf("t=%g: the late job runs before the reset 1,000 s after the last (the original's rule)", now)
		}
		if now < 1120 && !strings.Contains(plan.Explain[1].Reason, "no allocation yet") {
			t.Errorf("t=%g: reason %q", now, plan.Explain[1].Reason)
		}
		if now >= 1200 && !runs {
			t.Errorf("t=%g: the late job still does not run after the reset", now)
		}
	}
}

func TestGavelRound_ReallocateOnChangeRunsALateJobAtOnceWhenAGPUIsIdle(t *testing.T) {
	plans := lateArrival(t, 2, Options{ReallocateOnChange: true}, optJob{w: 1, theta: 10, rem: 1e6})
	first := plans[0]
	if !slices.Contains(first.Run, "1") || !slices.Contains(first.Run, "0") || !first.Solved {
		t.Fatalf("arrival round: run %v, solved %v, want both jobs after a re-allocation", first.Run, first.Solved)
	}
	if !strings.Contains(first.Note, "re-allocated on change") {
		t.Errorf("note %q does not say why it re-allocated", first.Note)
	}
	for i, plan := range plans[1:] {
		now := 480 + 120*float64(i)
		if plan.Solved {
			t.Errorf("t=%g: re-allocated again with nothing changed", now)
		}
		if len(plan.Run) != 2 {
			t.Errorf("t=%g: run %v, want both jobs", now, plan.Run)
		}
	}
}

func TestGavelRound_ReallocateOnChangeKeepsTheOriginalRuleWhenNoGPUIsIdle(t *testing.T) {
	// One GPU, held by job "0": the late job would not run on an idle GPU,
	// so nothing is re-allocated before the 1,000 s rule allows it.
	on := lateArrival(t, 1, Options{ReallocateOnChange: true}, optJob{w: 1, theta: 10, rem: 1e6})
	off := lateArrival(t, 1, Options{}, optJob{w: 1, theta: 10, rem: 1e6})
	for i := range on {
		if on[i].Solved != off[i].Solved || !slices.Equal(on[i].Run, off[i].Run) {
			t.Errorf("t=%g: with the setting run %v solved %v, without %v %v", 360+120*float64(i),
				on[i].Run, on[i].Solved, off[i].Run, off[i].Solved)
		}
	}
}

func TestGavelRound_ReallocateOnChangeIsOffUnlessAsked(t *testing.T) {
	for _, name := range []string{"gavel", "themis", "allox", "mst", "ossp", "gandiva_fair"} {
		p, err := New(name, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if p.(*GavelRound).ReallocateOnChange {
			t.Errorf("%s re-allocates on change by default", name)
		}
		p, _ = New(name, Options{ReallocateOnChange: true})
		if !p.(*GavelRound).ReallocateOnChange {
			t.Errorf("%s ignores Options.ReallocateOnChange", name)
		}
	}
}
