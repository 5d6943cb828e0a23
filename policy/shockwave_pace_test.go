package policy

import "testing"

// TestPaceCap_ComesFromTheRoundsRunNotTheReportedThroughput: the pace cap
// of a job that ran 20 rounds of 120 s for 10 of its 100 epochs is
// 90 × 240 s whatever epoch time it reports; before its first epoch it
// counts steps; a job that has not run has none.
func TestPaceCap_ComesFromTheRoundsRunNotTheReportedThroughput(t *testing.T) {
	j := &Job{TotalSteps: 1000, StepsDone: 100, Measurements: make([]Measurement, 20)}
	for _, d := range []float64{240, 24000} {
		e := swEstimate{epochs: 100, epoch: 10, epochSeconds: d, remaining: 90 * d}
		if got := paceCap(j, e, 120); got != 90*240 {
			t.Errorf("epoch time %v reported: cap %v, want %v", d, got, 90*240)
		}
	}
	if got := paceCap(j, swEstimate{epochs: 100, epoch: 0}, 120); got != 900*2400/100 {
		t.Errorf("before the first epoch: cap %v, want %v", got, 900*2400/100)
	}
	if got := paceCap(&Job{TotalSteps: 1000}, swEstimate{epochs: 100}, 120); got != 0 {
		t.Errorf("a job that has not run: cap %v, want 0", got)
	}
}
