package policy

import (
	"fmt"
	"testing"
)

// TestShockwavePrepare_ChangesNoDecision: a policy that admits jobs with
// what it prepared at their registration, a round or more before, plans
// the same rounds and saves the same state as one that admits them
// plainly, in both information modes, including the preparations it must
// not use: a view that changed since (batch size, length, declared rate,
// schedule), one another policy made, one made before the policy's state
// was restored, one used a second time, and none.
func TestShockwavePrepare_ChangesNoDecision(t *testing.T) {
	for _, info := range []string{InfoOnline, InfoProfile} {
		t.Run(info, func(t *testing.T) {
			cfg := DefaultShockwaveConfig()
			cfg.Info = info
			mk := func() *Shockwave {
				p, err := NewShockwave(cfg)
				if err != nil {
					t.Fatal(err)
				}
				return p
			}
			plain, prep, other := mk(), mk(), mk()
			newJob := func(i int) *Job {
				j := &Job{ID: fmt.Sprintf("j%03d", i), Model: []string{"ResNet-18", "LM"}[i%2], Mode: "static", Workers: 1 + i%2, Priority: 1,
					InitialBatchSize: 32, BatchSize: 32, DatasetSize: 6400, Throughput: 10 + float64(i%7), TotalSteps: 2000 + int64(i)*10,
					IsolatedSeconds: 200, LastRun: -1}
				if i%3 == 0 {
					j.PlannedBatchSizes, j.PlannedEpochSeconds = []int{32, 32, 64, 64, 64}, []float64{40, 40, 30, 30, 30}
					j.TotalSteps = 5 * 200
				}
				return j
			}
			ready := map[string]Prepared{}
			register := func(from, to int) { // Prepare at registration, a round before the admission
				for i := from; i < to; i++ {
					j := newJob(i)
					switch i % 9 {
					case 1:
						ready[j.ID] = other.Prepare(j)
					case 2: // not prepared
					default:
						ready[j.ID] = prep.Prepare(j)
					}
				}
			}
			var jobs []*Job
			admit := func(r, from, to int) {
				for i := from; i < to; i++ {
					j := newJob(i)
					switch i % 9 { // what changed between the registration and the admission
					case 3:
						j.BatchSize = 64
					case 4:
						j.TotalSteps += 100
					case 5:
						j.Throughput = 3
					case 6:
						if j.PlannedBatchSizes != nil {
							j.PlannedEpochSeconds = []float64{40, 40, 30, 30, 31}
						}
					}
					j.AdmitTime, j.AdmitRound = float64(r*60), r
					jobs = append(jobs, j)
					plain.Admit(j)
					prep.AdmitPrepared(j, ready[j.ID])
				}
			}
			register(0, 120)
			for r := range 6 {
				switch r {
				case 1:
					admit(r, 0, 100)
				case 2:
					register(120, 200)
					admit(r, 100, 120)
				case 3:
					for _, j := range jobs[7:9] { // admitted again with the same preparation, after running: the second admission is a plain one
						plain.Admit(j)
						prep.AdmitPrepared(j, ready[j.ID])
					}
				case 4: // prepared before the state was restored into a new policy
					restored := mk()
					if err := restored.UnmarshalState(prep.MarshalState()); err != nil {
						t.Fatal(err)
					}
					prep = restored
					admit(r, 120, 200)
				}
				a := sameRound(t, &Snapshot{Round: r, Now: float64(r * 60), GPUs: 64, RoundSeconds: 60, Jobs: jobs}, plain, prep)
				for i, j := range jobs { // the jobs run: the next round's forecasts read what they did
					if a.Run != nil && i%2 == r%2 {
						j.StepsDone += 100
						j.RunTime += 60
						j.LastRun = r
						j.Measurements = append(j.Measurements, Measurement{Round: r, Throughput: j.Throughput, BatchSize: j.BatchSize})
						plain.Observe(j.ID, 60, 100)
						prep.Observe(j.ID, 60, 100)
					}
				}
			}
			if info == InfoOnline && plain.online.fc.Len() != 200 {
				t.Fatalf("the forecaster tracks %d jobs, want 200", plain.online.fc.Len())
			}
		})
	}
}
