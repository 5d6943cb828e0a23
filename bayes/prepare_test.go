package bayes_test

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/shockwave-sched/shockwave/bayes"
)

// TestForecaster_PreparedAdmissionsLeaveAdmitsState: jobs prepared long
// before their admission (other jobs admitted and observed meanwhile,
// teaching the families and the peer table) leave the state and the
// forecasts plain admissions leave; so do the preparations that must not
// be used: one made from a spec that changed since, one made by another
// forecaster, one used a second time, and none.
func TestForecaster_PreparedAdmissionsLeaveAdmitsState(t *testing.T) {
	plain, prep := bayes.NewForecaster(bayes.DefaultForecastConfig()), bayes.NewForecaster(bayes.DefaultForecastConfig())
	other := bayes.NewForecaster(bayes.DefaultForecastConfig())
	spec := func(i int) bayes.JobSpec {
		sp := lmSpec("job-" + strconv.Itoa(i))
		sp.Workers = 1 + i%3
		if i%4 == 0 {
			sp.Throughput = 0 // no declared rate: the detector keeps its prior mean
		}
		return sp
	}
	const n = 40
	ready := make([]*bayes.Prepared, n)
	for i := range n {
		sp := spec(i)
		switch i % 5 {
		case 1: // the spec changed after it was prepared
			sp.TotalSteps /= 2
			sp.Throughput = 7
		case 2: // prepared by another forecaster
			p, err := other.Prepare(sp)
			if err != nil {
				t.Fatal(err)
			}
			ready[i] = p
			continue
		case 3: // never prepared
			continue
		}
		p, err := prep.Prepare(sp)
		if err != nil {
			t.Fatal(err)
		}
		ready[i] = p
	}
	if other.Len() != 0 || prep.Len() != 0 {
		t.Fatalf("preparing admitted jobs: %d and %d tracked", other.Len(), prep.Len())
	}
	for i := range n {
		sp := spec(i)
		errA := plain.Admit(sp)
		errB := prep.AdmitPrepared(sp, ready[i])
		if errA != nil || errB != nil {
			t.Fatal(errA, errB)
		}
		for _, f := range []*bayes.Forecaster{plain, prep} {
			if err := f.Observe(sp.ID, bayes.Observation{StepsDone: 5968, TotalSteps: sp.TotalSteps, Epoch: 1, BatchSize: 10, Throughput: 90 + float64(i), Elapsed: 60}); err != nil {
				t.Fatal(err)
			}
		}
		if i == 7 { // a preparation serves one admission: the second is refused as Admit refuses it
			errA, errB = plain.Admit(sp), prep.AdmitPrepared(sp, ready[i])
			if errA == nil || errB == nil || errA.Error() != errB.Error() {
				t.Fatalf("admitting %s twice: %v and %v", sp.ID, errA, errB)
			}
		}
	}
	if !bytes.Equal(plain.MarshalState(), prep.MarshalState()) {
		t.Fatal("the prepared forecaster's state differs")
	}
	for i := range n {
		id := "job-" + strconv.Itoa(i)
		a, errA := plain.Forecast(id)
		b, errB := prep.Forecast(id)
		if a != b || errA != nil || errB != nil {
			t.Fatalf("%s: %+v (%v) and %+v (%v)", id, a, errA, b, errB)
		}
	}
}

// TestForecaster_PrepareRefusesWhatAdmitRefuses: an invalid spec cannot
// be prepared, the error names what is wrong, and admitting it without a
// preparation fails as Admit does, changing nothing.
func TestForecaster_PrepareRefusesWhatAdmitRefuses(t *testing.T) {
	f := bayes.NewForecaster(bayes.DefaultForecastConfig())
	bad := lmSpec("wide")
	bad.Workers = 0
	before := f.MarshalState()
	p, err := f.Prepare(bad)
	if err == nil || p != nil || !strings.Contains(err.Error(), "workers 0") {
		t.Fatalf("Prepare: %v, %v", p, err)
	}
	errAdmit := f.AdmitPrepared(bad, p)
	if errAdmit == nil || errAdmit.Error() != err.Error() {
		t.Fatalf("AdmitPrepared: %v, want %v", errAdmit, err)
	}
	if f.Len() != 0 || !bytes.Equal(before, f.MarshalState()) {
		t.Fatal("a refused admission changed the state")
	}
}
