package policy

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/shockwave-sched/shockwave/bayes"
	"github.com/shockwave-sched/shockwave/market"
)

// ShockwaveConfig holds the hyper-parameters of the Shockwave policy, in the
// original's configuration-file format (spec §4.9). Zero values mean the
// defaults of the original's 120-job, 32-GPU configuration.
type ShockwaveConfig struct {
	FutureRounds int       `json:"future_rounds"`           // T, the planning window (20)
	K            float64   `json:"k"`                       // makespan penalty (1e-3)
	Lambda       float64   `json:"lambda"`                  // priority power of the relaxation (12)
	RhoMax       float64   `json:"rhomax"`                  // finish-time-fairness bound (1)
	LogBases     []float64 `json:"log_approximation_bases"` // breakpoints of the piecewise-linear log
	ExactLog     bool      `json:"exact_log,omitempty"`     // use ln itself instead of the PWL
	// Info is the information mode: InfoOnline (events only, the default)
	// or InfoProfile (the original's declared schedules).
	Info string `json:"info,omitempty"`
	// Fairness is the rule for rounds whose FTF constraints at rhomax are
	// infeasible: "tightest" (keep them at the tightest feasible bound, and
	// the rounds of the jobs that would extend the makespan) or
	// "relax" (the original's priority-weighted relaxation); package
	// market, Fairness. Empty means tightest in online mode and relax in
	// profile mode, the original's emulation.
	Fairness string `json:"fairness,omitempty"`
	// IgnoreMode withholds each job's declared adaptation mode (a hint,
	// package protocol) from the online forecaster, which then treats
	// every job as of unknown mode: the ablation of that hint.
	IgnoreMode bool `json:"ignore_mode,omitempty"`
	// ForecastBudget bounds a round's online forecasting: the epoch steps
	// (bayes.Forecaster.Steps) a round spends. A job's first forecast, and
	// its first after its first throughput measurement, are made whatever
	// the budget; past it the other forecasts wait for their turns
	// (shockwave_refresh.go). 0 means the default: DefaultForecastBudget
	// less jobRoundSteps for each job of the round, at least
	// minDefaultBudget. -1 means no bound.
	ForecastBudget int64 `json:"forecast_budget,omitempty"`
	// Accepted and ignored: they configure the original's commercial solver
	// or nothing at all.
	GPURAM        float64 `json:"gpu_ram,omitempty"`
	SolverRelGap  float64 `json:"solver_rel_gap,omitempty"`
	SolverThreads int     `json:"solver_num_threads,omitempty"`
	SolverTimeout float64 `json:"solver_timeout,omitempty"`
}

// DefaultShockwaveConfig is the original's tacc_32gpus configuration.
func DefaultShockwaveConfig() ShockwaveConfig {
	return ShockwaveConfig{FutureRounds: 20, K: 1e-3, Lambda: 12, RhoMax: 1, LogBases: []float64{0, 0.2, 0.4, 0.6, 0.8, 1}}
}

// ParseShockwaveConfig reads a configuration in the original JSON format,
// rejecting unknown fields and out-of-range values.
func ParseShockwaveConfig(raw []byte) (ShockwaveConfig, error) {
	c := DefaultShockwaveConfig()
	dec := json.NewDecoder(bytesReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("shockwave config: %w", err)
	}
	return c, c.Validate()
}

// Validate checks the hyper-parameters.
func (c ShockwaveConfig) Validate() error {
	switch {
	case c.FutureRounds < 1 || c.FutureRounds > 1000:
		return fmt.Errorf("shockwave config: future_rounds %d out of range [1, 1000]", c.FutureRounds)
	case !(c.K >= 0) || math.IsInf(c.K, 0):
		return fmt.Errorf("shockwave config: k %g must be a finite non-negative number", c.K)
	case !(c.Lambda >= 0) || math.IsInf(c.Lambda, 0):
		return fmt.Errorf("shockwave config: lambda %g must be a finite non-negative number", c.Lambda)
	case !(c.RhoMax > 0) || math.IsInf(c.RhoMax, 0):
		return fmt.Errorf("shockwave config: rhomax %g must be positive", c.RhoMax)
	}
	switch c.Info {
	case "", InfoOnline, InfoProfile:
	default:
		return fmt.Errorf("shockwave config: info %q must be %q or %q", c.Info, InfoOnline, InfoProfile)
	}
	if c.ForecastBudget < -1 {
		return fmt.Errorf("shockwave config: forecast_budget %d must be positive, 0 (the default: %d less %d a job, at least %d) or -1 (no bound)",
			c.ForecastBudget, DefaultForecastBudget, jobRoundSteps, minDefaultBudget)
	}
	if c.Fairness != "" {
		if _, err := market.ParseFairness(c.Fairness); err != nil {
			return fmt.Errorf("shockwave config: fairness %q must be \"tightest\" or \"relax\"", c.Fairness)
		}
	}
	if !c.ExactLog {
		b := c.LogBases
		if len(b) < 2 || b[0] != 0 || b[len(b)-1] != 1 || !slices.IsSorted(b) {
			return fmt.Errorf("shockwave config: log_approximation_bases %v must rise from 0 to 1", b)
		}
	}
	return nil
}

// Shockwave is the Shockwave policy (spec §4): every few rounds, or when
// jobs arrive or leave, it solves the Volatile Fisher Market over a window of
// future rounds (package market) and follows the resulting plan in between.
type Shockwave struct {
	cfg      ShockwaveConfig
	settings market.Settings
	meta     map[string]*swMeta
	order    []string       // admission order of known jobs ("" where one was removed)
	orderAt  map[string]int // each known job's index in order
	removed  int            // "" entries in order

	round      int // R, the round pointer
	counter    int // rounds since the last forced re-solve
	resolve    bool
	shape      string // GPUs and node sizes of the last snapshot: a change re-solves
	capNote    string // why the market planned below the GPU count (shockwave_nodes.go)
	jobsMoved  bool   // arrivals or removals since the last fair-share estimate
	plan       map[int][]string
	prevList   []string
	lastResult *market.Result
	lastIndex  map[string]int // job → index in the last solve
	// lastIDs is the last solve's jobs by index when no id came twice
	// (lastIndex inverted; nil after a state is loaded): explain finds a
	// job's index there when the snapshot lists the jobs in that order.
	lastIDs []string
	stamp   uint64 // counts Allocate calls (swMeta.stamp)
	onSolve func(*market.Instance)
	online  *swOnline // nil in profile mode
	// t0 is the clock at the policy's first round. Fair-share targets are
	// kept relative to it, because the market compares them with Δ·R, the
	// rounds since then (spec §4.5): in the simulator t0 = 0, on a live
	// coordinator the clock is wall time.
	t0        float64
	started   bool
	admitErrs []string // online admissions refused (the job is planned from swDefault)
	terse     bool     // Plan.Explain left empty (SetExplain)
	// stateSize is the length of the last MarshalState, from which the
	// next sizes its buffer: growing a 20 MB state by appends allocated
	// several times its size, and the collections it set off held up the
	// jobs' events (docs/scale.md, session 13).
	stateSize int
}

// NewShockwave returns the policy with cfg (validated).
func NewShockwave(cfg ShockwaveConfig) (*Shockwave, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Shockwave{cfg: cfg, meta: map[string]*swMeta{}, plan: map[int][]string{}, resolve: true}
	s.settings = *market.DefaultSettings()
	s.settings.K, s.settings.Lambda, s.settings.RhoMax = cfg.K, cfg.Lambda, cfg.RhoMax
	s.settings.Breakpoints, s.settings.ExactLog = slices.Clone(cfg.LogBases), cfg.ExactLog
	s.settings.Fairness = market.FairnessTightest
	if cfg.Info == InfoProfile {
		s.settings.Fairness = market.FairnessRelax
	}
	if cfg.Fairness != "" {
		s.settings.Fairness, _ = market.ParseFairness(cfg.Fairness) // validated above
	}
	if cfg.Info != InfoProfile {
		s.online = newSWOnline(cfg.IgnoreMode)
		s.online.budget = cfg.ForecastBudget // 0: the default, by the round's jobs (roundBudget)
	}
	return s, nil
}

// Name is "shockwave".
func (s *Shockwave) Name() string { return "shockwave" }

// Admit creates the job's metadata with the round start as its submit time
// (spec §3.3 step 5) and forces a re-solve. In online mode the profile
// metadata is kept for the forecast report only (built from a declared
// schedule, if any); the market reads the online forecaster.
func (s *Shockwave) Admit(j *Job) { s.admit(j, nil) }

// admit is Admit with p, what Prepare built for j (nil: nothing usable).
func (s *Shockwave) admit(j *Job, p *swPrepared) {
	var fc *bayes.Prepared
	var entry *swOnlineJob
	if p != nil {
		p.meta.submit = j.AdmitTime
		s.meta[j.ID], fc, entry = p.meta, p.fc, p.entry
	} else {
		s.meta[j.ID] = newSWMeta(j, j.AdmitTime)
	}
	if s.online != nil {
		if err := s.online.admit(j, fc, entry); err != nil {
			s.admitErrs = append(s.admitErrs, fmt.Sprintf("%v; job %s is planned from the default (%s)", err, j.ID, swDefaultRule))
		}
	}
	s.appendOrder(j.ID)
	s.resolve, s.jobsMoved = true, true
}

// Reserve makes room for n admissions (Reserver).
func (s *Shockwave) Reserve(n int) {
	s.meta = growMap(s.meta, n)
	if s.orderAt != nil {
		s.orderAt = growMap(s.orderAt, n)
	}
	s.order = slices.Grow(s.order, n)
	if s.online != nil {
		s.online.jobs = growMap(s.online.jobs, n)
		s.online.fc.Reserve(n)
	}
}

// Remove drops the job's metadata and forces a re-solve.
func (s *Shockwave) Remove(id string) {
	if s.online != nil {
		s.online.remove(id)
	}
	s.drop(id)
}

func (s *Shockwave) drop(id string) {
	delete(s.meta, id)
	s.dropOrder(id)
	s.resolve, s.jobsMoved = true, true
}

// appendOrder puts id last in the admission order. A removal costs O(1)
// (a hole, closed once holes are half the slice): adopting each of the
// 1,650 jobs a rotation round starts at 10,000 jobs removes and admits it,
// and a search and copy of the slice took 7.7–8.5 µs of the coordinator's
// loop each time, 2.6–2.9 µs now (BenchmarkShockwave_ReadmitAt10000Jobs).
func (s *Shockwave) appendOrder(id string) {
	if s.orderAt == nil {
		s.reindexOrder()
	}
	s.dropOrder(id) // admitted twice: the later admission counts
	s.orderAt[id] = len(s.order)
	s.order = append(s.order, id)
}

// dropOrder removes id from the admission order.
func (s *Shockwave) dropOrder(id string) {
	if s.orderAt == nil {
		s.reindexOrder()
	}
	i, ok := s.orderAt[id]
	if !ok {
		return
	}
	delete(s.orderAt, id)
	s.order[i] = ""
	if s.removed++; s.removed > 64 && 2*s.removed > len(s.order) {
		s.order = s.liveOrder()
		s.reindexOrder()
	}
}

// liveOrder is the admission order without its holes.
func (s *Shockwave) liveOrder() []string {
	out := make([]string, 0, len(s.order)-s.removed)
	for _, id := range s.order {
		if id != "" {
			out = append(out, id)
		}
	}
	return out
}

// reindexOrder rebuilds the index of an order without holes.
func (s *Shockwave) reindexOrder() {
	s.orderAt, s.removed = make(map[string]int, len(s.order)), 0
	for i, id := range s.order {
		if id == "" {
			s.removed++
			continue
		}
		s.orderAt[id] = i
	}
}

// Observe is unused: measurements arrive with the snapshot.
func (s *Shockwave) Observe(string, float64, int64) {}

// Fail is unused: a failed lease shows as a zero measurement.
func (s *Shockwave) Fail(string) {}

func init() {
	Register("shockwave", func(o Options) (Policy, error) {
		cfg := DefaultShockwaveConfig()
		switch c := o.Config.(type) {
		case nil:
		case ShockwaveConfig:
			cfg = c
		case json.RawMessage:
			var err error
			if cfg, err = ParseShockwaveConfig(c); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("shockwave: unsupported config type %T", o.Config)
		}
		s, err := NewShockwave(cfg)
		if err != nil {
			return nil, err
		}
		s.onSolve = o.OnSolve
		return s, nil
	})
}

// sortedIDs returns map keys sorted, for deterministic iteration.
func sortedIDs[V any](m map[string]V) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// paceCap is the remaining time at the pace the coordinator has observed,
// the market's Job.RemainingCap: the rounds in which the job reported
// progress (one Measurement each, indexed by the coordinator) bound the
// seconds it has trained, so the work it has done took at most that long.
// The work is counted in epochs once one is done, in steps before (a
// fraction of its total steps). A job that reports a slower throughput
// than its progress shows cannot claim a critical bound with it (market,
// critBounds). 0 (no cap) before it has run or reported a step.
func paceCap(j *Job, e swEstimate, roundSeconds float64) float64 {
	if j == nil || len(j.Measurements) == 0 {
		return 0
	}
	ran := float64(len(j.Measurements)) * roundSeconds
	switch {
	case e.epoch >= 1:
		return max(float64(e.epochs-e.epoch)*ran/float64(e.epoch), 1)
	case j.StepsDone > 0 && j.TotalSteps > j.StepsDone:
		return max(float64(j.TotalSteps-j.StepsDone)*ran/float64(j.StepsDone), 1)
	}
	return 0
}
