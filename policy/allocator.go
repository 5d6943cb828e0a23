package policy

// Allocator computes the long-run time fraction x_i ∈ [0, 1] of every active
// job, subject to Σ_i w_i·x_i ≤ G (spec §5, the "base constraints"). The
// baselines are Allocators; the Gavel round mechanism (spec §3.7, GavelRound)
// turns their allocations into per-round job lists.
//
// Allocate is called only when the round mechanism resets (arrivals or
// departures, at most once per reset interval). It returns one x_i per job of
// s.Jobs, in the same order. An Allocator may keep state across calls (AlloX
// keeps previous allocations, Themis accumulates isolated time); that state
// must depend only on the snapshots it was given and the jobs it was told to
// Forget.
type Allocator interface {
	Name() string
	Allocate(s *Snapshot) ([]float64, error)
	// Forget drops any state kept for a job that left.
	Forget(id string)
}
