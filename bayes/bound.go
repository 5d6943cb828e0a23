package bayes

import (
	"cmp"
	"slices"
)

// The forecaster's tables keyed by what jobs declare are bounded, whatever
// jobs declare. Every model a job names gets a batch record and, once one
// of its jobs completes, a ratio posterior; every model, mode and recipe
// gets family nodes; every batch size a job reports at a gang width gets a
// peer throughput entry. A tenant with valid credentials could otherwise
// grow them without end: a job changing its batch size at its event
// budget (200 a second) adds 200 peer entries a second, and jobs that
// register and complete under models of their own add a batch record, a
// ratio posterior and three nodes each (registrations are capped per
// client, not over the coordinator's lifetime). The families' epoch rows
// have their own bound (maxFamilyRows); these bounds cap the keys.
//
// Each table holds at most its bound beyond the entries the live jobs use
// (a live job's entries are never evicted). Past that, the entries with
// the least evidence go first, down to seven eighths of the bound, so that
// an eviction pass is paid for by an eighth of the bound's insertions. The
// order reads nothing but the tables, so a forecaster restored from a saved
// state evicts as the original would; and an honest cluster (tens of
// models, a few batch sizes and widths each) never reaches the bounds, so
// its forecasts are unchanged.
const (
	// maxPeerEntries bounds the peer throughput entries (model, batch
	// size, width): about 120 bytes each in memory and 45 in a saved
	// state.
	maxPeerEntries = 1 << 14
	// maxFamilyNodes bounds the family nodes (without their epoch rows:
	// about 200 bytes each in memory and 60 in a saved state).
	maxFamilyNodes = 1 << 14
	// maxModels bounds the models' batch records and ratio posteriors
	// (the pooled posterior is never evicted).
	maxModels = 1 << 12
)

// nodesPerJob is the family nodes a job uses, one a level.
const nodesPerJob = len(familyNames)

// boundTarget is what an eviction pass leaves of a bound.
func boundTarget(bound int) int { return bound - bound/8 }

// bound evicts from each table past its bound (plus what the live jobs
// use). Callers follow it with changed() (forecasts read every table).
func (f *Forecaster) bound() {
	live := len(f.jobs)
	if len(f.thr) > maxPeerEntries+live {
		f.evictPeers(boundTarget(maxPeerEntries) + live)
	}
	if len(f.nodes) > maxFamilyNodes+nodesPerJob*live {
		f.evictNodes(boundTarget(maxFamilyNodes) + nodesPerJob*live)
	}
	if len(f.batch) > maxModels+live {
		f.evictBatch(boundTarget(maxModels) + live)
	}
	if len(f.ratio) > maxModels+1 {
		f.evictRatios(boundTarget(maxModels) + 1)
	}
}

// evictKeys deletes from m the first len(m)-target keys of candidates in
// order (the comparison may read m: it runs before any deletion).
func evictKeys[K comparable, V any](m map[K]V, candidates []K, target int, order func(a, b K) int) {
	n := len(m) - target
	if n <= 0 {
		return
	}
	slices.SortFunc(candidates, order)
	for _, k := range candidates[:min(n, len(candidates))] {
		delete(m, k)
	}
}

// evictPeers removes the peer entries no live job uses, the fewest
// observations first (ties: the first by key), down to target.
func (f *Forecaster) evictPeers(target int) {
	used := make(map[*thrStat]bool, len(f.jobs))
	for _, j := range f.jobs {
		used[j.thr] = true
	}
	var cand []thrKey
	for k, s := range f.thr {
		if !used[s] {
			cand = append(cand, k)
		}
	}
	evictKeys(f.thr, cand, target, func(a, b thrKey) int {
		return cmp.Or(cmp.Compare(f.thr[a].n, f.thr[b].n), cmpThrKey(a, b))
	})
}

// evictNodes removes the family nodes no live job uses, those that taught
// the fewest jobs first, then those with the fewest epoch rows (ties: the
// first by key), down to target.
func (f *Forecaster) evictNodes(target int) {
	used := make(map[*node]bool, nodesPerJob*len(f.jobs))
	for _, j := range f.jobs {
		for _, n := range j.nodes {
			used[n] = true
		}
	}
	var cand []famKey
	for k, n := range f.nodes {
		if !used[n] {
			cand = append(cand, k)
		}
	}
	evictKeys(f.nodes, cand, target, func(a, b famKey) int {
		na, nb := f.nodes[a], f.nodes[b]
		return cmp.Or(cmp.Compare(na.jobs, nb.jobs), cmp.Compare(len(na.occ), len(nb.occ)), cmpFamKey(a, b))
	})
	f.rows = 0 // the evicted nodes' rows go with them
	for _, n := range f.nodes {
		f.rows += len(n.occ)
	}
}

// evictBatch removes the batch records of models no live job names, the
// fewest jobs seen first (ties: the first by name), down to target.
func (f *Forecaster) evictBatch(target int) {
	used := make(map[string]bool, len(f.jobs))
	for _, j := range f.jobs {
		used[j.spec.Model] = true
	}
	var cand []string
	for m := range f.batch {
		if !used[m] {
			cand = append(cand, m)
		}
	}
	evictKeys(f.batch, cand, target, func(a, b string) int {
		return cmp.Or(cmp.Compare(f.batch[a].jobs, f.batch[b].jobs), cmp.Compare(a, b))
	})
}

// evictRatios removes the models' ratio posteriors with the least
// evidence first (κ; ties: the first by name), down to target; the pooled
// posterior stays.
func (f *Forecaster) evictRatios(target int) {
	var cand []string
	for m := range f.ratio {
		if m != "" {
			cand = append(cand, m)
		}
	}
	evictKeys(f.ratio, cand, target, func(a, b string) int {
		return cmp.Or(cmp.Compare(f.ratio[a].Kappa, f.ratio[b].Kappa), cmp.Compare(a, b))
	})
}
