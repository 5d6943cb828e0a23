package protocol

import (
	"fmt"
	"regexp"
	"strings"
)

// Node agents and submitted jobs (docs/agent.md).
//
// A node agent (`shockwave agent`) joins the coordinator and then sends a
// heartbeat every few seconds; both are AgentHello requests on its node's
// own subjects, answered with an AgentReply that carries the node's desired
// state. The coordinator also publishes the desired state on the node's
// desired subject whenever it changes. The agent starts and stops processes
// to match it and reports every exit (AgentReport). Jobs are submitted
// (Submit) and cancelled (Cancel) by operators; both are stored in the
// coordinator's log before they are acknowledged (SubmitReply).
//
//	<prefix>.agent.<node>.join       agent → coord.  AgentHello → AgentReply
//	<prefix>.agent.<node>.heartbeat  agent → coord.  AgentHello → AgentReply
//	<prefix>.agent.<node>.report     agent → coord.  AgentReport → AgentReply
//	<prefix>.agent.<node>.creds      agent → coord.  CredsRequest → CredsReply
//	<prefix>.agent.<node>.register   agent → coord.  Register → RegisterReply (uplink.go)
//	<prefix>.agent.<node>.events     agent → coord.  Batch (uplink.go)
//	<prefix>.node.<node>.desired     coord. → agent  NodeDesired
//	<prefix>.submit                  operator        Submit → SubmitReply
//	<prefix>.cancel                  operator        Cancel → SubmitReply

// Limits of submissions.
const (
	MaxArgs        = 1024
	MaxArgBytes    = 16 << 10
	MaxCommandSize = 128 << 10
	MaxEnv         = 256
	MaxEnvBytes    = 32 << 10
	MaxRetries     = 100
	MaxAgentJobs   = 4096
)

// AgentHello is an agent's join request and heartbeat.
type AgentHello struct {
	V    int    `json:"v"`
	Node string `json:"node"`
	GPUs int    `json:"gpus"`
	Type string `json:"type,omitempty"` // GPU type label
	// Addr is the host name or address other nodes reach this node at
	// (MASTER_ADDR of multi-node jobs whose rank 0 runs here).
	Addr string `json:"addr,omitempty"`
	// Relay says the agent relays each job's lease to the processes it
	// starts, through a pipe named by EnvLeaseFD. The coordinator then
	// puts the job's current RUN lease into its assignments on the node
	// (Assignment.Lease) and publishes no RUN or SUSPEND lease on the
	// job's subject for a job whose every node relays: one desired state
	// per node replaces a message per job (docs/agent.md).
	Relay bool `json:"relay,omitempty"`
}

// EnvLeaseFD names the pipe on which a relaying agent writes a process's
// leases, one Lease as JSON per line, the latest last. Its value is
// "FD:INODE": the descriptor number in the process and the pipe's inode,
// so that a process that inherited the variable but not the descriptor (a
// launcher in between closed it, and the number now names another file)
// does not read from the wrong file.
const EnvLeaseFD = "SHOCKWAVE_LEASE_FD"

// AgentReply answers an agent's join, heartbeat or report. Desired is the
// node's desired state (join and heartbeat).
type AgentReply struct {
	V       int          `json:"v"`
	Error   *Error       `json:"error,omitempty"`
	Desired *NodeDesired `json:"desired,omitempty"`
}

// CodeUnknownNode answers a heartbeat of a node the coordinator does not
// count as joined (it timed out, or the coordinator restarted on a new
// log): the agent joins again.
const CodeUnknownNode ErrorCode = "unknown_node"

// CodeNoUplink answers an uplink registration that no coordinator takes on
// the agent's node subject (one older than the uplink, or none leading at
// that moment): the process registers over a NATS connection of its own
// instead (uplink.go).
const CodeNoUplink ErrorCode = "no_uplink"

// NodeDesired is what the coordinator wants running on one node.
type NodeDesired struct {
	V     int     `json:"v"`
	Node  string  `json:"node"`
	Round int     `json:"round"` // the round the state belongs to
	Now   float64 `json:"now"`   // coordinator clock when it was built
	// Epoch is the issuing leader's fencing epoch (0: none).
	Epoch uint64       `json:"epoch,omitempty"`
	Jobs  []Assignment `json:"jobs"`
	// Residents are the current RUN leases of the jobs resident on the
	// node whose processes reach the coordinator through the agent's job
	// socket and registered as relayed (the agent marks them so when it
	// relays): the agent writes each into the job's socket, and writes a
	// SUSPEND into the socket of a job whose lease it relayed that is no
	// longer listed, as it does for the processes it started. The
	// coordinator then publishes none of their RUN or SUSPEND leases.
	Residents []Lease `json:"residents,omitempty"`
}

// Assignment is one job's share of a node: the processes to run there.
type Assignment struct {
	Job string `json:"job"`
	// Attempt counts the job's restarts after failures: a new attempt
	// replaces every process of the previous one.
	Attempt int `json:"attempt"`
	// Since is the round the job's current uninterrupted grant began: a
	// job suspended and granted again gets new processes.
	Since   int      `json:"since"`
	Command []string `json:"command"`
	Env     []string `json:"env,omitempty"`
	Devices []int    `json:"devices"` // local device indices granted here
	// Procs is the number of processes to start here; the devices are
	// split among them in order, in equal parts.
	Procs int `json:"procs"`
	// RankOffset is the global rank of this node's first process;
	// WorldSize counts the job's processes on all nodes.
	RankOffset int     `json:"rank_offset"`
	WorldSize  int     `json:"world_size"`
	MasterAddr string  `json:"master_addr"`
	MasterPort int     `json:"master_port"`
	Expiry     float64 `json:"expiry"` // the grant ends here unless renewed
	// Lease is the job's current RUN lease as the coordinator issued it,
	// for the agent to relay to the processes (set only on a node whose
	// agent relays, AgentHello.Relay). It may end later than Expiry (a
	// lease of several rounds); the agent still enforces Expiry.
	Lease *Lease `json:"lease,omitempty"`
}

// AgentReport tells the coordinator what happened to a job's processes on
// a node. Exited reports the run's end: when every process of the run on
// the node exited, with the first non-zero status (0 when all succeeded).
type AgentReport struct {
	V       int    `json:"v"`
	Node    string `json:"node"`
	Job     string `json:"job"`
	Attempt int    `json:"attempt"`
	Since   int    `json:"since"`
	Event   string `json:"event"` // "started" or "exited"
	Code    int    `json:"code"`  // exited: exit status (128+n for signal n)
	Detail  string `json:"detail,omitempty"`
}

// Agent report events.
const (
	ReportStarted = "started"
	ReportExited  = "exited"
)

// CredsRequest asks for the credentials of a job placed on the agent's node.
type CredsRequest struct {
	V    int    `json:"v"`
	Node string `json:"node"`
	Job  string `json:"job"`
}

// CredsReply carries a job's .creds file.
type CredsReply struct {
	V     int    `json:"v"`
	Error *Error `json:"error,omitempty"`
	Creds string `json:"creds,omitempty"`
}

// Submit asks the coordinator to run a command as a job.
type Submit struct {
	V int `json:"v"`
	// Job is the id the coordinator assigned; a client leaves it empty.
	Job     string   `json:"job,omitempty"`
	Name    string   `json:"name,omitempty"`
	Command []string `json:"command"`
	Workers int      `json:"workers"`
	Env     []string `json:"env,omitempty"` // K=V
	// RanksPerNode is the number of processes per node of the grant (0
	// means 1); a node's devices are split among them.
	RanksPerNode int `json:"ranks_per_node,omitempty"`
	// MaxRetries bounds the restarts after non-zero exits.
	MaxRetries int `json:"max_retries"`
}

// Cancel asks the coordinator to end a job.
type Cancel struct {
	V   int    `json:"v"`
	Job string `json:"job"`
}

// SubmitReply answers Submit and Cancel once the request is in the log.
type SubmitReply struct {
	V     int    `json:"v"`
	Error *Error `json:"error,omitempty"`
	Job   string `json:"job,omitempty"`
	State string `json:"state,omitempty"`
}

var envKeyPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ReservedEnv lists the variables the agent sets itself; a submission may
// not set them (a job may not pose as another or change its devices).
var ReservedEnv = []string{"SHOCKWAVE_JOB_ID", "SHOCKWAVE_NATS_URL", "SHOCKWAVE_EXIT_MODE", "SHOCKWAVE_CHECKPOINT_DIR",
	"SHOCKWAVE_CREDS", "SHOCKWAVE_TOKEN", "SHOCKWAVE_PREFIX", "SHOCKWAVE_AGENT_NODE", "SHOCKWAVE_ATTEMPT", EnvLeaseFD, EnvUplinkFD,
	// a resident process's node and devices (the SDK): never an agent's job
	"SHOCKWAVE_NODE", "SHOCKWAVE_VISIBLE_DEVICES",
	"CUDA_VISIBLE_DEVICES", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK"}

func reservedEnv(k string) bool {
	for _, r := range ReservedEnv {
		if k == r {
			return true
		}
	}
	return false
}

// ValidateEnv checks one K=V entry of a submission.
func ValidateEnv(msg, field, kv string) error {
	k, v, ok := strings.Cut(kv, "=")
	switch {
	case !ok:
		return fieldErr(msg, field, "%.40q is not KEY=VALUE", kv)
	case !envKeyPattern.MatchString(k):
		return fieldErr(msg, field, "variable name %.40q: use letters, digits and '_', not starting with a digit", k)
	case reservedEnv(k):
		return fieldErr(msg, field, "%s is set by the agent (reserved: %s)", k, strings.Join(ReservedEnv, ", "))
	case strings.ContainsRune(v, 0):
		return fieldErr(msg, field, "value of %s contains a NUL byte", k)
	}
	return nil
}

// Validate checks a submission.
func (s *Submit) Validate() error {
	const m = "submit"
	if err := checkVersion(m, s.V); err != nil {
		return err
	}
	if s.Job != "" {
		if err := ValidateJobID(m, s.Job); err != nil {
			return err
		}
	}
	if len(s.Name) > MaxModelNameLen {
		return fieldErr(m, "name", "longer than %d bytes", MaxModelNameLen)
	}
	if err := validateCommand(m, s.Command); err != nil {
		return err
	}
	if s.Workers < 1 || s.Workers > MaxWorkers {
		return fieldErr(m, "workers", "%d out of range [1, %d]", s.Workers, MaxWorkers)
	}
	if len(s.Env) > MaxEnv {
		return fieldErr(m, "env", "%d variables, at most %d", len(s.Env), MaxEnv)
	}
	size := 0
	for i, kv := range s.Env {
		if err := ValidateEnv(m, fmt.Sprintf("env[%d]", i), kv); err != nil {
			return err
		}
		size += len(kv)
	}
	if size > MaxEnvBytes {
		return fieldErr(m, "env", "%d bytes, at most %d", size, MaxEnvBytes)
	}
	if s.RanksPerNode < 0 || s.RanksPerNode > s.Workers {
		return fieldErr(m, "ranks_per_node", "%d out of range [0, workers=%d]", s.RanksPerNode, s.Workers)
	}
	if s.RanksPerNode > 1 && s.Workers%s.RanksPerNode != 0 {
		return fieldErr(m, "ranks_per_node", "%d does not divide workers=%d", s.RanksPerNode, s.Workers)
	}
	if s.MaxRetries < 0 || s.MaxRetries > MaxRetries {
		return fieldErr(m, "max_retries", "%d out of range [0, %d]", s.MaxRetries, MaxRetries)
	}
	return nil
}

func validateCommand(m string, argv []string) error {
	if len(argv) == 0 || argv[0] == "" {
		return fieldErr(m, "command", "empty command")
	}
	if len(argv) > MaxArgs {
		return fieldErr(m, "command", "%d arguments, at most %d", len(argv), MaxArgs)
	}
	size := 0
	for i, a := range argv {
		if len(a) > MaxArgBytes {
			return fieldErr(m, fmt.Sprintf("command[%d]", i), "longer than %d bytes", MaxArgBytes)
		}
		if strings.ContainsRune(a, 0) {
			return fieldErr(m, fmt.Sprintf("command[%d]", i), "contains a NUL byte")
		}
		size += len(a)
	}
	if size > MaxCommandSize {
		return fieldErr(m, "command", "%d bytes, at most %d", size, MaxCommandSize)
	}
	return nil
}

// Validate checks a cancellation.
func (c *Cancel) Validate() error {
	if err := checkVersion("cancel", c.V); err != nil {
		return err
	}
	return ValidateJobID("cancel", c.Job)
}

// Validate checks an agent's join or heartbeat.
func (h *AgentHello) Validate() error {
	const m = "agent hello"
	if err := checkVersion(m, h.V); err != nil {
		return err
	}
	if err := ValidateNodeName(m, "node", h.Node); err != nil {
		return err
	}
	if h.GPUs < 1 || h.GPUs > 1024 {
		return fieldErr(m, "gpus", "%d out of range [1, 1024]", h.GPUs)
	}
	if len(h.Type) > 64 {
		return fieldErr(m, "type", "longer than 64 bytes")
	}
	if len(h.Addr) > 253 || strings.ContainsAny(h.Addr, " \t\r\n\x00/") {
		return fieldErr(m, "addr", "%.40q is not a host name or address", h.Addr)
	}
	return nil
}

// Validate checks an agent report.
func (r *AgentReport) Validate() error {
	const m = "agent report"
	if err := checkVersion(m, r.V); err != nil {
		return err
	}
	if err := ValidateNodeName(m, "node", r.Node); err != nil {
		return err
	}
	if err := ValidateJobID(m, r.Job); err != nil {
		return err
	}
	if r.Attempt < 0 || r.Since < 0 {
		return fieldErr(m, "attempt", "negative attempt or round")
	}
	switch r.Event {
	case ReportStarted, ReportExited:
	default:
		return fieldErr(m, "event", "unknown event %q (want started or exited)", r.Event)
	}
	if r.Code < 0 || r.Code > 255 {
		return fieldErr(m, "code", "exit status %d out of range [0, 255]", r.Code)
	}
	if len(r.Detail) > 1024 {
		return fieldErr(m, "detail", "longer than 1024 bytes")
	}
	return nil
}

// Validate checks a credentials request.
func (r *CredsRequest) Validate() error {
	const m = "creds request"
	if err := checkVersion(m, r.V); err != nil {
		return err
	}
	if err := ValidateNodeName(m, "node", r.Node); err != nil {
		return err
	}
	return ValidateJobID(m, r.Job)
}

// Validate checks a node's desired state; the agent uses it.
func (d *NodeDesired) Validate() error {
	const m = "desired state"
	if err := checkVersion(m, d.V); err != nil {
		return err
	}
	if err := ValidateNodeName(m, "node", d.Node); err != nil {
		return err
	}
	if err := checkFinite(m, "now", d.Now, 0, MaxSeconds); err != nil {
		return err
	}
	if len(d.Jobs) > MaxAgentJobs {
		return fieldErr(m, "jobs", "%d assignments, at most %d", len(d.Jobs), MaxAgentJobs)
	}
	for i := range d.Jobs {
		if err := d.Jobs[i].validate(m, fmt.Sprintf("jobs[%d]", i)); err != nil {
			return err
		}
	}
	if len(d.Residents) > MaxNodeResidents {
		return fieldErr(m, "residents", "%d leases, at most %d", len(d.Residents), MaxNodeResidents)
	}
	seen := make(map[string]bool, len(d.Residents))
	for i := range d.Residents {
		l := &d.Residents[i]
		if err := l.Validate(); err != nil {
			return fmt.Errorf("residents[%d]: %w", i, err)
		}
		if l.Action != Run || seen[l.Job] {
			return fieldErr(m, fmt.Sprintf("residents[%d]", i), "a %s lease of job %q (want one RUN lease per job)", l.Action, l.Job)
		}
		seen[l.Job] = true
	}
	return nil
}

// MaxNodeResidents bounds the resident jobs' leases of one desired state.
const MaxNodeResidents = 4096

func (a *Assignment) validate(m, f string) error {
	if err := ValidateJobID(m, a.Job); err != nil {
		return err
	}
	if err := validateCommand(m, a.Command); err != nil {
		return err
	}
	for i, kv := range a.Env {
		if err := ValidateEnv(m, fmt.Sprintf("%s.env[%d]", f, i), kv); err != nil {
			return err
		}
	}
	if len(a.Devices) == 0 || a.Procs < 1 || len(a.Devices)%a.Procs != 0 {
		return fieldErr(m, f+".procs", "%d processes for %d devices", a.Procs, len(a.Devices))
	}
	for i, x := range a.Devices {
		if x < 0 || x >= MaxWorkers {
			return fieldErr(m, fmt.Sprintf("%s.devices[%d]", f, i), "device index %d out of range", x)
		}
	}
	if a.RankOffset < 0 || a.WorldSize < a.RankOffset+a.Procs || a.Attempt < 0 || a.Since < 0 {
		return fieldErr(m, f+".world_size", "rank offset %d + %d processes exceed world size %d", a.RankOffset, a.Procs, a.WorldSize)
	}
	if a.MasterPort < 0 || a.MasterPort > 65535 {
		return fieldErr(m, f+".master_port", "%d out of range", a.MasterPort)
	}
	if l := a.Lease; l != nil {
		if err := l.Validate(); err != nil {
			return fmt.Errorf("%s.lease: %w", f, err)
		}
		if l.Job != a.Job || l.Action != Run {
			return fieldErr(m, f+".lease", "a %s lease of job %q in the assignment of job %q (want the job's RUN lease)", l.Action, l.Job, a.Job)
		}
	}
	return checkFinite(m, f+".expiry", a.Expiry, 0, MaxSeconds)
}

// Validate checks an agent reply.
func (r *AgentReply) Validate() error {
	if err := checkVersion("agent reply", r.V); err != nil {
		return err
	}
	if r.Error != nil {
		return r.Error.validate("agent reply")
	}
	if r.Desired != nil {
		return r.Desired.Validate()
	}
	return nil
}

// Validate checks a submission reply.
func (r *SubmitReply) Validate() error {
	if err := checkVersion("submit reply", r.V); err != nil {
		return err
	}
	if r.Error != nil {
		return r.Error.validate("submit reply")
	}
	return ValidateJobID("submit reply", r.Job)
}

// Validate checks a credentials reply.
func (r *CredsReply) Validate() error {
	if err := checkVersion("creds reply", r.V); err != nil {
		return err
	}
	if r.Error != nil {
		return r.Error.validate("creds reply")
	}
	if r.Creds == "" {
		return fieldErr("creds reply", "creds", "empty credentials")
	}
	return nil
}

// DecodeSubmit decodes and validates a submission.
func DecodeSubmit(data []byte, limit int) (*Submit, error) {
	return decodeAs[Submit]("submit", data, limit)
}

// DecodeCancel decodes and validates a cancellation.
func DecodeCancel(data []byte, limit int) (*Cancel, error) {
	return decodeAs[Cancel]("cancel", data, limit)
}

// DecodeAgentHello decodes and validates an agent's join or heartbeat.
func DecodeAgentHello(data []byte, limit int) (*AgentHello, error) {
	return decodeAs[AgentHello]("agent hello", data, limit)
}

// DecodeAgentReport decodes and validates an agent report.
func DecodeAgentReport(data []byte, limit int) (*AgentReport, error) {
	return decodeAs[AgentReport]("agent report", data, limit)
}

// DecodeCredsRequest decodes and validates a credentials request.
func DecodeCredsRequest(data []byte, limit int) (*CredsRequest, error) {
	return decodeAs[CredsRequest]("creds request", data, limit)
}

// DecodeNodeDesired decodes and validates a node's desired state.
func DecodeNodeDesired(data []byte, limit int) (*NodeDesired, error) {
	return decodeAs[NodeDesired]("desired state", data, limit)
}

// DecodeAgentReply decodes and validates an agent reply.
func DecodeAgentReply(data []byte, limit int) (*AgentReply, error) {
	return decodeAs[AgentReply]("agent reply", data, limit)
}

// DecodeSubmitReply decodes and validates a submission reply.
func DecodeSubmitReply(data []byte, limit int) (*SubmitReply, error) {
	return decodeAs[SubmitReply]("submit reply", data, limit)
}

// DecodeCredsReply decodes and validates a credentials reply.
func DecodeCredsReply(data []byte, limit int) (*CredsReply, error) {
	return decodeAs[CredsReply]("creds reply", data, limit)
}

func decodeAs[T any, P interface {
	*T
	validator
}](kind string, data []byte, limit int) (*T, error) {
	var v T
	if err := decodeStrict(kind, data, limit, P(&v)); err != nil {
		return nil, err
	}
	return &v, nil
}

// Agent subjects (see the table at the top of this file).

// AgentJoin is the subject node's agent joins on.
func (s Subjects) AgentJoin(node string) string { return s.Prefix + ".agent." + node + ".join" }

// AgentHeartbeat is the subject node's agent sends heartbeats on.
func (s Subjects) AgentHeartbeat(node string) string {
	return s.Prefix + ".agent." + node + ".heartbeat"
}

// AgentReport is the subject node's agent reports process events on.
func (s Subjects) AgentReport(node string) string { return s.Prefix + ".agent." + node + ".report" }

// AgentCreds is the subject node's agent requests job credentials on.
func (s Subjects) AgentCreds(node string) string { return s.Prefix + ".agent." + node + ".creds" }

// AgentAll matches every agent request subject of node ("*": every node).
func (s Subjects) AgentAll(node string) string { return s.Prefix + ".agent." + node + ".*" }

// Desired is the subject node's desired state is published on.
func (s Subjects) Desired(node string) string { return s.Prefix + ".node." + node + ".desired" }

// AgentInbox is the reply-subject prefix reserved for node's agent.
func (s Subjects) AgentInbox(node string) string { return "_INBOX." + s.Prefix + ".agent." + node }

// Submit is the job submission subject.
func (s Subjects) Submit() string { return s.Prefix + ".submit" }

// Cancel is the job cancellation subject.
func (s Subjects) Cancel() string { return s.Prefix + ".cancel" }

// AgentSubject splits an agent request subject into node and verb.
func (s Subjects) AgentSubject(subject string) (node, verb string, ok bool) {
	rest, ok := strings.CutPrefix(subject, s.Prefix+".agent.")
	if !ok {
		return "", "", false
	}
	node, verb, ok = strings.Cut(rest, ".")
	if !ok || ValidateNodeName("subject", "node", node) != nil {
		return "", "", false
	}
	switch verb {
	case "join", "heartbeat", "report", "creds", "register", "events":
		return node, verb, true
	}
	return "", "", false
}
