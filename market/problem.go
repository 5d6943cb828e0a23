package market

import (
	"errors"
	"fmt"
	"math"
)

// ErrInvalid is wrapped by every error Solve and Validate return for a
// malformed problem or settings value. An infeasible set of finish-time
// fairness constraints is not an error: Solve answers it with the relaxation.
var ErrInvalid = errors.New("market: invalid input")

// Spec defaults (§4.5, §4.9).
const (
	DefaultRounds       = 20    // T, future_rounds
	DefaultRoundSeconds = 120.0 // Δ, seconds per round
	DefaultK            = 1e-3  // k, makespan penalty (tacc_32gpus.json)
	DefaultLambda       = 12.0  // λ, priority power (tacc_32gpus.json)
	DefaultRhoMax       = 1.0   // ρmax
	DefaultOrigin       = 1e-6  // the value whose log stands in for ln 0
	DefaultGap          = 1e-3  // relative optimality gap (Gurobi MIPGap of the original)
	DefaultMaxNodes     = 500   // branch-and-bound node budget per solve phase

	maxRounds   = 1000
	maxPriority = 1e200 // π clamp: ρ̃^100 overflows float64 for ρ̃ > ~1200 (§4.5)
)

// DefaultBreakpoints are the breakpoints B of the piecewise-linear log (§4.5).
var DefaultBreakpoints = []float64{0, 0.2, 0.4, 0.6, 0.8, 1}

// Job is one active job of a solve (§4.5 inputs).
type Job struct {
	ID           string  // stable identity; the final tie-break between jobs
	Workers      int     // w_i, gang width in GPUs (1 ≤ w_i ≤ G)
	Epochs       float64 // E_i > 0
	Progress     float64 // c_i ∈ [0, E_i], epochs done
	EpochSeconds float64 // d_i > 0, interpolated seconds per epoch (§4.3)
	Remaining    float64 // R̂_i ≥ 0, forecast remaining seconds (§4.3)
	FairFinish   float64 // F_i > 0, momentum fair-share finish target in seconds (§4.4)
	// RemainingHigh (optional, 0 = none) is an upper forecast of Remaining,
	// the P90 of its band; RemainingCap (optional, 0 = none) is the
	// remaining time at the pace the job has shown (its service seconds
	// per epoch done). Only the critical bounds of FairnessTightest read
	// them (fair.go, critBounds).
	RemainingHigh float64
	RemainingCap  float64
}

// Problem is one solve at round pointer Round.
type Problem struct {
	Jobs         []Job   // active jobs; any order (the answer does not depend on it)
	GPUs         int     // G ≥ 1
	Round        int     // R ≥ 0, the current round index
	Rounds       int     // T, the window length in rounds; 0 means DefaultRounds
	RoundSeconds float64 // Δ in seconds; 0 means DefaultRoundSeconds
}

// Validate reports whether p is well formed. Errors wrap ErrInvalid.
func (p *Problem) Validate() error {
	if p.GPUs < 1 {
		return invalidf("GPUs = %d, want ≥ 1", p.GPUs)
	}
	if p.Round < 0 {
		return invalidf("Round = %d, want ≥ 0", p.Round)
	}
	if p.Rounds < 0 || p.Rounds > maxRounds {
		return invalidf("Rounds = %d, want 0 (default) or 1..%d", p.Rounds, maxRounds)
	}
	if !finite(p.RoundSeconds) || p.RoundSeconds < 0 {
		return invalidf("RoundSeconds = %v, want ≥ 0 and finite", p.RoundSeconds)
	}
	for i := range p.Jobs {
		if err := p.Jobs[i].validate(p.GPUs); err != nil {
			return fmt.Errorf("%w: job %d (%q): %s", ErrInvalid, i, p.Jobs[i].ID, err.Error())
		}
	}
	return nil
}

func (j *Job) validate(gpus int) error {
	switch {
	case j.Workers < 1:
		return fmt.Errorf("workers = %d, want ≥ 1", j.Workers)
	case j.Workers > gpus:
		return fmt.Errorf("workers = %d exceeds the %d GPUs", j.Workers, gpus)
	case !finite(j.Epochs) || j.Epochs <= 0:
		return fmt.Errorf("epochs = %v, want > 0", j.Epochs)
	case !finite(j.Progress) || j.Progress < 0 || j.Progress > j.Epochs:
		return fmt.Errorf("progress = %v, want in [0, epochs = %v]", j.Progress, j.Epochs)
	case !finite(j.EpochSeconds) || j.EpochSeconds <= 0:
		return fmt.Errorf("epoch seconds = %v, want > 0", j.EpochSeconds)
	case !finite(j.Remaining) || j.Remaining < 0:
		return fmt.Errorf("remaining = %v, want ≥ 0", j.Remaining)
	case !finite(j.RemainingHigh) || j.RemainingHigh < 0:
		return fmt.Errorf("remaining high = %v, want ≥ 0", j.RemainingHigh)
	case !finite(j.RemainingCap) || j.RemainingCap < 0:
		return fmt.Errorf("remaining cap = %v, want ≥ 0", j.RemainingCap)
	case !finite(j.FairFinish) || j.FairFinish <= 0:
		return fmt.Errorf("fair finish = %v, want > 0", j.FairFinish)
	}
	return nil
}

// rounds and delta return T and Δ with the defaults applied.
func (p *Problem) rounds() int {
	if p.Rounds == 0 {
		return DefaultRounds
	}
	return p.Rounds
}

func (p *Problem) delta() float64 {
	if p.RoundSeconds == 0 {
		return DefaultRoundSeconds
	}
	return p.RoundSeconds
}

// Settings tunes a solve. A nil *Settings means DefaultSettings(). A non-nil
// value is taken literally, except that a nil Breakpoints, a zero Origin and
// a zero MaxNodes select their defaults; start from DefaultSettings() and
// override fields.
type Settings struct {
	K      float64 // k ≥ 0, weight of the makespan penalty max_i max(0, R̂_i − d_i·p_i)
	Lambda float64 // λ ≥ 0, priority power of the relaxation
	RhoMax float64 // ρmax > 0, finish-time-fairness bound

	// Breakpoints B of the piecewise-linear log: strictly increasing from 0
	// to 1. The value at breakpoint 0 is ln Origin; the others are ln B_j.
	Breakpoints []float64
	Origin      float64 // in (0, B_1); 0 means DefaultOrigin
	// ExactLog replaces the piecewise-linear log by ln(max(u, Origin)).
	ExactLog bool

	// Fairness is the rule for rounds whose FTF constraints at RhoMax are
	// infeasible: FairnessRelax (the zero value, the original's) drops
	// them for the priority-weighted relaxation; FairnessTightest keeps
	// them at the tightest feasible bound (fair.go).
	Fairness Fairness

	// Gap is the relative optimality gap at which the search may stop
	// (0: prove optimality). Status says whether it was met.
	Gap float64
	// MaxNodes bounds the branch-and-bound nodes of each solve phase (the
	// FTF problem, then the relaxation if needed); 0 means DefaultMaxNodes.
	MaxNodes int
}

// DefaultSettings returns the spec's 32-GPU configuration (§4.9): k = 1e-3,
// λ = 12, ρmax = 1, B = (0, .2, .4, .6, .8, 1) with 0 ↦ ln 1e-6, gap 1e-3,
// and the original's relaxation (FairnessRelax).
func DefaultSettings() *Settings {
	return &Settings{
		K:           DefaultK,
		Lambda:      DefaultLambda,
		RhoMax:      DefaultRhoMax,
		Breakpoints: append([]float64(nil), DefaultBreakpoints...),
		Origin:      DefaultOrigin,
		Gap:         DefaultGap,
		MaxNodes:    DefaultMaxNodes,
	}
}

// Validate reports whether s is well formed. Errors wrap ErrInvalid.
func (s *Settings) Validate() error {
	switch {
	case !finite(s.K) || s.K < 0:
		return invalidf("K = %v, want ≥ 0", s.K)
	case !finite(s.Lambda) || s.Lambda < 0:
		return invalidf("Lambda = %v, want ≥ 0", s.Lambda)
	case !finite(s.RhoMax) || s.RhoMax <= 0:
		return invalidf("RhoMax = %v, want > 0", s.RhoMax)
	case !finite(s.Gap) || s.Gap < 0:
		return invalidf("Gap = %v, want ≥ 0", s.Gap)
	case s.MaxNodes < 0:
		return invalidf("MaxNodes = %d, want ≥ 0", s.MaxNodes)
	case s.Fairness != FairnessRelax && s.Fairness != FairnessTightest:
		return invalidf("Fairness = %d, want FairnessRelax or FairnessTightest", s.Fairness)
	case !finite(s.Origin) || s.Origin < 0 || s.Origin >= 1:
		return invalidf("Origin = %v, want in (0, 1) or 0 for the default", s.Origin)
	}
	b := s.breakpoints()
	if len(b) < 2 || b[0] != 0 || b[len(b)-1] != 1 {
		return invalidf("Breakpoints = %v, want increasing from 0 to 1", b)
	}
	for j := 1; j < len(b); j++ {
		if !finite(b[j]) || b[j] <= b[j-1] {
			return invalidf("Breakpoints = %v, want strictly increasing", b)
		}
	}
	if s.origin() >= b[1] {
		return invalidf("Origin = %v, want below the first positive breakpoint %v", s.origin(), b[1])
	}
	return nil
}

func (s *Settings) breakpoints() []float64 {
	if len(s.Breakpoints) == 0 {
		return DefaultBreakpoints
	}
	return s.Breakpoints
}

func (s *Settings) origin() float64 {
	if s.Origin == 0 {
		return DefaultOrigin
	}
	return s.Origin
}

func (s *Settings) maxNodes() int {
	if s.MaxNodes == 0 {
		return DefaultMaxNodes
	}
	return s.MaxNodes
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
