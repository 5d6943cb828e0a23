package sim

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/shockwave-sched/shockwave/coordinator"
	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/sim/workload"
	"github.com/shockwave-sched/shockwave/topology"
)

// Constants of the simulated cluster (spec §3.3).
const (
	// RestartPenaltySeconds is charged to a micro-task of a job that was not
	// running in the previous round (checkpoint restore and warm-up).
	RestartPenaltySeconds = 20
	// restartSlackSeconds: only micro-tasks longer than Δ−5 s pay it.
	restartSlackSeconds = 5
)

// Config describes one simulation run.
type Config struct {
	Jobs        []workload.Spec
	Throughputs *workload.Throughputs
	GPUs        int
	// Cluster places gangs on nodes (package topology; coordinator doc,
	// "Nodes and placement"). Empty: one node of GPUs, the flat pool. With
	// a cluster GPUs may be 0 (its total) or must equal that total.
	Cluster      topology.Cluster
	RoundSeconds float64 // Δ, default 120
	Policy       string  // a policy name or alias (package policy)
	Options      policy.Options
	// Compat reproduces the original's two bugs (package doc).
	Compat bool
	// OnRound, when set, is called after every round with the round index
	// and the number of completed jobs (for progress displays).
	OnRound func(round, completed, total int)
	// OnPlan, when set, sees every round's output (for tests and dumps).
	OnPlan func(*coordinator.Round)
	// Forecasts, when set, samples the policy's remaining-time forecasts
	// at ForecastMarks of each job's progress into Result.Forecasts.
	Forecasts bool
	// Noise makes the workload stochastic (package workload); the zero
	// value keeps the deterministic model.
	Noise workload.Noise
	// RecordProfiles fills Result.Profiles with each job's realized
	// per-epoch batch size and throughput (workload.WriteProfiles).
	RecordProfiles bool
}

// explainer is a policy whose per-job plan explanations can be turned
// off (policy.Shockwave); the metrics never read them.
type explainer interface{ SetExplain(on bool) }

type simJob struct {
	spec    workload.Spec
	id      string
	st      *workload.State
	seq     uint64
	started bool // registered with the Core
	ended   bool

	n          int64   // planned steps of the micro-task in flight
	finish     float64 // its finish time
	extension  bool    // its lease extended the previous round's
	inFlight   bool
	lastFinish float64
	workers    []int

	admitRound, endRound int
	scheduled, queued    int
	jct                  float64

	exec     float64         // execution seconds so far
	nextMark int             // next ForecastMarks index to sample
	marks    []ForecastPoint // sampled, awaiting the truth

	real    *workload.Realization // the job's draws (nil: deterministic)
	iso     float64               // its realized isolated run time (ρ's denominator)
	thr0    float64               // the table's throughput at bs0: what it declares
	early   workload.Ending       // how it ended early (RunsToEnd: it did not)
	crashed bool                  // it fails every lease from now on

	changes       int  // batch-size changes so far
	firstOfRecipe bool // no job of its recipe was admitted before it

	speedNow float64   // the speed of the micro-task in flight
	recBS    []int     // realized batch size per epoch (RecordProfiles)
	recThr   []float64 // realized throughput per epoch
}

type run struct {
	cfg       Config
	core      *coordinator.Core
	jobs      []*simJob
	byID      map[string]*simJob
	now       float64
	round     int
	completed int
	next      int // next trace job to arrive
	res       *Result
	prevRun   map[string][]int // workers of each job in the previous round
	admitted  map[string]int   // jobs admitted per recipe
	finished  map[string]int   // jobs completed per recipe
}

// Run simulates cfg and returns its metrics.
func Run(cfg Config) (*Result, error) {
	if cfg.RoundSeconds == 0 {
		cfg.RoundSeconds = coordinator.DefaultRoundSeconds
	}
	if len(cfg.Cluster.Nodes) > 0 {
		if err := cfg.Cluster.Validate(); err != nil {
			return nil, fmt.Errorf("sim: %w", err)
		}
		if total := cfg.Cluster.GPUs(); cfg.GPUs == 0 {
			cfg.GPUs = total
		} else if cfg.GPUs != total {
			return nil, fmt.Errorf("sim: %d GPUs, the cluster has %d", cfg.GPUs, total)
		}
	}
	if cfg.GPUs <= 0 {
		return nil, fmt.Errorf("sim: GPU count must be positive, got %d", cfg.GPUs)
	}
	if len(cfg.Jobs) == 0 {
		return nil, errors.New("sim: no jobs")
	}
	if cfg.Throughputs == nil {
		return nil, errors.New("sim: no throughput table")
	}
	pol, err := policy.New(cfg.Policy, cfg.Options)
	if err != nil {
		return nil, err
	}
	if e, ok := pol.(explainer); ok && !cfg.Forecasts && cfg.OnPlan == nil {
		e.SetExplain(false) // no one reads the plans' per-job explanations
	}
	core, err := coordinator.NewCore(coordinator.Config{GPUs: cfg.GPUs, Cluster: cfg.Cluster, RoundSeconds: cfg.RoundSeconds}, pol)
	if err != nil {
		return nil, err
	}
	r := &run{cfg: cfg, core: core, byID: map[string]*simJob{}, prevRun: map[string][]int{},
		admitted: map[string]int{}, finished: map[string]int{}}
	r.res = &Result{Policy: pol.Name(), GPUs: cfg.GPUs, Jobs: len(cfg.Jobs), busy: make([]float64, cfg.GPUs)}
	if len(cfg.Cluster.Nodes) > 1 {
		r.res.Nodes = cfg.Cluster.String()
	}
	if err := cfg.Noise.Validate(); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	for i, sp := range cfg.Jobs {
		j, err := newSimJob(sp, cfg.Throughputs, cfg.Noise)
		if err != nil {
			return nil, fmt.Errorf("sim: job %d (%s): %w", i, sp.JobType, err)
		}
		r.jobs = append(r.jobs, j)
		r.byID[j.id] = j
	}
	if err := r.loop(); err != nil {
		return nil, err
	}
	r.finish()
	r.res.sortForecasts()
	if cfg.RecordProfiles {
		r.res.Profiles = r.exportProfiles()
	}
	return r.res, nil
}

func newSimJob(sp workload.Spec, thr *workload.Throughputs, noise workload.Noise) (*simJob, error) {
	prof, err := workload.NewProfile(sp, thr)
	if err != nil {
		return nil, err
	}
	st, err := workload.NewState(sp, thr)
	if err != nil {
		return nil, err
	}
	j := &simJob{spec: sp, id: strconv.Itoa(sp.ID), st: st, admitRound: -1, endRound: -1,
		iso: prof.IsolatedSeconds, thr0: st.Throughput}
	if err := j.realize(noise, thr); err != nil {
		return nil, err
	}
	return j, nil
}

// loop runs rounds until every job completed (spec §3.3).
func (r *run) loop() error {
	r.now = r.cfg.Jobs[0].Arrival
	var inflight []*simJob
	for r.completed < len(r.jobs) {
		prevStart := r.now
		if len(inflight) > 0 {
			r.now = slices.MaxFunc(inflight, func(a, b *simJob) int { return cmp.Compare(a.finish, b.finish) }).finish
		} else if r.round > 0 {
			if r.next >= len(r.jobs) {
				return fmt.Errorf("sim: round %d: %d jobs neither running nor arriving", r.round, len(r.jobs)-r.completed)
			}
			r.now = max(r.now, r.cfg.Jobs[r.next].Arrival)
		}
		if err := r.complete(inflight, prevStart); err != nil {
			return err
		}
		if r.completed == len(r.jobs) {
			break
		}
		if err := r.setFlags(); err != nil {
			return err
		}
		if r.completed == len(r.jobs) {
			break
		}
		if err := r.admit(); err != nil {
			return err
		}
		if r.cfg.Compat && r.activeCount() == 0 {
			break // the original stops here (spec §3.3 step 6)
		}
		var err error
		if inflight, err = r.schedule(); err != nil {
			return err
		}
		if r.completed == len(r.jobs) {
			r.res.dropLastRound() // the coordinator ended the last job at this tick
			break
		}
		if r.cfg.OnRound != nil {
			r.cfg.OnRound(r.round, r.completed, len(r.jobs))
		}
		r.round++
	}
	r.res.Makespan = r.now
	r.res.Rounds = r.round
	return nil
}

func (r *run) activeCount() int {
	n := 0
	for _, j := range r.jobs {
		if j.started && !j.ended {
			n++
		}
	}
	return n
}

// CheckWorkload checks that every job can be simulated with thr: its job
// type and gang width have a positive throughput entry and its profile can
// be built. Errors name the trace line (job id + 1) and field.
func CheckWorkload(jobs []workload.Spec, thr *workload.Throughputs) error {
	for _, sp := range jobs {
		if v, ok := thr.Lookup(sp.JobType, sp.ScaleFactor); sp.Profile == nil && (!ok || !(v > 0)) {
			return fmt.Errorf("trace line %d: field 1 (job_type): no positive throughput for %q on %d GPUs in the %s table",
				sp.ID+1, sp.JobType, sp.ScaleFactor, thr.Name())
		}
		if _, err := newSimJob(sp, thr, workload.Noise{}); err != nil {
			return fmt.Errorf("trace line %d: %w", sp.ID+1, err)
		}
	}
	return nil
}
