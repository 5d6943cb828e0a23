package pollux

import (
	"cmp"
	"fmt"
	"slices"
)

// Placements over five or more nodes are not measured one by one. The
// artifact interpolates them with scipy's LinearNDInterpolator on the points
// (nodes, replicas, local_bsz) formed by placements.csv averaged per
// distinct triple and by scalability.csv (spec §2.3 step 5): linearly within
// each tetrahedron of Qhull's Delaunay triangulation of those points. The
// points lie on grids, so the triangulation is not unique (spec §9.2); the
// tetrahedra Qhull chose are generated into delaunay_table.go, and this file
// rebuilds the points and their times from the traces.

// meshTable is one application's generated triangulation: the number of
// points it indexes and its tetrahedra.
type meshTable struct {
	Points int
	Tets   [][4]int32
}

// meshPoints returns the interpolation points of an application in the
// artifact's order: the placements.csv rows averaged per (nodes, replicas,
// local_bsz), ascending, then the scalability.csv rows in file order.
func meshPoints(t *appTrace) (pts [][3]float64, vals [][2]float64) {
	type acc struct {
		step, sync float64
		n          int
	}
	sum := map[[3]float64]acc{}
	for _, p := range t.Placements {
		n, r := 0.0, 0.0
		for id := int(p.Placement); id > 0; id /= 10 {
			n++
			r += float64(id % 10)
		}
		k := [3]float64{n, r, p.Local}
		s := sum[k]
		sum[k] = acc{s.step + p.Step, s.sync + p.Sync, s.n + 1}
	}
	keys := make([][3]float64, 0, len(sum))
	for k := range sum {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y [3]float64) int {
		return cmp.Or(cmp.Compare(x[0], y[0]), cmp.Compare(x[1], y[1]), cmp.Compare(x[2], y[2]))
	})
	for _, k := range keys {
		s := sum[k]
		pts = append(pts, k)
		vals = append(vals, [2]float64{s.step / float64(s.n), s.sync / float64(s.n)})
	}
	for _, s := range t.Scalability {
		pts = append(pts, [3]float64{s.Nodes, s.Replicas, s.Local})
		vals = append(vals, [2]float64{s.Step, s.Sync})
	}
	return pts, vals
}

// buildMesh sets the application's wide-placement interpolant from the
// generated triangulation.
func (a *App) buildMesh(t *appTrace) error {
	m, ok := builtinMesh[t.Name]
	if !ok {
		return fmt.Errorf("pollux: no triangulation for application %s: run go generate ./sim/pollux", t.Name)
	}
	pts, vals := meshPoints(t)
	if len(pts) != m.Points {
		return fmt.Errorf("pollux: %s has %d interpolation points, the triangulation %d: run go generate ./sim/pollux", t.Name, len(pts), m.Points)
	}
	for _, tt := range m.Tets {
		for _, v := range tt {
			if v < 0 || int(v) >= len(pts) {
				return fmt.Errorf("pollux: %s: triangulation names point %d of %d", t.Name, v, len(pts))
			}
		}
	}
	a.mesh = newTriMesh(pts, vals, m.Tets)
	return nil
}
