package pollux

import "math"

// triMesh is a piecewise-linear interpolant on a tetrahedral mesh of points
// (nodes, replicas, local_bsz), the form of scipy's LinearNDInterpolator:
// a query inside a tetrahedron gets the barycentric mix of its corners'
// (step, sync); a query outside every tetrahedron has no value.
type triMesh struct {
	pts  [][3]float64
	vals [][2]float64
	tets []tet
	// byNodes[n] lists the tetrahedra whose node range holds n, for the
	// integer node counts that queries use.
	byNodes [][]int32
}

// tet is one tetrahedron: its corners, the affine map to barycentric
// coordinates (c = T·(x − r)), and its bounding box.
type tet struct {
	v      [4]int32
	t      [3][3]float64
	r      [3]float64
	lo, hi [3]float64
}

// baryEps is scipy's tolerance on barycentric coordinates (100·DBL_EPSILON).
const baryEps = 100 * 2.220446049250313e-16

func newTriMesh(pts [][3]float64, vals [][2]float64, simplices [][4]int32) *triMesh {
	m := &triMesh{pts: pts, vals: vals}
	for _, s := range simplices {
		var tt tet
		tt.v = s
		r := pts[s[3]]
		tt.r = r
		var a [3][3]float64 // columns: p_i − r
		for i := 0; i < 3; i++ {
			for k := 0; k < 3; k++ {
				a[k][i] = pts[s[i]][k] - r[k]
			}
		}
		inv, ok := inv3(a)
		if !ok {
			continue // degenerate: contributes no volume
		}
		tt.t = inv
		for k := 0; k < 3; k++ {
			tt.lo[k], tt.hi[k] = math.Inf(1), math.Inf(-1)
			for _, v := range s {
				tt.lo[k] = min(tt.lo[k], pts[v][k])
				tt.hi[k] = max(tt.hi[k], pts[v][k])
			}
		}
		m.tets = append(m.tets, tt)
	}
	for i, tt := range m.tets {
		for n := int(math.Ceil(tt.lo[0])); n <= int(tt.hi[0]); n++ {
			for len(m.byNodes) <= n {
				m.byNodes = append(m.byNodes, nil)
			}
			m.byNodes[n] = append(m.byNodes[n], int32(i))
		}
	}
	return m
}

func inv3(a [3][3]float64) (inv [3][3]float64, ok bool) {
	det := a[0][0]*(a[1][1]*a[2][2]-a[1][2]*a[2][1]) -
		a[0][1]*(a[1][0]*a[2][2]-a[1][2]*a[2][0]) +
		a[0][2]*(a[1][0]*a[2][1]-a[1][1]*a[2][0])
	if det == 0 || math.IsNaN(det) {
		return inv, false
	}
	inv[0][0] = (a[1][1]*a[2][2] - a[1][2]*a[2][1]) / det
	inv[0][1] = (a[0][2]*a[2][1] - a[0][1]*a[2][2]) / det
	inv[0][2] = (a[0][1]*a[1][2] - a[0][2]*a[1][1]) / det
	inv[1][0] = (a[1][2]*a[2][0] - a[1][0]*a[2][2]) / det
	inv[1][1] = (a[0][0]*a[2][2] - a[0][2]*a[2][0]) / det
	inv[1][2] = (a[0][2]*a[1][0] - a[0][0]*a[1][2]) / det
	inv[2][0] = (a[1][0]*a[2][1] - a[1][1]*a[2][0]) / det
	inv[2][1] = (a[0][1]*a[2][0] - a[0][0]*a[2][1]) / det
	inv[2][2] = (a[0][0]*a[1][1] - a[0][1]*a[1][0]) / det
	return inv, true
}

// at interpolates (step, sync) at x; ok is false outside the mesh.
func (m *triMesh) at(x [3]float64) (step, sync float64, ok bool) {
	n := int(x[0])
	if float64(n) != x[0] || n < 0 || n >= len(m.byNodes) {
		return 0, 0, false // queries use integer node counts
	}
	for _, i := range m.byNodes[n] {
		tt := &m.tets[i]
		if x[0] < tt.lo[0]-1e-9 || x[0] > tt.hi[0]+1e-9 ||
			x[1] < tt.lo[1]-1e-9 || x[1] > tt.hi[1]+1e-9 ||
			x[2] < tt.lo[2]-1e-9 || x[2] > tt.hi[2]+1e-9 {
			continue
		}
		var c [4]float64
		c[3] = 1
		inside := true
		for k := 0; k < 3; k++ {
			c[k] = tt.t[k][0]*(x[0]-tt.r[0]) + tt.t[k][1]*(x[1]-tt.r[1]) + tt.t[k][2]*(x[2]-tt.r[2])
			c[3] -= c[k]
			if c[k] < -baryEps {
				inside = false
				break
			}
		}
		if !inside || c[3] < -baryEps {
			continue
		}
		for k, v := range tt.v {
			step += c[k] * m.vals[v][0]
			sync += c[k] * m.vals[v][1]
		}
		return step, sync, true
	}
	return 0, 0, false
}
