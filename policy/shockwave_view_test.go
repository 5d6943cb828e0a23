package policy

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestShockwaveExplain_FollowsThePlanWhateverTheSnapshotOrder: with the
// snapshot's jobs shuffled every round, a job listed that the policy does
// not know (never admitted, or removed), and a known job missing from
// some rounds, every explanation's Run says whether the plan runs the job
// and its planned rounds are the last solve's for that job (what the
// lookups by id gave before the per-round view and the last solve's order
// replaced them), and the plan runs only listed jobs.
func TestShockwaveExplain_FollowsThePlanWhateverTheSnapshotOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 6))
	p, err := NewShockwave(DefaultShockwaveConfig())
	if err != nil {
		t.Fatal(err)
	}
	jobs := liveScaleJobs(40)
	s := &liveScale{p: p, jobs: jobs, samples: map[string]int64{}}
	for _, j := range jobs {
		p.Admit(j)
	}
	stranger := liveScaleJobs(41)[40] // listed, never admitted
	stranger.ID = "stranger"
	p.Remove(jobs[7].ID) // removed, still listed
	for r := range 30 {
		listed := slices.Clone(jobs)
		if r%2 == 1 {
			rng.Shuffle(len(listed), func(a, b int) { listed[a], listed[b] = listed[b], listed[a] })
		}
		if r%3 == 0 {
			listed = slices.DeleteFunc(listed, func(j *Job) bool { return j.ID == jobs[3].ID })
		}
		listed = append(listed, stranger)
		snap := &Snapshot{Round: r, Now: float64(r * liveRoundSeconds), GPUs: 16, Nodes: []int{8, 8}, RoundSeconds: liveRoundSeconds, Jobs: listed}
		plan, err := p.Allocate(snap)
		if err != nil {
			t.Fatal(err)
		}
		if len(plan.Explain) != len(listed) {
			t.Fatalf("round %d: %d explanations for %d jobs", r, len(plan.Explain), len(listed))
		}
		for k, e := range plan.Explain {
			if e.Job != listed[k].ID {
				t.Fatalf("round %d: explanation %d is of %s, want %s", r, k, e.Job, listed[k].ID)
			}
			if want := slices.Contains(plan.Run, e.Job); e.Run != want {
				t.Fatalf("round %d: %s Run %v, the plan runs it: %v", r, e.Job, e.Run, want)
			}
			want := 0
			if i, ok := p.lastIndex[e.Job]; ok {
				want = p.lastResult.Rounds[i]
			}
			if e.PlannedRounds != want {
				t.Fatalf("round %d: %s planned %d rounds, the last solve gave it %d", r, e.Job, e.PlannedRounds, want)
			}
		}
		for _, id := range plan.Run {
			if !slices.ContainsFunc(listed, func(j *Job) bool { return j.ID == id }) || id == jobs[7].ID || id == stranger.ID {
				t.Fatalf("round %d: the plan runs %s, which it may not", r, id)
			}
		}
		for _, id := range plan.Run {
			j := jobs[slices.IndexFunc(jobs, func(j *Job) bool { return j.ID == id })]
			s.progress(j, r)
		}
	}
}
