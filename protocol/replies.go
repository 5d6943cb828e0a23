package protocol

import (
	"fmt"
	"math"
)

// ErrorCode classifies an error reply.
type ErrorCode string

// Error codes of error replies.
const (
	CodeBadRequest  ErrorCode = "bad_request"         // malformed JSON, a field of the wrong type, an invalid value
	CodeVersion     ErrorCode = "unsupported_version" // the "v" field names a schema this coordinator does not speak
	CodeTooLarge    ErrorCode = "too_large"           // the message exceeds the coordinator's size limit
	CodeConflict    ErrorCode = "conflict"            // the job id is registered with different parameters
	CodeEnded       ErrorCode = "ended"               // the job already completed or was ended
	CodeRejected    ErrorCode = "rejected"            // the coordinator refused the request (e.g. a gang wider than the cluster)
	CodeForbidden   ErrorCode = "forbidden"           // the caller's credentials do not cover the job
	CodeUnavailable ErrorCode = "unavailable"         // the coordinator could not persist the request; retry
)

// Error is the error part of a reply. A reply with a non-nil Error carries
// nothing else but V.
type Error struct {
	Code    ErrorCode `json:"code"`
	Message string    `json:"message"`
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

// RegisterReply answers a Register request. On success it returns the job's
// identity as the coordinator records it, the round length, and — when the
// job was known already (an SDK restart, or a lost job coming back) — the
// progress the coordinator holds, so that the SDK continues its event
// sequence after LastSeq.
type RegisterReply struct {
	V     int    `json:"v"`
	Error *Error `json:"error,omitempty"`

	Job          string  `json:"job,omitempty"`
	State        string  `json:"state,omitempty"`   // pending, active or lost
	Resumed      bool    `json:"resumed,omitempty"` // the job was registered before
	RoundSeconds float64 `json:"round_seconds,omitempty"`
	Round        int     `json:"round"`         // index of the next round
	Now          float64 `json:"now,omitempty"` // coordinator clock, seconds since the Unix epoch

	LastSeq    uint64 `json:"last_seq"` // last accepted event sequence number
	StepsDone  int64  `json:"steps_done"`
	TotalSteps int64  `json:"total_steps,omitempty"`
	Epoch      int    `json:"epoch"`
	BatchSize  int    `json:"batch_size,omitempty"`
	// Lease is the job's RUN lease for the current round, when it holds one.
	Lease *Lease `json:"lease,omitempty"`
}

// Validate checks a registration reply; the SDK uses it.
func (r *RegisterReply) Validate() error {
	const m = "register reply"
	if err := checkVersion(m, r.V); err != nil {
		return err
	}
	if r.Error != nil {
		return r.Error.validate(m)
	}
	if err := ValidateJobID(m, r.Job); err != nil {
		return err
	}
	switch r.State {
	case "pending", "active", "lost":
	default:
		return fieldErr(m, "state", "unexpected state %q", r.State)
	}
	if err := checkFinite(m, "round_seconds", r.RoundSeconds, 0.001, 86400); err != nil {
		return err
	}
	if r.Round < 0 {
		return fieldErr(m, "round", "%d is negative", r.Round)
	}
	if err := checkFinite(m, "now", r.Now, 0, MaxSeconds); err != nil {
		return err
	}
	if r.StepsDone < 0 || r.StepsDone > MaxSteps || r.TotalSteps < 0 || r.TotalSteps > MaxSteps {
		return fieldErr(m, "steps_done", "steps out of range [0, %d]", MaxSteps)
	}
	if r.Epoch < 0 || r.Epoch > MaxEpochs || r.BatchSize < 0 || r.BatchSize > MaxBatchSize {
		return fieldErr(m, "epoch", "epoch or batch size out of range")
	}
	if r.Lease != nil {
		if err := r.Lease.Validate(); err != nil {
			return fmt.Errorf("lease: %w", err)
		}
	}
	return nil
}

func (e *Error) validate(m string) error {
	if e.Code == "" {
		return fieldErr(m, "error.code", "empty error code")
	}
	return nil
}

// StatusRequest asks for the job table and the last plan. An empty request
// body means the zero request of the current version.
type StatusRequest struct {
	V int `json:"v"`
	// Job limits the table to one job when set.
	Job string `json:"job,omitempty"`
	// Limit, when positive, is the most jobs the table lists: the
	// unfinished ones furthest from their fair share (the plan's highest
	// projected ρ) first. 0 lists every job that fits in one message.
	Limit int `json:"limit,omitempty"`
}

// Validate checks a status request.
func (r *StatusRequest) Validate() error {
	const m = "status request"
	if err := checkVersion(m, r.V); err != nil {
		return err
	}
	if r.Limit < 0 {
		return fieldErr(m, "limit", "%d is negative", r.Limit)
	}
	if r.Job != "" {
		return ValidateJobID(m, r.Job)
	}
	return nil
}

// StatusReply is the coordinator's job table and its most recent plan.
type StatusReply struct {
	V     int    `json:"v"`
	Error *Error `json:"error,omitempty"`

	Policy       string     `json:"policy,omitempty"`
	GPUs         int        `json:"gpus,omitempty"`
	Nodes        []NodeInfo `json:"nodes,omitempty"` // the cluster's members, topology order
	RoundSeconds float64    `json:"round_seconds,omitempty"`
	Round        int        `json:"round"`         // index of the next round
	Now          float64    `json:"now,omitempty"` // coordinator clock, seconds since the Unix epoch
	// Recovering is true while the coordinator replays its log after a
	// restart; the table is then the state replayed so far.
	Recovering bool   `json:"recovering,omitempty"`
	LogSeq     uint64 `json:"log_seq"` // last log record folded into the state

	Jobs []JobInfo `json:"jobs"`
	// JobsTotal is the size of the job table when Jobs lists fewer (the
	// request's limit, or what fits in one message); the plan then explains
	// only the listed jobs.
	JobsTotal int       `json:"jobs_total,omitempty"`
	Plan      *PlanInfo `json:"plan,omitempty"`
}

// NodeInfo is one member of the cluster in a status reply.
type NodeInfo struct {
	Name string `json:"name"`
	GPUs int    `json:"gpus"`
	Type string `json:"type,omitempty"`
	Used int    `json:"used"` // devices held by jobs in the current round
	// Relay says the node's agent relays its jobs' leases (AgentHello.Relay).
	Relay bool `json:"relay,omitempty"`
}

// JobInfo is one row of the job table.
type JobInfo struct {
	Job        string  `json:"job"`
	State      string  `json:"state"`
	Model      string  `json:"model"`
	Workers    int     `json:"workers"`
	BatchSize  int     `json:"batch_size"`
	StepsDone  int64   `json:"steps_done"`
	TotalSteps int64   `json:"total_steps"`
	Epoch      int     `json:"epoch"`
	Throughput float64 `json:"throughput"`
	RunTime    float64 `json:"run_time_s"`
	SubmitTime float64 `json:"submit_time"`
	AdmitTime  float64 `json:"admit_time"`
	LastRun    int     `json:"last_run_round"` // -1 if never
	Failures   int     `json:"failed_leases"`
	LastSeq    uint64  `json:"last_seq"`
	GPUs       []int   `json:"gpus,omitempty"` // held in the current round
	// Devices names the same grant per node (node name, local indices).
	Devices []NodeDevices `json:"devices,omitempty"`
	// Node is the node a resident job's process runs on ("" when none).
	Node string `json:"node,omitempty"`
	// Reason says why an ended job ended (failed, cancelled, expired), or
	// the last exit of a submitted job's process.
	Reason string `json:"reason,omitempty"`
	// Leases says how the job's RUN and SUSPEND leases of the most recent
	// round reached it when not on its lease subject: "relayed" (by its
	// node's agent) or "held" (a submitted job no process of which has
	// registered yet); empty when they were published (or there were none).
	Leases string `json:"leases,omitempty"`
}

// PlanInfo is a round's plan as the policy explained it.
type PlanInfo struct {
	Round   int         `json:"round"`
	Run     []string    `json:"run"`
	Solved  bool        `json:"solved"`
	Note    string      `json:"note,omitempty"`
	Explain []PlanEntry `json:"explain,omitempty"`
}

// PlanEntry explains the plan's decision for one job. The market fields are
// zero for policies that do not use them.
type PlanEntry struct {
	Job               string  `json:"job"`
	Run               bool    `json:"run"`
	Share             float64 `json:"share"`
	Priority          float64 `json:"priority,omitempty"`
	Reason            string  `json:"reason,omitempty"`
	PlannedRounds     int     `json:"planned_rounds,omitempty"`
	ForecastRemaining float64 `json:"forecast_remaining_s,omitempty"`
	FairShareFinish   float64 `json:"fair_share_finish_s,omitempty"`
	ProjectedRho      float64 `json:"projected_rho,omitempty"`
	Price             float64 `json:"price,omitempty"`
	Regime            int     `json:"regime,omitempty"`
	ChangeProb        float64 `json:"change_prob,omitempty"`
	// Online forecasts (Shockwave's online mode): the 10 % and 90 %
	// quantiles of the remaining isolated run time, and the prior level the
	// forecast leaned on ("recipe", "model+mode", "model", "weak" or
	// "uninformed" when no throughput was known yet).
	ForecastP10   float64 `json:"forecast_p10_s,omitempty"`
	ForecastP90   float64 `json:"forecast_p90_s,omitempty"`
	ForecastPrior string  `json:"forecast_prior,omitempty"`
	// ForecastWaiting marks a forecast older than the job's latest report:
	// a round over the forecast budget left the job for a later turn, and
	// the forecast is read less the run time since it was made
	// (ForecastRunSince, seconds).
	ForecastWaiting  bool    `json:"forecast_waiting,omitempty"`
	ForecastRunSince float64 `json:"forecast_run_since_s,omitempty"`
	// ProfileRemaining is the original's profile estimate R̂ (spec §4.3)
	// of a job that declared its schedule, shown beside the online forecast.
	ProfileRemaining float64 `json:"profile_remaining_s,omitempty"`
}

// Validate checks a status reply; `shockwave status` uses it.
func (r *StatusReply) Validate() error {
	const m = "status reply"
	if err := checkVersion(m, r.V); err != nil {
		return err
	}
	if r.Error != nil {
		return r.Error.validate(m)
	}
	if r.GPUs < 0 || r.Round < 0 {
		return fieldErr(m, "gpus", "negative GPU count or round")
	}
	if r.JobsTotal != 0 && r.JobsTotal < len(r.Jobs) {
		return fieldErr(m, "jobs_total", "%d is less than the %d jobs listed", r.JobsTotal, len(r.Jobs))
	}
	if math.IsNaN(r.RoundSeconds) || math.IsNaN(r.Now) {
		return fieldErr(m, "now", "not a number")
	}
	for i := range r.Jobs {
		if err := ValidateJobID(m, r.Jobs[i].Job); err != nil {
			return fmt.Errorf("jobs[%d]: %w", i, err)
		}
	}
	for i, n := range r.Nodes {
		f := fmt.Sprintf("nodes[%d]", i)
		if err := ValidateNodeName(m, f+".name", n.Name); err != nil {
			return err
		}
		if n.GPUs < 0 || n.Used < 0 || n.Used > n.GPUs {
			return fieldErr(m, f, "node %q: %d of %d GPUs in use", n.Name, n.Used, n.GPUs)
		}
	}
	return nil
}
