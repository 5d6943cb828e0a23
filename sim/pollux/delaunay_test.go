package pollux

import (
	"math"
	"testing"
)

// On any tetrahedral mesh, the interpolant reproduces a linear function
// exactly inside, gives every corner its own value, and has no value
// outside the mesh or at non-integer node counts.
func TestTriMesh_LinearInsideNothingOutside(t *testing.T) {
	// The unit cube from (5, 10, 32) with sides (1, 2, 64), split into six
	// tetrahedra around its main diagonal.
	var pts [][3]float64
	for i := 0; i < 8; i++ {
		pts = append(pts, [3]float64{5 + float64(i&1), 10 + 2*float64(i>>1&1), 32 + 64*float64(i>>2&1)})
	}
	f := func(x [3]float64) [2]float64 {
		return [2]float64{0.1 + 0.02*x[0] - 0.003*x[1] + 0.0004*x[2], 0.05 + 0.001*x[1]}
	}
	var vals [][2]float64
	for _, p := range pts {
		vals = append(vals, f(p))
	}
	tets := [][4]int32{{0, 1, 3, 7}, {0, 1, 5, 7}, {0, 2, 3, 7}, {0, 2, 6, 7}, {0, 4, 5, 7}, {0, 4, 6, 7}}
	m := newTriMesh(pts, vals, tets)
	for _, x := range [][3]float64{{5, 10, 32}, {6, 12, 96}, {5, 11, 40}, {6, 10.5, 90}, {5, 12, 96}} {
		step, sync, ok := m.at(x)
		want := f(x)
		if !ok || math.Abs(step-want[0]) > 1e-12 || math.Abs(sync-want[1]) > 1e-12 {
			t.Errorf("at %v: (%v, %v, %v), want (%v, %v)", x, step, sync, ok, want[0], want[1])
		}
	}
	for _, x := range [][3]float64{{7, 11, 40}, {5, 9, 40}, {6, 11, 97}, {5.5, 11, 40}} {
		if _, _, ok := m.at(x); ok {
			t.Errorf("at %v: a value outside the mesh", x)
		}
	}
}
