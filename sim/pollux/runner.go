package pollux

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/topology"
)

// Native names the policies of the Pollux artifact.
var Native = []string{"pollux", "optimus", "tiresias"}

// Spec names one policy run: a native policy (Batch empty) or a project
// policy in a batch mode.
type Spec struct {
	Policy string
	Batch  string // "" for native policies, else BatchTrace or BatchAgent
}

// String is the policy's display name, e.g. "shockwave+agent".
func (s Spec) String() string {
	if s.Batch == BatchAgent {
		return s.Policy + "+agent"
	}
	return s.Policy
}

// Options configures a comparison.
type Options struct {
	Apps  Apps
	Nodes topology.Cluster // default 16x4
	Seed  uint64           // the pollux policy's seed
	// RoundSeconds is the round of the project's policies, a multiple of
	// the 60 s interval (default 120 s, Shockwave's round).
	RoundSeconds int
	Policy       policy.Options
	// Parallel bounds the concurrent runs (default GOMAXPROCS).
	Parallel int
}

// IsNative reports whether name is a policy of the Pollux artifact.
func IsNative(name string) bool { return slices.Contains(Native, strings.ToLower(name)) }

// NewPolicy builds the policy of s with its job setup.
func NewPolicy(s Spec, o Options, iso map[string]Isolated) (Policy, func(*Job), error) {
	switch strings.ToLower(s.Policy) {
	case "pollux":
		return NewPollux(o.Seed), SetupPollux, nil
	case "optimus":
		return NewOptimus(), SetupOptimus, nil
	case "tiresias":
		return NewTiresias(), SetupTiresias, nil
	}
	p, err := NewProject(s.Policy, o.Policy, s.Batch)
	if err != nil {
		return nil, nil, err
	}
	round := o.RoundSeconds
	if round == 0 {
		round = 2 * DefaultInterval
	}
	if round%DefaultInterval != 0 || round <= 0 {
		return nil, nil, fmt.Errorf("pollux: round %d s must be a positive multiple of the %d s interval", round, DefaultInterval)
	}
	p.Every = round / DefaultInterval
	p.Declared = make(map[string]float64, len(iso))
	for n, v := range iso {
		p.Declared[n] = v.Rate
	}
	return p, p.Setup, nil
}

// Compare runs every spec on the workload, in parallel, and returns their
// results in spec order; ρ uses each job's isolated run at its trace
// configuration.
func Compare(rows []WorkloadRow, specs []Spec, o Options) ([]*Result, error) {
	base := Config{Workload: rows, Apps: o.Apps, Nodes: o.Nodes}
	iso, err := IsolatedRuns(rows, base)
	if err != nil {
		return nil, err
	}
	jcts := JCTs(iso)
	out := make([]*Result, len(specs))
	errs := make([]error, len(specs))
	par := o.Parallel
	if par <= 0 {
		par = runtime.GOMAXPROCS(0)
	}
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i, s := range specs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			pol, setup, err := NewPolicy(s, o, iso)
			if err != nil {
				errs[i] = err
				return
			}
			cfg := base
			cfg.Policy, cfg.Setup = pol, setup
			jobs, err := Run(cfg)
			if err != nil {
				errs[i] = fmt.Errorf("%s: %w", s, err)
				return
			}
			out[i], errs[i] = Summarise(s.String(), jobs, jcts)
		}()
	}
	wg.Wait()
	for _, e := range errs {
		if e != nil {
			return nil, e
		}
	}
	return out, nil
}
