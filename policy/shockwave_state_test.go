package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"testing"
)

// stateScenarioJobs is a small workload whose declared schedules change
// batch size (runs of equal epochs, as the run-length encoding keeps them)
// and whose measured speed is half or twice the declared one for some jobs
// (so that calibration rescales their durations).
func stateScenarioJobs() []*Job {
	var jobs []*Job
	for i := range 12 {
		var planned []int
		var secs []float64
		for e := range 12 + i {
			b := 32 << min(2, e/(4+i%3))
			planned = append(planned, b)
			secs = append(secs, 600*32/float64(b)+float64(i%4))
		}
		jobs = append(jobs, &Job{ID: fmt.Sprintf("j%02d", i), Seq: i, Model: []string{"ResNet-18", "LM"}[i%2],
			Mode: "gns", Workers: 1 + i%3, Priority: 1, InitialBatchSize: 32, BatchSize: 32, DatasetSize: 6400,
			Throughput: 1, TotalSteps: int64(len(planned)) * 200, PlannedBatchSizes: planned, PlannedEpochSeconds: secs,
			IsolatedSeconds: 1, LastRun: -1})
	}
	return jobs
}

// stateScenarioRounds runs rounds [from, to) of the scenario: jobs j00–j05
// are admitted in round 0, the others in round 3; a running job makes a
// round's steps at its speed (the declared one, or ×0.5 / ×2 for every
// third job) and reports them.
func stateScenarioRounds(t *testing.T, p *Shockwave, jobs []*Job, from, to int) []*Plan {
	t.Helper()
	const roundSeconds = 120
	var plans []*Plan
	for r := from; r < to; r++ {
		var active []*Job
		for i, j := range jobs {
			if r == 0 && i < 6 || r == 3 && i >= 6 {
				j.AdmitTime, j.AdmitRound = float64(r*roundSeconds), r
				p.Admit(j)
			}
			if (i < 6 || r >= 3) && j.StepsDone < j.TotalSteps {
				active = append(active, j)
			}
		}
		plan, err := p.Allocate(&Snapshot{Round: r, Now: float64(r * roundSeconds), GPUs: 8, RoundSeconds: roundSeconds, Jobs: active})
		if err != nil {
			t.Fatal(err)
		}
		plans = append(plans, plan)
		for _, id := range plan.Run {
			j := jobs[slices.IndexFunc(jobs, func(j *Job) bool { return j.ID == id })]
			speed := []float64{1, 0.5, 2}[j.Seq%3] * j.Throughput
			j.StepsDone = min(j.TotalSteps, j.StepsDone+int64(speed*roundSeconds))
			j.RunTime += roundSeconds
			j.Epoch = int(j.StepsDone / ceilDiv(int64(j.DatasetSize), int64(j.BatchSize)))
			j.Measurements = append(j.Measurements, Measurement{Round: r + 1, Throughput: speed, BatchSize: j.BatchSize})
			j.LastRun = r
			if j.StepsDone >= j.TotalSteps {
				p.Complete(j)
			}
		}
	}
	return plans
}

func cloneJobs(jobs []*Job) []*Job {
	out := make([]*Job, len(jobs))
	for i, j := range jobs {
		c := *j
		c.Measurements = slices.Clone(j.Measurements)
		out[i] = &c
	}
	return out
}

// TestShockwaveState_Version1StateLoadsAndContinuesBitForBit: a state
// written by the policy before the schedules were run-length encoded
// (version 1, per-epoch arrays; testdata written by that code at round 10
// of stateScenarioRounds; in online mode its forecaster's state is of
// bayes version 2) loads, converts to the state an uninterrupted
// policy of this version holds at that round (the same bytes), and the
// restored policy's next ten plans, explanations included, are those of
// the uninterrupted one. SHOCKWAVE_WRITE_STATE_V1=1 rewrites the testdata
// (run it on the version-1 code, e.g. commit ac3db40).
func TestShockwaveState_Version1StateLoadsAndContinuesBitForBit(t *testing.T) {
	for _, info := range []string{InfoProfile, InfoOnline} {
		t.Run(info, func(t *testing.T) {
			// The relax rule in both modes: its plans are the original's
			// and do not change from version to version (the fidelity
			// tests hold them), so the uninterrupted policy of this
			// version is comparable with the one that wrote the testdata.
			cfg := DefaultShockwaveConfig()
			cfg.Info, cfg.Fairness = info, "relax"
			p, err := NewShockwave(cfg)
			if err != nil {
				t.Fatal(err)
			}
			jobs := stateScenarioJobs()
			stateScenarioRounds(t, p, jobs, 0, 10)
			file := filepath.Join("testdata", "shockwave-state-v1-"+info+".bin")
			if os.Getenv("SHOCKWAVE_WRITE_STATE_V1") != "" {
				if err := os.WriteFile(file, p.MarshalState(), 0o644); err != nil {
					t.Fatal(err)
				}
				t.Skip("wrote ", file)
			}
			old, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			r, _ := NewShockwave(cfg)
			if err := r.UnmarshalState(old); err != nil {
				t.Fatalf("the version-1 state does not load: %v", err)
			}
			if !bytes.Equal(r.MarshalState(), p.MarshalState()) {
				t.Fatal("the version-1 state loads into another state than the uninterrupted policy's")
			}
			rjobs := cloneJobs(jobs)
			a, b := stateScenarioRounds(t, p, jobs, 10, 20), stateScenarioRounds(t, r, rjobs, 10, 20)
			for k := range a {
				ja, _ := json.Marshal(a[k])
				jb, _ := json.Marshal(b[k])
				if !bytes.Equal(ja, jb) {
					t.Fatalf("round %d: restored plan\n%s\nuninterrupted\n%s", 10+k, jb, ja)
				}
			}
			if !bytes.Equal(r.MarshalState(), p.MarshalState()) {
				t.Fatal("restored and uninterrupted policies differ after ten more rounds")
			}
		})
	}
}

// TestShockwaveState_UnknownVersionIsRefusedByName: a Shockwave state of a
// version this code does not know fails with an error naming it.
func TestShockwaveState_UnknownVersionIsRefusedByName(t *testing.T) {
	p, _ := NewShockwave(DefaultShockwaveConfig())
	b := p.MarshalState()
	b[len("shockwave")+8] = 7 // the version follows the name (a length and its bytes)
	r, _ := NewShockwave(DefaultShockwaveConfig())
	if err := r.UnmarshalState(b); err == nil || !bytes.Contains([]byte(err.Error()), []byte("version 7")) {
		t.Fatalf("a state of version 7 gave %v", err)
	}
}

// TestShockwaveOrder_RemovalsKeepTheAdmissionOrderAndTheState: removing
// jobs leaves holes in the admission order that are closed in bulk; the
// order of the jobs left is their admission order (a job admitted again
// goes last), the state carries it without holes, and a restored state
// encodes the same and goes on removing.
func TestShockwaveOrder_RemovalsKeepTheAdmissionOrderAndTheState(t *testing.T) {
	newJob := func(i int) *Job {
		return &Job{ID: fmt.Sprintf("j%03d", i), Model: "ResNet-18", Workers: 1, Priority: 1, InitialBatchSize: 32, BatchSize: 32,
			DatasetSize: 6400, Throughput: 1, TotalSteps: 1000, IsolatedSeconds: 1, LastRun: -1}
	}
	var want []string
	p := mustShockwave(t)
	for i := range 300 {
		p.Admit(newJob(i))
		if i%5 == 0 {
			want = append(want, newJob(i).ID)
		}
	}
	for i := range 300 {
		if i%5 != 0 {
			p.Remove(newJob(i).ID)
		}
	}
	p.Admit(newJob(0)) // admitted again: it moves last
	want = append(want[1:], newJob(0).ID)
	if got := p.liveOrder(); !slices.Equal(got, want) {
		t.Fatalf("order after removals: %v\nwant %v", got, want)
	}
	r := mustShockwave(t)
	if err := r.UnmarshalState(p.MarshalState()); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(r.MarshalState(), p.MarshalState()) {
		t.Fatal("a restored state encodes differently")
	}
	r.Remove(want[0])
	if got := r.liveOrder(); !slices.Equal(got, want[1:]) {
		t.Fatalf("order after a round trip and a removal: %v\nwant %v", got, want[1:])
	}
}

func mustShockwave(t *testing.T) *Shockwave {
	t.Helper()
	p, err := NewShockwave(DefaultShockwaveConfig())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// BenchmarkShockwave_ReadmitAt10000Jobs: the adoption of a submitted job
// (Remove, then Admit) among 10,000 known jobs, as a rotation round of the
// 10,000-job load test does about 1,650 times.
func BenchmarkShockwave_ReadmitAt10000Jobs(b *testing.B) {
	p, err := NewShockwave(DefaultShockwaveConfig())
	if err != nil {
		b.Fatal(err)
	}
	jobs := make([]*Job, 10_000)
	for i := range jobs {
		jobs[i] = &Job{ID: fmt.Sprintf("j%05d", i), Model: "ResNet-18", Workers: 1, Priority: 1, InitialBatchSize: 32, BatchSize: 32,
			DatasetSize: 6400, Throughput: 1, TotalSteps: 1000, IsolatedSeconds: 1, LastRun: -1}
		p.Admit(jobs[i])
	}
	b.ResetTimer()
	for i := range b.N {
		j := jobs[(i*7919)%len(jobs)]
		p.Remove(j.ID)
		p.Admit(j)
	}
}

// TestShockwaveReserve_ChangesNoDecision: a policy that made room for its
// admissions (Reserve, as the Core calls it before a boundary's
// admissions) plans the same rounds and saves the same state as one that
// grew as it admitted, through admissions that double what it knows,
// admissions that do not, removals and a restored state.
func TestShockwaveReserve_ChangesNoDecision(t *testing.T) {
	newJob := func(i int) *Job {
		return &Job{ID: fmt.Sprintf("j%03d", i), Model: "ResNet-18", Workers: 1 + i%2, Priority: 1, InitialBatchSize: 32, BatchSize: 32,
			DatasetSize: 6400, Throughput: 10 + float64(i%7), TotalSteps: 2000 + int64(i)*10, IsolatedSeconds: 200, LastRun: -1}
	}
	grown, reserved := mustShockwave(t), mustShockwave(t)
	var jobs []*Job
	admit := func(r, from, to int) {
		reserved.Reserve(to - from)
		for i := from; i < to; i++ {
			j := newJob(i)
			j.AdmitTime, j.AdmitRound = float64(r*60), r
			jobs = append(jobs, j)
			grown.Admit(j)
			reserved.Admit(j)
		}
	}
	for r := range 6 {
		switch r {
		case 0:
			admit(r, 0, 100) // from nothing
		case 2:
			admit(r, 100, 110) // a few: no growth
		case 3:
			admit(r, 110, 260) // more than it knows
			for _, j := range jobs[:20] {
				grown.Remove(j.ID)
				reserved.Remove(j.ID)
			}
			jobs = jobs[20:]
		case 4: // a restored policy reserves from its restored tables
			restored := mustShockwave(t)
			if err := restored.UnmarshalState(reserved.MarshalState()); err != nil {
				t.Fatal(err)
			}
			reserved = restored
			admit(r, 260, 600)
		}
		sameRound(t, &Snapshot{Round: r, Now: float64(r * 60), GPUs: 64, RoundSeconds: 60, Jobs: jobs}, grown, reserved)
	}
}

// sameRound has two policies allocate snap and fails unless their plans
// and saved states are equal; it returns the first's plan.
func sameRound(t *testing.T, snap *Snapshot, p, q *Shockwave) *Plan {
	t.Helper()
	a, errA := p.Allocate(snap)
	b, errB := q.Allocate(snap)
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("round %d: the plans differ:\n%+v\n%+v", snap.Round, a.Run, b.Run)
	}
	if !bytes.Equal(p.MarshalState(), q.MarshalState()) {
		t.Fatalf("round %d: the saved states differ", snap.Round)
	}
	return a
}

// BenchmarkShockwave_Admit10000Jobs: the first round's 10,000 admissions
// into a fresh policy: with the Reserve the Core makes before them and
// what Prepare built for each at its registration (prepared; the
// preparing is not timed), with the Reserve alone (reserved), and with
// neither (grown, as before both).
func BenchmarkShockwave_Admit10000Jobs(b *testing.B) {
	jobs := make([]*Job, 10_000)
	for i := range jobs {
		jobs[i] = &Job{ID: fmt.Sprintf("j%05d", i), Model: "ResNet-18", Workers: 1, Priority: 1, InitialBatchSize: 32, BatchSize: 32,
			DatasetSize: 6400, Throughput: 1, TotalSteps: 1000, IsolatedSeconds: 1, LastRun: -1}
	}
	for _, how := range []string{"prepared", "reserved", "grown"} {
		b.Run(how, func(b *testing.B) {
			b.ReportAllocs()
			prep := make([]Prepared, len(jobs))
			for range b.N {
				b.StopTimer()
				p, err := NewShockwave(DefaultShockwaveConfig())
				if err != nil {
					b.Fatal(err)
				}
				if how == "prepared" {
					for i, j := range jobs {
						prep[i] = p.Prepare(j)
					}
					runtime.GC() // the registrations came long before the boundary
				}
				b.StartTimer()
				if how != "grown" {
					p.Reserve(len(jobs))
				}
				for i, j := range jobs {
					if how == "prepared" {
						p.AdmitPrepared(j, prep[i])
					} else {
						p.Admit(j)
					}
				}
			}
		})
	}
}
