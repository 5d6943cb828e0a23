package market

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
)

// InstanceVersion is the schema version of Instance.
const InstanceVersion = 1

// Instance is one solve as a self-contained JSON document: what the
// Shockwave policy passed to Solve in one round. `shockwave simulate
// --dump-instances DIR` writes them and `shockwave solve --instance FILE`
// reads them, so an operator can replay "why is my job waiting?".
//
// Schema (all times in seconds):
//
//	{
//	  "v": 1,                       schema version
//	  "round": 37,                  R, the round pointer
//	  "gpus": 32,                   G
//	  "round_seconds": 120,         Δ
//	  "future_rounds": 20,          T
//	  "settings": {"k": 0.001, "lambda": 12, "rhomax": 1,
//	               "log_approximation_bases": [0, 0.2, 0.4, 0.6, 0.8, 1],
//	               "exact_log": false, "gap": 0.001},
//	  "jobs": [{"id": "17", "workers": 2, "epochs": 40, "progress": 12,
//	            "epoch_seconds": 95.2, "remaining_s": 2680.5,
//	            "fair_finish_s": 14210.0}, …]
//	}
type Instance struct {
	V            int              `json:"v"`
	Round        int              `json:"round"`
	GPUs         int              `json:"gpus"`
	RoundSeconds float64          `json:"round_seconds"`
	FutureRounds int              `json:"future_rounds"`
	Settings     InstanceSettings `json:"settings"`
	Jobs         []InstanceJob    `json:"jobs"`
}

// InstanceSettings are the hyper-parameters of a solve, named as in the
// original's configuration files.
type InstanceSettings struct {
	K        float64   `json:"k"`
	Lambda   float64   `json:"lambda"`
	RhoMax   float64   `json:"rhomax"`
	LogBases []float64 `json:"log_approximation_bases"`
	ExactLog bool      `json:"exact_log"`
	Gap      float64   `json:"gap"`
	// Fairness is "tightest" or "relax"; absent means relax (instances
	// written before the rule existed).
	Fairness string `json:"fairness,omitempty"`
}

// InstanceJob is one job of an Instance.
type InstanceJob struct {
	ID           string  `json:"id"`
	Workers      int     `json:"workers"`
	Epochs       float64 `json:"epochs"`
	Progress     float64 `json:"progress"`
	EpochSeconds float64 `json:"epoch_seconds"`
	Remaining    float64 `json:"remaining_s"`
	FairFinish   float64 `json:"fair_finish_s"`
	// RemainingHigh is Job.RemainingHigh (absent when 0).
	RemainingHigh float64 `json:"remaining_high_s,omitempty"`
	// RemainingCap is Job.RemainingCap (absent when 0).
	RemainingCap float64 `json:"remaining_cap_s,omitempty"`
}

// NewInstance records problem p solved with settings s.
func NewInstance(p Problem, s *Settings) *Instance {
	if s == nil {
		s = DefaultSettings()
	}
	in := &Instance{
		V: InstanceVersion, Round: p.Round, GPUs: p.GPUs, RoundSeconds: p.delta(), FutureRounds: p.rounds(),
		Settings: InstanceSettings{K: s.K, Lambda: s.Lambda, RhoMax: s.RhoMax, LogBases: slices.Clone(s.Breakpoints), ExactLog: s.ExactLog, Gap: s.Gap,
			Fairness: s.Fairness.String()},
		Jobs: make([]InstanceJob, len(p.Jobs)),
	}
	if in.Settings.LogBases == nil {
		in.Settings.LogBases = slices.Clone(DefaultBreakpoints)
	}
	for i, j := range p.Jobs {
		in.Jobs[i] = InstanceJob(j)
	}
	return in
}

// Problem returns the instance's problem and settings, validated.
func (in *Instance) Problem() (Problem, *Settings, error) {
	if in.V != InstanceVersion {
		return Problem{}, nil, fmt.Errorf("%w: instance schema version %d, this build reads %d", ErrInvalid, in.V, InstanceVersion)
	}
	p := Problem{GPUs: in.GPUs, Round: in.Round, Rounds: in.FutureRounds, RoundSeconds: in.RoundSeconds, Jobs: make([]Job, len(in.Jobs))}
	for i, j := range in.Jobs {
		p.Jobs[i] = Job(j)
	}
	s := DefaultSettings()
	s.K, s.Lambda, s.RhoMax, s.ExactLog, s.Gap = in.Settings.K, in.Settings.Lambda, in.Settings.RhoMax, in.Settings.ExactLog, in.Settings.Gap
	if in.Settings.LogBases != nil {
		s.Breakpoints = slices.Clone(in.Settings.LogBases)
	}
	if in.Settings.Fairness != "" {
		f, err := ParseFairness(in.Settings.Fairness)
		if err != nil {
			return p, s, err
		}
		s.Fairness = f
	}
	if err := p.Validate(); err != nil {
		return p, s, err
	}
	if err := s.Validate(); err != nil {
		return p, s, err
	}
	return p, s, nil
}

// ReadInstance decodes an instance, rejecting unknown fields.
func ReadInstance(r io.Reader) (*Instance, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var in Instance
	if err := dec.Decode(&in); err != nil {
		return nil, fmt.Errorf("%w: instance: %v", ErrInvalid, err)
	}
	return &in, nil
}
