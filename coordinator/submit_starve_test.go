package coordinator

import (
	"fmt"
	"testing"

	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
)

// starveRun drives a Core under the Shockwave policy as the load test
// with node agents does, without NATS: jobs jobs of width 1 (or 1 and 2
// alternately with mixed) on gpus GPUs, rounds of 5 s. With submitted, the
// jobs are submitted: a job's process registers (Enroll, which adopts the
// placeholder) in the round it is first granted, reports progress while
// granted and exits when suspended, so a job that never ran sends nothing.
// Without it, the jobs register at once and send a heartbeat each round
// they wait. It returns the round in which each job was first granted GPUs
// (-1: never).
func starveRun(t *testing.T, submitted, mixed bool, jobs, gpus, rounds int) []int {
	return starveRunWith(t, "shockwave", submitted, mixed, jobs, gpus, rounds)
}

// starveRunWith is starveRun under the named policy, which re-allocates
// on change as on a live coordinator.
func starveRunWith(t *testing.T, name string, submitted, mixed bool, jobs, gpus, rounds int) []int {
	t.Helper()
	pol, err := policy.New(name, policy.Options{ReallocateOnChange: true})
	if err != nil {
		t.Fatal(err)
	}
	const delta = 5.0
	c, err := NewCore(Config{GPUs: gpus, RoundSeconds: delta}, pol)
	if err != nil {
		t.Fatal(err)
	}
	ids, widths := make([]string, jobs), make([]int, jobs)
	at := map[string]int{}
	for i := range ids {
		ids[i], widths[i] = fmt.Sprintf("job-%03d", i), 1
		if mixed {
			widths[i] = 1 + i%2
		}
		at[ids[i]] = i
		if submitted {
			s := protocol.Submit{V: protocol.Version, Job: ids[i], Command: []string{"train"}, Workers: widths[i]}
			if err := c.Submit(0, &s); err != nil {
				t.Fatal(err)
			}
			continue
		}
		r := newJob(ids[i], widths[i])
		if err := c.Register(0, &r); err != nil {
			t.Fatal(err)
		}
	}
	first := make([]int, jobs)
	for i := range first {
		first[i] = -1
	}
	seq, done := make([]uint64, jobs), make([]int64, jobs)
	enrolled := make([]bool, jobs)
	for k := range rounds {
		now := float64(k) * delta
		r, err := c.Tick(now)
		if err != nil {
			t.Fatal(err)
		}
		running := make([]bool, jobs)
		for _, l := range r.Leases {
			if l.Action != protocol.Run {
				continue
			}
			i := at[l.Job]
			running[i] = true
			if first[i] < 0 {
				first[i] = k
			}
			if submitted && !enrolled[i] { // the agent started its process: it registers
				reg := newJob(l.Job, widths[i])
				if _, err := c.Enroll(now+0.5, &reg); err != nil {
					t.Fatalf("round %d: %s registers: %v", k, l.Job, err)
				}
				enrolled[i] = true
			}
		}
		for i, id := range ids {
			ev := heartbeat(0, done[i])
			switch {
			case running[i]:
				done[i] += 100 * int64(delta)
				ev = progress(0, 100*int64(delta), done[i], delta)
			case submitted:
				continue // no process: no events
			}
			seq[i]++
			ev.V, ev.Job, ev.Seq = protocol.Version, id, seq[i]
			if _, err := c.Deliver(now+1, &ev); err != nil {
				t.Fatalf("round %d: %s: %v", k, id, err)
			}
		}
	}
	return first
}

// TestSubmit_ShockwaveGrantsEverySubmittedJobWithinTwoPlanningWindows: 64
// submitted jobs on 16 GPUs, each adopted (a long job) when first granted,
// are all granted GPUs within two planning windows of the Shockwave policy,
// as the same jobs registered at once are. A window is FutureRounds
// rounds, over which the market plans each job's rounds to meet its
// finish-time-fairness bound; the plan is made again every few rounds
// (every 8, or at arrivals and departures), which may move a job's rounds
// planned late in one window into the next, so two windows bound a job's
// wait (the registered jobs of widths 1 and 2 wait longer than one).
// Read as the one-step jobs their placeholders declare, the submitted
// jobs not granted in the first round were never granted: the first 16,
// adopted, held every GPU.
func TestSubmit_ShockwaveGrantsEverySubmittedJobWithinTwoPlanningWindows(t *testing.T) {
	bound := 2 * policy.DefaultShockwaveConfig().FutureRounds
	for _, tc := range []struct {
		name             string
		submitted, mixed bool
	}{
		{"registered", false, false},
		{"submitted", true, false},
		{"registered-widths-1-and-2", false, true},
		{"submitted-widths-1-and-2", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first := starveRun(t, tc.submitted, tc.mixed, 64, 16, bound)
			var never []int
			for i, k := range first {
				if k < 0 {
					never = append(never, i)
				}
			}
			if len(never) > 0 {
				t.Fatalf("%d of 64 jobs never granted GPUs in %d rounds (jobs %v); first grants by job: %v", len(never), bound, never, first)
			}
			t.Logf("first grants by job: %v", first)
		})
	}
}

// TestSubmit_EveryPolicyGrantsSubmittedJobsAsItGrantsRegisteredOnes: for
// every policy that grants each of 64 registered jobs of widths 1 and 2
// on 16 GPUs within the bound above, the same jobs submitted are granted
// within it too (their placeholders are not read as one-step jobs, nor as
// jobs that cannot run for want of a throughput). Policies that by design
// leave some registered jobs waiting that long (throughput- or
// shortest-first ones) are compared no further.
func TestSubmit_EveryPolicyGrantsSubmittedJobsAsItGrantsRegisteredOnes(t *testing.T) {
	bound := 2 * policy.DefaultShockwaveConfig().FutureRounds
	compared := 0
	for _, name := range policy.Names() {
		t.Run(name, func(t *testing.T) {
			if n := neverGranted(starveRunWith(t, name, false, true, 64, 16, bound)); n > 0 {
				t.Skipf("%s leaves %d registered jobs waiting %d rounds", name, n, bound)
			}
			compared++
			if first := starveRunWith(t, name, true, true, 64, 16, bound); neverGranted(first) > 0 {
				t.Fatalf("%d of 64 submitted jobs never granted in %d rounds, all registered ones were; first grants: %v", neverGranted(first), bound, first)
			}
		})
	}
	if compared < 2 {
		t.Fatalf("only %d policies grant every registered job: the comparison checks nothing", compared)
	}
}

func neverGranted(first []int) int {
	n := 0
	for _, k := range first {
		if k < 0 {
			n++
		}
	}
	return n
}
