package policy

import (
	"fmt"

	"github.com/shockwave-sched/shockwave/market"
	"github.com/shockwave-sched/shockwave/protocol"
	"sort"
	"strings"
)

// Measurement is one round's measured throughput of a job: Throughput steps
// per second at BatchSize, recorded under the absolute round index Round at
// whose start the lease result was folded in (spec §3.3 step 2.5).
type Measurement struct {
	Round      int
	Throughput float64
	BatchSize  int
}

// Job is the read-only view of one active job at a round boundary. The Core
// owns the values; policies must not modify them or keep the pointers past the
// call that received them, except through the Job's ID.
type Job struct {
	ID  string
	Seq int // admission sequence number; Snapshot.Jobs is sorted by it

	Model    string
	Mode     string // declared adaptation mode (static, gns, accordion) or ""
	Workers  int    // gang width
	Priority float64

	SubmitTime float64 // seconds; completion time counts from here
	AdmitTime  float64 // round start at which the Core admitted the job
	AdmitRound int

	InitialBatchSize int
	BatchSize        int
	DatasetSize      int
	Throughput       float64 // current isolated rate, steps/s, at BatchSize (0: unknown)
	StepsDone        int64
	TotalSteps       int64
	Epoch            int     // completed epochs
	RunTime          float64 // cumulative seconds of successful execution

	// Planned schedule declared at registration (nil when none).
	PlannedBatchSizes   []int
	PlannedEpochSeconds []float64
	IsolatedSeconds     float64

	// Measurements by round, oldest first.
	Measurements []Measurement
	// LastRun is the last round index the job was scheduled in, -1 if never.
	LastRun int
}

// RemainingSteps is TotalSteps − StepsDone (may be ≤ 0 after a rescale).
func (j *Job) RemainingSteps() int64 { return j.TotalSteps - j.StepsDone }

// Snapshot is the immutable input of one round's allocation.
type Snapshot struct {
	Round int     // round index k, from 0
	Now   float64 // round start, seconds
	GPUs  int
	// Nodes lists the GPU counts of the cluster's nodes in topology order
	// (they sum to GPUs). A gang must fit the nodes too; the coordinator
	// repairs a plan that fits GPUs but not the nodes. Nil or one node: a
	// flat pool.
	Nodes        []int
	RoundSeconds float64
	Jobs         []*Job // active jobs in admission order
}

// Explanation says what the policy decided for one job and why: its share,
// ranking key, the reason it got no GPUs, and for market policies the
// forecast, fair-share target, projected ρ and price. It is the wire type of
// the status reply, so plans are shown exactly as the policy made them.
type Explanation = protocol.PlanEntry

// Plan is a policy's decision for one round: the jobs to dispatch (Run),
// whether the policy recomputed its allocation (Solved), a policy-level note
// (e.g. the solver status) and one Explanation per active job in snapshot
// order. It is the wire type of the status reply.
type Plan = protocol.PlanInfo

// Policy decides which jobs run each round. A policy may keep state, but that
// state must be a deterministic function of the calls it received, so that
// replaying the same calls rebuilds it (the coordinator's durability relies on
// this). Policies are not safe for concurrent use; the Core owns them.
//
// Calls arrive in this order within a round boundary: Observe/Fail/Remove for
// what happened since the previous round (in event order), then Admit for
// each newly admitted job (admission order), then Allocate.
type Policy interface {
	Name() string
	// Admit announces a job that joins the active set in this round. j
	// may be the very view the round's Snapshot holds: the policy reads
	// it, and neither changes it nor keeps it past the call.
	Admit(j *Job)
	// Remove announces that a job left (completed, failed or cancelled).
	Remove(id string)
	// Observe reports a successful slice of execution of a job.
	Observe(id string, elapsed float64, steps int64)
	// Fail reports a lease round in which a job made no progress at all.
	Fail(id string)
	// Allocate returns the jobs to run in round s.Round.
	Allocate(s *Snapshot) (*Plan, error)
}

// Updater is implemented by policies that can take a job's new parameters
// without forgetting what they hold about it (its allocation, deficit,
// attained service, place in a queue). A submitted job's process
// registering replaces the job's placeholder parameters (the gang width
// stays); the Core calls Update then, and Remove and Admit on policies
// that do not implement it.
type Updater interface {
	Update(j *Job)
}

// Reserver is implemented by policies that can make room for many
// admissions at once: the Core calls Reserve(n) before the n admissions
// of a round boundary. When they at least double the jobs the policy
// knows (the first round of a large cluster admits thousands), its
// per-job tables are sized once rather than grown admission by
// admission. It changes no decision.
type Reserver interface {
	Reserve(n int)
}

// Preparer is implemented by policies that can do part of an admission
// ahead of the round boundary that admits the job. The Core calls
// Prepare when it learns of a job (its registration) and hands the result
// to AdmitPrepared at the boundary, so that a boundary admitting
// thousands of jobs (the first round of a large cluster, a sweep
// submitted at once) does only the part that depends on the policy's
// state. Preparing is an optimisation the Core may skip: whatever a job's
// view did meanwhile, AdmitPrepared leaves exactly the state Admit would.
type Preparer interface {
	// Prepare builds what Admit(j) would build from j's view alone. It
	// reads only the policy's configuration and changes nothing; like
	// every other call, it is not made concurrently with them.
	Prepare(j *Job) Prepared
	// AdmitPrepared is Admit(j), using p where Prepare made it from a view
	// of j equal in every field Admit reads; any other p (nil included)
	// is ignored. A p serves one admission.
	AdmitPrepared(j *Job, p Prepared)
}

// Prepared is what a Preparer built ahead of a job's admission; only the
// policy that made it reads it.
type Prepared any

// growMap returns m with room for n more entries: a copy into a table
// sized for them when n is at least len(m) (growing by inserts would copy
// as much again), m itself otherwise.
func growMap[K comparable, V any](m map[K]V, n int) map[K]V {
	if n < max(len(m), 1) {
		return m
	}
	out := make(map[K]V, len(m)+n)
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Factory builds a fresh policy instance.
type Factory func(opts Options) (Policy, error)

// Options carries settings shared by every policy constructor.
type Options struct {
	// Config is a policy-specific configuration (e.g. the Shockwave market
	// hyper-parameters); nil means the policy's documented defaults.
	Config any
	// OnSolve, when set, receives every market instance a market-based
	// policy solves, after the solve (for `simulate --dump-instances`).
	OnSolve func(*market.Instance)
	// ReallocateOnChange makes the Gavel-round baselines re-allocate as
	// soon as jobs arrive or leave while GPUs would stay idle, instead of
	// at most every DefaultMinResetSeconds (GavelRound). Live coordinators
	// turn it on; the simulator leaves it off, like the original.
	ReallocateOnChange bool
}

var (
	registry = map[string]Factory{}
	aliases  = map[string]string{}
)

// Register makes a policy available by name; aliases resolve to it too.
// It panics on a duplicate name, as it is called from init functions.
func Register(name string, f Factory, alias ...string) {
	if _, dup := registry[name]; dup {
		panic("policy: duplicate policy " + name)
	}
	registry[name] = f
	for _, a := range alias {
		aliases[a] = name
	}
}

// Canonical resolves a policy name or alias to its canonical name.
func Canonical(name string) (string, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	if a, ok := aliases[n]; ok {
		n = a
	}
	if _, ok := registry[n]; !ok {
		return "", fmt.Errorf("policy: unknown policy %q (known: %s)", name, strings.Join(Names(), ", "))
	}
	return n, nil
}

// New builds the named policy (canonical name or alias).
func New(name string, opts Options) (Policy, error) {
	n, err := Canonical(name)
	if err != nil {
		return nil, err
	}
	return registry[n](opts)
}

// Names lists the canonical policy names, sorted.
func Names() []string {
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
