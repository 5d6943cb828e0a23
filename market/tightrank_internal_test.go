package market

import "testing"

// TestTightRank_FinishingFirstThenBySlack: under the tightest rule a job
// that finishes within its planned rounds ranks before every other job;
// among the others, at equal π·ρ̃, the one with less slack under its lower
// bound ranks first, and a job planned for many rounds is not ranked below
// one planned for few (the relaxation's π·ρ̃/n would).
func TestTightRank_FinishingFirstThenBySlack(t *testing.T) {
	in := &instance{T: 20}
	finishing := &jobModel{r: []float64{300, 180, 60, 0}, ftfLo: 3}
	tight := &jobModel{r: make([]float64, 21), ftfLo: 19}
	loose := &jobModel{r: make([]float64, 21), ftfLo: 0}
	for n := range tight.r {
		tight.r[n], loose.r[n] = 5000-120*float64(n), 5000-120*float64(n)
	}
	lf, kf := in.tightRank(finishing, finishing.ftfLo, 3, 1)
	lt, kt := in.tightRank(tight, tight.ftfLo, 19, 1)
	ll, kl := in.tightRank(loose, loose.ftfLo, 2, 1)
	if lf || !lt || !ll {
		t.Fatalf("later: finishing %v, tight %v, loose %v; want false, true, true", lf, lt, ll)
	}
	if kt <= kl {
		t.Errorf("job with 1 round of slack keyed %.4g, job with 20 keyed %.4g", kt, kl)
	}
	if want := 1.0 / 3; kf != want {
		t.Errorf("finishing job keyed %.4g, want π·ρ̃/n = %.4g", kf, want)
	}
}
