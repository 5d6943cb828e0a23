package bayes

import (
	"math"
	"testing"
)

// TestCalibration_ABandPastFloat64KeepsItsRawEdges: a factor that would
// take a band's edges past float64 (P90 = mean·(P90/mean)^c overflows)
// leaves the band raw rather than giving the market an infinite P90; a
// band it can scale is scaled.
func TestCalibration_ABandPastFloat64KeepsItsRawEdges(t *testing.T) {
	c := calibrator{scale: calScoreMax}
	wide := Dist{Mean: 1, P10: 1e-300, P90: 1e300}
	if got := c.calibrate(wide); got != wide {
		t.Fatalf("a band past float64 at factor %v gave %+v, want the raw %+v", c.scale, got, wide)
	}
	d := Dist{Mean: 100, P10: 50, P90: 200}
	got := c.calibrate(d)
	if want := 100 * math.Pow(2, calScoreMax); got.P90 != want || got.P10 != 100*math.Pow(0.5, calScoreMax) {
		t.Fatalf("a band scaled by %v gave %+v, want P90 %v", c.scale, got, want)
	}
}
