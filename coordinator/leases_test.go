package coordinator

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/shockwave-sched/shockwave/internal/wire"
	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
)

// leaseCore is a Core of gpus GPUs and 10 s rounds with a 2.5 s grace and
// leases of rounds rounds, running policy name, with the jobs registered
// at time 0.
func leaseCore(t *testing.T, name string, gpus, rounds int, jobs ...string) *Core {
	t.Helper()
	pol, err := policy.New(name, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCore(Config{GPUs: gpus, RoundSeconds: 10, LeaseGraceSeconds: 2.5, LeaseRounds: rounds, ExpireLeases: true}, pol)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range jobs {
		r := newJob(id, 1)
		if err := c.Register(0, &r); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// runFor reports progress for every job c granted a RUN lease in round r,
// at time now.
func runFor(t *testing.T, c *Core, r *Round, now float64, seq map[string]uint64) {
	t.Helper()
	for _, l := range r.Leases {
		if l.Action != protocol.Run {
			continue
		}
		seq[l.Job]++
		ev := progress(seq[l.Job], 100, int64(seq[l.Job])*100, 9)
		ev.V, ev.Job = protocol.Version, l.Job
		if _, err := c.Apply(now, &ev); err != nil {
			t.Fatal(err)
		}
	}
}

func runLeaseOf(r *Round, job string) (protocol.Lease, bool) {
	for _, l := range r.Leases {
		if l.Job == job && l.Action == protocol.Run {
			return l, true
		}
	}
	return protocol.Lease{}, false
}

// TestLeaseRounds_AJobKeepingItsGPUsIsSentARenewalEveryOtherRound: with
// leases of L rounds, a job that keeps its GPU gets a lease valid for L
// rounds and the grace; its renewals are covered (in Leases with the
// expiry of the lease it holds, named in Covered) but in its renewal
// rounds, one in every L−1 at its phase. With one-round leases nothing is
// covered and each lease ends with its round.
func TestLeaseRounds_AJobKeepingItsGPUsIsSentARenewalEveryOtherRound(t *testing.T) {
	for _, rounds := range []int{1, 3, 5} {
		c := leaseCore(t, "gavel", 1, rounds, "a")
		seq := map[string]uint64{}
		var sent []int
		held := 0.0
		for k := range 12 {
			now := float64(10 * k)
			r, err := c.Tick(now)
			if err != nil {
				t.Fatal(err)
			}
			l, ok := runLeaseOf(r, "a")
			if !ok {
				t.Fatalf("L=%d round %d: no RUN lease for the only job", rounds, k)
			}
			covered := slices.Contains(r.Covered, "a")
			switch {
			case covered && (l.Expiry != held || !l.Extension):
				t.Fatalf("L=%d round %d: covered lease %+v does not carry the held lease's expiry %g", rounds, k, l, held)
			case !covered:
				if want := now + float64(rounds)*10 + 2.5; l.Expiry != want {
					t.Fatalf("L=%d round %d: lease ends at %g, want %g", rounds, k, l.Expiry, want)
				}
				sent, held = append(sent, k), l.Expiry
			}
			if covered && held < now+10+2.5 {
				t.Fatalf("L=%d round %d: covered by a lease ending at %g, before the round's end and grace", rounds, k, held)
			}
			runFor(t, c, r, now+9, seq)
		}
		want := []int{0}
		for k := 1; k < 12; k++ {
			if rounds == 1 || (k+renewPhase("a"))%(rounds-1) == 0 {
				want = append(want, k)
			}
		}
		if !slices.Equal(sent, want) {
			t.Errorf("L=%d: leases sent in rounds %v, want %v", rounds, sent, want)
		}
	}
}

// TestLeaseRounds_ARoundThatStartsLateRenewsTheLease: a renewal is covered
// only while the held lease lasts two rounds past this round's start, so a
// round that starts late sends it.
func TestLeaseRounds_ARoundThatStartsLateRenewsTheLease(t *testing.T) {
	c := leaseCore(t, "gavel", 1, 3, "a")
	seq := map[string]uint64{}
	r, err := c.Tick(0) // lease to 32.5
	if err != nil {
		t.Fatal(err)
	}
	runFor(t, c, r, 9, seq)
	if r, err = c.Tick(13); err != nil { // 32.5 < 13 + 20
		t.Fatal(err)
	}
	if l, _ := runLeaseOf(r, "a"); len(r.Covered) != 0 || l.Expiry != 13+32.5 {
		t.Fatalf("a round 3 s late: covered %v, lease %+v; want a new lease to 45.5", r.Covered, l)
	}
}

// TestLeaseRounds_ALateTickVoidsOnlyTheLeasesThatEnded: a tick after the
// previous round's end and grace keeps the grant of a job whose lease of
// several rounds still runs (with one-round leases every grant is void);
// once that lease ended too, the grant is void.
func TestLeaseRounds_ALateTickVoidsOnlyTheLeasesThatEnded(t *testing.T) {
	for _, tc := range []struct {
		rounds int
		late   float64
		keeps  bool
	}{{1, 20, false}, {3, 20, true}, {3, 40, false}} {
		c := leaseCore(t, "gavel", 1, tc.rounds, "a")
		seq := map[string]uint64{}
		r, err := c.Tick(0)
		if err != nil {
			t.Fatal(err)
		}
		runFor(t, c, r, 9, seq)
		if r, err = c.Tick(tc.late); err != nil {
			t.Fatal(err)
		}
		l, _ := runLeaseOf(r, "a")
		if l.Extension != tc.keeps {
			t.Errorf("L=%d, tick at %gs: extension %v, want %v (the grant kept)", tc.rounds, tc.late, l.Extension, tc.keeps)
		}
	}
}

// TestLeaseRounds_APreemptedJobReportingProgressIsToldAgainOnceARound: a
// job preempted while its lease of several rounds runs gets the SUSPEND at
// the round's start; progress it reports after the grace gets the SUSPEND
// again, once a round, until its lease ended. Progress within the grace
// (steps made before the SUSPEND arrived) and heartbeats get nothing.
func TestLeaseRounds_APreemptedJobReportingProgressIsToldAgainOnceARound(t *testing.T) {
	c := leaseCore(t, "gavel", 1, 3, "a", "b")
	seq := map[string]uint64{}
	var r *Round
	var err error
	victim, start := "", 0.0
	for k := range 20 {
		start = float64(10 * k)
		prev := r
		if r, err = c.Tick(start); err != nil {
			t.Fatal(err)
		}
		if prev != nil {
			for _, l := range r.Leases {
				if _, ran := runLeaseOf(prev, l.Job); ran && l.Action == protocol.Suspend {
					victim = l.Job
				}
			}
		}
		if victim != "" {
			break
		}
		runFor(t, c, r, start+9, seq)
	}
	if victim == "" {
		t.Fatal("gavel never preempted a job of two on one GPU in 20 rounds")
	}
	report := func(at float64, steps int64) *protocol.Lease {
		t.Helper()
		seq[victim]++
		ev := progress(seq[victim], steps, int64(seq[victim])*100, 1)
		if steps == 0 {
			ev = heartbeat(seq[victim], int64(seq[victim])*100)
		}
		ev.V, ev.Job = protocol.Version, victim
		l, err := c.Apply(at, &ev)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	if l := report(start+1, 50); l != nil {
		t.Fatalf("progress within the grace was answered with %+v", l)
	}
	if l := report(start+3, 0); l != nil {
		t.Fatalf("a heartbeat was answered with %+v", l)
	}
	l := report(start+4, 50)
	if l == nil || l.Action != protocol.Suspend || l.Job != victim || !strings.HasPrefix(l.Reason, resuspendReason) {
		t.Fatalf("progress after the grace without a grant: %+v, want the SUSPEND again", l)
	}
	if l := report(start+6, 50); l != nil {
		t.Fatalf("a second SUSPEND in the same round: %+v", l)
	}
	if _, err := c.Tick(start + 10); err != nil {
		t.Fatal(err)
	}
	if c.ranLast(c.jobs[victim]) {
		t.Skip("the victim runs again in the next round; nothing more to check")
	}
	if l := report(start+14, 50); l == nil || l.Action != protocol.Suspend {
		t.Fatalf("progress in the next round without a grant: %+v, want the SUSPEND again", l)
	}
}

// TestLeaseRounds_OutOfRangeIsRefused: 0 means 1; below 1 or above
// MaxLeaseRounds is refused, naming the setting.
func TestLeaseRounds_OutOfRangeIsRefused(t *testing.T) {
	for _, n := range []int{-1, MaxLeaseRounds + 1} {
		cfg := Config{GPUs: 1, LeaseRounds: n}
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "lease rounds") {
			t.Errorf("lease rounds %d: %v", n, err)
		}
	}
	cfg := Config{GPUs: 1}
	if err := cfg.Validate(); err != nil || cfg.LeaseRounds != 1 {
		t.Errorf("unset: %v, %d rounds", err, cfg.LeaseRounds)
	}
}

// encodeStateAs is f's snapshot with the Core's part in state version
// version.
func encodeStateAs(t *testing.T, f *fold, version int) []byte {
	t.Helper()
	img, sp, err := f.capture()
	if err != nil {
		t.Fatal(err)
	}
	img.core.version = version
	head, tail, err := img.encode()
	if err != nil {
		t.Fatal(err)
	}
	var e wire.Encoder
	e.Blob(sp.MarshalState())
	return sealSnapshot(f.seq, f.core.NextRound(), slices.Concat(head, e.Bytes(), tail))
}

// TestLeaseRounds_AVersion2StateLoadsAndContinuesTheUninterruptedFold: a
// snapshot whose Core state is version 2 (written before leases of several
// rounds, by a log of one-round leases) restores, and the restored fold
// gives the outcome of the uninterrupted one for every later record.
func TestLeaseRounds_AVersion2StateLoadsAndContinuesTheUninterruptedFold(t *testing.T) {
	h := newHistory(t, "shockwave", policy.Options{}, 8, 42)
	var outs [][]byte
	var v2, v3 []byte
	at, ticks := 0, 0
	h.onApply = func(i int, _ record, o *outcome) {
		outs = append(outs, outcomeBytes(o))
		if o.kind == kindTick {
			ticks++
		}
		if o.kind == kindPlan && ticks == 6 && v2 == nil {
			v2, v3, at = encodeStateAs(t, h.f, 2), encodeStateAs(t, h.f, 3), i
		}
	}
	h.run(14, 16)
	if v2 == nil || len(v2) >= len(v3) {
		t.Fatalf("no version-2 snapshot, or not smaller than version 3 (%d, %d bytes)", len(v2), len(v3))
	}
	s, err := DecodeStateSnapshot(v2)
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.restore(h.subj, protocol.DefaultMaxMessageBytes)
	if err != nil {
		t.Fatalf("restoring a version-2 state: %v", err)
	}
	for k := at + 1; k < len(h.records); k++ { // outs has no entry for the configuration record
		o := f.apply(h.records[k])
		if got := outcomeBytes(&o); string(got) != string(outs[k-1]) {
			t.Fatalf("restored from version 2, record %d gives\n%s\nuninterrupted\n%s", k+1, got, outs[k-1])
		}
	}
	if a, b := encodeStateAs(t, f, 2), encodeStateAs(t, h.f, 2); !slices.Equal(a, b) {
		t.Fatal("restored from version 2, the final state differs")
	}
}

// TestLeaseRounds_RenewalsAreSpreadOverTheRounds: 60 jobs that start in
// the same round on 60 GPUs, with leases of three rounds, are sent their
// renewals about half in each round, not all in every other round.
func TestLeaseRounds_RenewalsAreSpreadOverTheRounds(t *testing.T) {
	var ids []string
	for i := range 60 {
		ids = append(ids, fmt.Sprintf("job-%02d", i))
	}
	c := leaseCore(t, "gavel", 60, 3, ids...)
	seq := map[string]uint64{}
	for k := range 8 {
		now := float64(10 * k)
		r, err := c.Tick(now)
		if err != nil {
			t.Fatal(err)
		}
		sent := 0
		for _, l := range r.Leases {
			if l.Action == protocol.Run && !slices.Contains(r.Covered, l.Job) {
				sent++
			}
		}
		if k > 0 && (sent < 15 || sent > 45) {
			t.Errorf("round %d: %d of 60 renewals sent, want about half", k, sent)
		}
		runFor(t, c, r, now+9, seq)
	}
}

// TestLeaseRounds_AnAgentStillGetsGrantsThatEndWithTheRound: with leases
// of three rounds, a submitted job's lease lasts three rounds and the
// grace, but the desired state its node's agent gets ends the grant with
// the round and the grace, so the agent stops a process that outlives it
// as soon as with one-round leases.
func TestLeaseRounds_AnAgentStillGetsGrantsThatEndWithTheRound(t *testing.T) {
	f, _ := newRunnerLogWith(t, 3).fold()
	l, ok := f.leases["j"]
	if !ok {
		t.Fatal("the submitted job has no RUN lease")
	}
	d := f.desired("n0")
	if len(d.Jobs) != 1 {
		t.Fatalf("desired state %+v", d)
	}
	if l.Expiry != l.Start+32 || d.Jobs[0].Expiry != l.Start+12 {
		t.Fatalf("lease from %g to %g, agent's grant to %g; want 32 s and 12 s", l.Start, l.Expiry, d.Jobs[0].Expiry)
	}
}

// TestLeaseRounds_ASilentJobIsLostOnlyOnceItsLastLeaseEnded: with leases of
// three rounds and a 30 s job timeout, a job that stops reporting (cut off
// from the coordinator, still running under the lease it holds) is sent
// only one-round leases once it missed a round and the grace, and is
// marked lost, its GPU given to another, only when every RUN lease it was
// sent ends within the grace (as the last one-round lease of a job lost
// with one-round leases does).
func TestLeaseRounds_ASilentJobIsLostOnlyOnceItsLastLeaseEnded(t *testing.T) {
	pol, err := policy.New("gavel", policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCore(Config{GPUs: 1, RoundSeconds: 10, LeaseGraceSeconds: 2.5, LeaseRounds: 3, ExpireLeases: true, JobTimeoutSeconds: 30, MaxFailedLeases: -1}, pol)
	if err != nil {
		t.Fatal(err)
	}
	a := newJob("a", 1)
	if err := c.Register(0, &a); err != nil {
		t.Fatal(err)
	}
	seq := map[string]uint64{}
	var held float64 // the latest expiry of a's RUN leases
	lostAt := -1.0
	for k := range 12 {
		now := float64(10 * k)
		r, err := c.Tick(now)
		if err != nil {
			t.Fatal(err)
		}
		if l, ok := runLeaseOf(r, "a"); ok {
			if now-9 > 12.5 && l.Expiry > max(held, now+12.5) { // silent for more than a round and the grace
				t.Fatalf("round %d: the silent job was sent a lease to %g", k, l.Expiry)
			}
			held = max(held, l.Expiry)
		}
		for _, e := range r.Lost {
			if e.Job == "a" {
				lostAt = now
			}
		}
		if lostAt >= 0 {
			break
		}
		if k < 1 {
			runFor(t, c, r, now+9, seq) // heard at 9 s, then silent
		}
	}
	switch {
	case lostAt < 0:
		t.Fatal("the silent job was never marked lost")
	case lostAt < held-2.5:
		t.Fatalf("marked lost at %g, while a lease it was sent runs to %g, past the grace", lostAt, held)
	case lostAt < 9+30:
		t.Fatalf("marked lost at %g, before the job timeout", lostAt)
	}
	t.Logf("silent from 9 s, its last lease ended at %g s, marked lost at %g s", held, lostAt)
}
