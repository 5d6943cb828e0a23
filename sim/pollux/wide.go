package pollux

import (
	"slices"
	"sort"
)

// Placements over five or more nodes are not measured one by one. The
// artifact interpolates them piecewise-linearly on a Delaunay triangulation
// of the points (nodes, replicas, local_bsz) formed by the 4-node placement
// averages and scalability.csv (spec §2.3 step 5). This package uses a
// structured equivalent instead (spec §9.2 names the difference): the points
// form layers by node count (4, 6, 8, 12, 16); within a layer, the times are
// interpolated linearly in local_bsz per replica count and then linearly in
// the replica count; between layers, linearly in the node count, matching
// the replica counts of the two layers by their replicas per node.

func (a *App) buildLayers(t *appTrace) {
	type key struct{ r, local float64 }
	sum := map[key][3]float64{}
	for _, p := range t.Placements {
		if p.Placement < 1000 { // fewer than four digits: not a 4-node placement
			continue
		}
		r := 0.0
		for id := int(p.Placement); id > 0; id /= 10 {
			r += float64(id % 10)
		}
		k := key{r, p.Local}
		s := sum[k]
		sum[k] = [3]float64{s[0] + p.Step, s[1] + p.Sync, s[2] + 1}
	}
	four := map[float64][]bszPoint{}
	for k, s := range sum {
		four[k.r] = append(four[k.r], bszPoint{k.local, s[0] / s[2], s[1] / s[2]})
	}
	a.layers = append(a.layers, makeLayer(4, four))
	byNodes := map[float64]map[float64][]bszPoint{}
	for _, s := range t.Scalability {
		if byNodes[s.Nodes] == nil {
			byNodes[s.Nodes] = map[float64][]bszPoint{}
		}
		byNodes[s.Nodes][s.Replicas] = append(byNodes[s.Nodes][s.Replicas], bszPoint{s.Local, s.Step, s.Sync})
	}
	for n, m := range byNodes {
		a.layers = append(a.layers, makeLayer(n, m))
	}
	slices.SortFunc(a.layers, func(x, y layer) int { return cmpF(x.nodes, y.nodes) })
}

func makeLayer(nodes float64, m map[float64][]bszPoint) layer {
	l := layer{nodes: nodes}
	for r, pts := range m {
		slices.SortFunc(pts, func(x, y bszPoint) int { return cmpF(x.local, y.local) })
		l.curves = append(l.curves, layerCurve{r, pts})
	}
	slices.SortFunc(l.curves, func(x, y layerCurve) int { return cmpF(x.replicas, y.replicas) })
	return l
}

// wide interpolates a placement of n ≥ 5 nodes.
func (a *App) wide(n, r, local float64) (step, sync float64, ok bool) {
	ls := a.layers
	hi := sort.Search(len(ls), func(i int) bool { return ls[i].nodes >= n })
	if hi == len(ls) || hi == 0 && ls[0].nodes != n {
		return 0, 0, false
	}
	u := (r/n - 1) / 3 // 0 at one replica per node, 1 at four
	if ls[hi].nodes == n {
		return ls[hi].at(n*(1+3*u), local)
	}
	lo := hi - 1
	s0, y0, ok0 := ls[lo].at(ls[lo].nodes*(1+3*u), local)
	s1, y1, ok1 := ls[hi].at(ls[hi].nodes*(1+3*u), local)
	switch {
	case ok0 && ok1:
		w := (n - ls[lo].nodes) / (ls[hi].nodes - ls[lo].nodes)
		return s0 + w*(s1-s0), y0 + w*(y1-y0), true
	case ok0:
		return s0, y0, true
	case ok1:
		return s1, y1, true
	}
	return 0, 0, false
}

// at interpolates one layer at replica count r and per-GPU batch size local.
func (l *layer) at(r, local float64) (step, sync float64, ok bool) {
	cs := l.curves
	if len(cs) == 0 || r < cs[0].replicas-1e-9 || r > cs[len(cs)-1].replicas+1e-9 {
		return 0, 0, false
	}
	hi := sort.Search(len(cs), func(i int) bool { return cs[i].replicas >= r-1e-9 })
	if hi < len(cs) && cs[hi].replicas <= r+1e-9 {
		return interpBsz(cs[hi].pts, local)
	}
	lo := hi - 1
	s0, y0, ok0 := interpBsz(cs[lo].pts, local)
	s1, y1, ok1 := interpBsz(cs[hi].pts, local)
	switch {
	case ok0 && ok1:
		w := (r - cs[lo].replicas) / (cs[hi].replicas - cs[lo].replicas)
		return s0 + w*(s1-s0), y0 + w*(y1-y0), true
	case ok0:
		return s0, y0, true
	case ok1:
		return s1, y1, true
	}
	return 0, 0, false
}
