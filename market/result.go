package market

import "fmt"

// Status says what Result certifies.
type Status int

const (
	// Unsolved is the zero value; Solve never returns it.
	Unsolved Status = iota
	// Optimal: the finish-time-fairness constraints are feasible and the
	// allocation is optimal (Bound − Objective within 1e-12 relative).
	Optimal
	// GapBounded: the FTF constraints are feasible and the allocation is
	// within Settings.Gap of the optimum (Gap ≤ Settings.Gap).
	GapBounded
	// Relaxed: the FTF constraints are infeasible; the allocation solves the
	// priority-weighted relaxation without them (§4.5) to within
	// Settings.Gap (Gap = 0 means optimally).
	Relaxed
	// Limit: the node budget ran out with Gap above Settings.Gap. The
	// allocation still fits every round (and meets the FTF constraints
	// unless Relaxed is set).
	Limit
)

// String returns the status name.
func (s Status) String() string {
	switch s {
	case Unsolved:
		return "Unsolved"
	case Optimal:
		return "Optimal"
	case GapBounded:
		return "GapBounded"
	case Relaxed:
		return "Relaxed"
	case Limit:
		return "Limit"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// Result is the answer of Solve. Per-job slices are in the input order of
// Problem.Jobs.
type Result struct {
	Status  Status
	Relaxed bool // the FTF set was infeasible and the relaxation was solved
	// RhoBound is the bound ρ of the FTF constraints the allocation meets:
	// Settings.RhoMax, or with FairnessTightest the tightest feasible one
	// when RhoMax is infeasible (fair.go); 0 when Relaxed.
	RhoBound float64

	// Rounds[i] = n_i = Σ_t x[i,t], the rounds job i runs in the window.
	Rounds []int
	// Progress[i] = p_i = min(Δ·n_i/d_i, E_i − c_i), planned epochs.
	Progress []float64
	// Schedule[t] lists the jobs (input indices, ascending) that run in
	// future round R+t, t = 0..T−1. Σ w over Schedule[t] ≤ G for every t.
	// Idle GPUs are not back-filled (that is §4.6, the policy's step).
	Schedule [][]int

	// Objective is the value of the solved objective (§4.5): the
	// unweighted one, or the π-weighted one when Relaxed.
	Objective float64
	// Bound is a proven upper bound on that objective over all feasible
	// x (respecting per-round gang packing). Bound ≥ Objective.
	Bound float64
	// Gap = (Bound − Objective) / max(|Objective|, 1e-10).
	Gap float64
	// MaxRemaining = max_i max(0, R̂_i − d_i·p_i), the makespan term's argument.
	MaxRemaining float64

	// Price is the market-clearing price of one GPU-round, in objective
	// units: the highest utility gain per GPU-round among the job-rounds
	// left unallocated (0 when every job got every round it can use).
	// Every allocated optional job-round earned at least this much, except
	// where gang packing or a lower bound (FTF, makespan) decided.
	Price float64
	// Priorities[i] = π_i of the relaxation (§4.5), 1 when not Relaxed.
	Priorities []float64
	// Rho[i] = ρ̃_i = (Δ·R + R̂_i/s)/F_i, the projected finish-time
	// fairness that orders the rounds (see the package doc).
	Rho []float64

	Stats Stats
}

// Stats counts the work of one Solve.
type Stats struct {
	Candidates int // distinct makespan bounds M in the candidate set
	Evaluated  int // makespan bounds solved (the rest were pruned by bounds)
	Nodes      int // branch-and-bound nodes (one relaxation each)
	Branches   int // nodes whose relaxed allocation did not pack and were split
	Profiles   int // profile relaxations solved (the tighter bound for such nodes)
	PackChecks int // packing feasibility checks
	Repairs    int // packing repairs that produced an incumbent
}

func (s *Stats) add(o Stats) {
	s.Candidates += o.Candidates
	s.Evaluated += o.Evaluated
	s.Nodes += o.Nodes
	s.Branches += o.Branches
	s.Profiles += o.Profiles
	s.PackChecks += o.PackChecks
	s.Repairs += o.Repairs
}
