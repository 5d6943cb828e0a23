package protocol

// Register announces a job to the coordinator. It is sent once per job
// (request/reply in the service); registering again with the same id after a
// restart resumes the job with its recorded progress.
type Register struct {
	V   int    `json:"v"`
	Job string `json:"job"` // unique id, one NATS subject token

	Name  string `json:"name,omitempty"` // free-form label for people
	Model string `json:"model"`          // model family, e.g. "ResNet-18"; forecasts pool jobs of one family
	Mode  string `json:"mode,omitempty"` // declared adaptation mode: static, gns or accordion (informational)

	Workers     int     `json:"workers"`            // gang width: GPUs needed in every round it runs
	BatchSize   int     `json:"batch_size"`         // initial batch size
	DatasetSize int     `json:"dataset_size"`       // samples per epoch
	TotalSteps  int64   `json:"total_steps"`        // iterations to run at the initial batch size
	Priority    float64 `json:"priority,omitempty"` // weight, default 1

	// Throughput is the job's isolated rate at its initial batch size on
	// Workers GPUs, in steps per second, when known (0: unknown).
	Throughput float64 `json:"throughput,omitempty"`
	// SubmitTime is when the job was submitted, in seconds on the
	// coordinator's clock; 0 means "now". Job completion times count from it.
	SubmitTime float64 `json:"submit_time,omitempty"`
	// IsolatedSeconds is the job's expected run time alone on its GPUs, when
	// known. It enables the run-time limit (the coordinator ends a job whose
	// accumulated run time exceeds the limit factor times this).
	IsolatedSeconds float64 `json:"isolated_seconds,omitempty"`
	// Schedule is the planned batch size and duration of every epoch, when
	// the job knows them in advance (an expert schedule). Optional.
	Schedule *Schedule `json:"schedule,omitempty"`

	// Node, when set, says the job's process is resident on that node (it
	// suspends in place): the coordinator grants it devices there only.
	Node string `json:"node,omitempty"`
	// Visible lists the local device indices the resident process can use
	// on Node (empty: every device of the node).
	Visible []int `json:"visible,omitempty"`
	// Relayed says the registering process reads its leases from its node
	// agent's pipe (EnvLeaseFD, checked open in the process): the
	// coordinator need not publish the job's RUN and SUSPEND leases while
	// the agent of the node it runs on relays (AgentHello.Relay).
	Relayed bool `json:"relayed,omitempty"`
}

// Schedule is a job's planned batch-size regime per epoch.
type Schedule struct {
	BatchSizes   []int     `json:"batch_sizes"`             // planned batch size of epoch e
	EpochSeconds []float64 `json:"epoch_seconds,omitempty"` // planned isolated duration of epoch e
}

// EventType names the kind of a job event.
type EventType string

// Event kinds a job sends on its events subject.
const (
	// EventProgress reports training since the previous event: Steps
	// iterations in Elapsed seconds at BatchSize, and the cumulative state.
	EventProgress EventType = "progress"
	// EventBatchSize reports a batch-size change and the rescaled totals.
	EventBatchSize EventType = "batch_size"
	// EventDone reports that the job finished its work.
	EventDone EventType = "done"
)

// Event is one job event. Which fields matter depends on Type; see Validate.
type Event struct {
	V    int       `json:"v"`
	Type EventType `json:"type"`
	Job  string    `json:"job"`
	Seq  uint64    `json:"seq"` // per job, strictly increasing from 1

	Steps   int64   `json:"steps,omitempty"`   // progress: iterations since the previous event
	Elapsed float64 `json:"elapsed,omitempty"` // progress: seconds of training since the previous event

	StepsDone  int64   `json:"steps_done"`           // cumulative iterations, after this event
	TotalSteps int64   `json:"total_steps"`          // iterations the job needs in all, at BatchSize
	Epoch      int     `json:"epoch"`                // completed epochs
	BatchSize  int     `json:"batch_size"`           // batch size used (progress) or adopted (batch_size)
	Throughput float64 `json:"throughput,omitempty"` // current isolated rate estimate, steps/s (0: unknown)
}

// Batch is what an SDK publishes: one or more events of one job, in order.
type Batch struct {
	V      int     `json:"v"`
	Job    string  `json:"job"`
	Events []Event `json:"events"`
}

// Action is what a lease tells a job to do.
type Action string

// Lease actions.
const (
	Run     Action = "RUN"     // train on Workers until Expiry
	Suspend Action = "SUSPEND" // checkpoint and release the GPUs; wait for RUN
	Exit    Action = "EXIT"    // the coordinator ended the job; stop for good
)

// Lease is the coordinator's decision for one job for one round.
type Lease struct {
	V       int    `json:"v"`
	Job     string `json:"job"`
	Round   int    `json:"round"`
	Action  Action `json:"action"`
	Workers []int  `json:"workers,omitempty"` // granted cluster-wide GPU ids (RUN only)
	// Devices names the same grant per node: the node's name and its local
	// device indices, in the order of Workers (RUN only; empty from a
	// coordinator that knows no nodes).
	Devices []NodeDevices `json:"devices,omitempty"`
	// Epoch is the issuing leader's fencing epoch (0: none). A job drops a
	// lease whose epoch is below the highest it has seen.
	Epoch uint64 `json:"epoch,omitempty"`
	// Extension is true when the job held a RUN lease in the previous round
	// too: it keeps running with no restart.
	Extension bool    `json:"extension,omitempty"`
	Start     float64 `json:"start"`  // seconds on the coordinator's clock
	Expiry    float64 `json:"expiry"` // the lease ends here unless renewed
	Reason    string  `json:"reason,omitempty"`
}

// NodeDevices is one node's part of a grant: local device indices on Node.
type NodeDevices struct {
	Node    string `json:"node"`
	Devices []int  `json:"devices"`
}

// Clone is a deep copy of l.
func (l Lease) Clone() Lease {
	if l.Workers != nil {
		l.Workers = append([]int(nil), l.Workers...)
	}
	if l.Devices != nil {
		d := make([]NodeDevices, len(l.Devices))
		for i, x := range l.Devices {
			d[i] = NodeDevices{Node: x.Node, Devices: append([]int(nil), x.Devices...)}
		}
		l.Devices = d
	}
	return l
}
