package protocol

import (
	"encoding/json"
)

// Events carried up through the node agent (docs/agent.md, "The uplink").
//
// A relaying agent (AgentHello.Relay) that also carries its processes'
// traffic up gives each process it starts for a single-process job a
// second descriptor besides the lease pipe: one end of a Unix stream
// socket pair, named by EnvUplinkFD ("FD:INODE", as EnvLeaseFD). The SDK
// then opens no NATS connection at all: it writes UplinkRequest lines
// (one JSON object per line) into the socket and reads UplinkAnswer lines
// from it, and takes its leases from the lease pipe as before.
//
//	register  the job's Register; the agent sends it on its node's
//	          register subject and answers with the RegisterReply
//	events    one event Batch of the job, published by the agent on its
//	          node's events subject with the job named in HdrJob
//	flush     answered once every earlier line of this process has
//	          reached the NATS server (the agent's connection flushed)
//
// A register that nothing answers on the agent's node subject (a
// coordinator older than the uplink) is answered with CodeNoUplink: the
// SDK then closes the uplink and connects to NATS itself.
//
// The agent answers "reconnected" (no ID) when its own connection to NATS
// came back after an outage: the SDK registers again and sends again what
// the coordinator does not hold, as after its own reconnection.
//
// The coordinator accepts an agent's register and events only for a
// submitted job whose current or most recent grant includes the agent's
// node, so an agent vouches only for the jobs it runs. The agent answers
// a line that names another job than the process's own with an error and
// forwards nothing.
//
//	<prefix>.agent.<node>.register  agent → coord.  Register → RegisterReply
//	<prefix>.agent.<node>.events    agent → coord.  Batch (HdrJob: the job)

// An agent forwards at most UplinkLineRate lines a second of one process
// (bursts of UplinkLineBurst) and drops the rest, answering a dropped
// request with an error; the SDK paces its event batches under it.
const (
	UplinkLineRate  = 20
	UplinkLineBurst = 100
)

// EnvUplinkFD names the socket a process writes its registrations and
// event batches into instead of NATS: "FD:INODE".
const EnvUplinkFD = "SHOCKWAVE_UPLINK_FD"

// The agent's job socket (docs/agent.md, "The job socket"): a process the
// agent did not start, resident on the agent's node (Register.Node), may
// still send through the agent instead of opening a NATS connection of its
// own. It connects to the Unix socket at the path EnvAgentSocket names and
// speaks the uplink, with two differences:
//
//	hello  its first line, with an ID and an UplinkHello (the job token in
//	       token mode); answered by a reply carrying an UplinkWelcome (the
//	       node), or an error (forbidden: a wrong token; no_uplink: the
//	       agent takes no resident jobs, as in creds mode), after which
//	       the agent closes the socket
//	lease  written by the agent (no ID, a Lease as data): the leases the
//	       coordinator publishes on the job's subject, which the agent
//	       subscribes to once the job registered through it
//
// The job's Register must name the agent's node; the first register binds
// the socket to its job, as a started process is bound to its own. The
// coordinator accepts an agent's register and events for a job that is not
// submitted only when the job is resident on the agent's node.
const EnvAgentSocket = "SHOCKWAVE_AGENT_SOCKET"

// UplinkHello opens a job socket.
type UplinkHello struct {
	V     int    `json:"v"`
	Token string `json:"token,omitempty"` // the job token (token mode)
}

// UplinkWelcome answers a hello: the node the agent runs on, which the
// job's Register must name.
type UplinkWelcome struct {
	V    int    `json:"v"`
	Node string `json:"node"`
}

// HdrJob names the job whose batch an agent's events message carries.
const HdrJob = "Shockwave-Job"

// Uplink operations.
const (
	UplinkHelloOp     = "hello" // the first line on a job socket
	UplinkRegister    = "register"
	UplinkEvents      = "events"
	UplinkFlush       = "flush"
	UplinkReply       = "reply"       // answer to a hello, register or flush, by ID
	UplinkReconnected = "reconnected" // the agent's connection is back
	UplinkLease       = "lease"       // a lease of the job (job socket only)
)

// MaxUplinkLine bounds one uplink line: a message of limit bytes (0:
// DefaultMaxMessageBytes) and its envelope.
func MaxUplinkLine(limit int) int {
	if limit <= 0 {
		limit = DefaultMaxMessageBytes
	}
	return limit + 1024
}

// UplinkRequest is one line a process writes into its uplink.
type UplinkRequest struct {
	V  int    `json:"v"`
	Op string `json:"op"`
	// ID (register, flush) is echoed by the answer; at least 1.
	ID uint64 `json:"id,omitempty"`
	// Data is the Register (register) or the Batch (events), as it would
	// have been sent over NATS.
	Data json.RawMessage `json:"data,omitempty"`
}

// Validate checks an uplink request's shape; Data is checked by whoever
// reads it (the coordinator decodes registrations and batches strictly).
func (r *UplinkRequest) Validate() error {
	const m = "uplink request"
	if err := checkVersion(m, r.V); err != nil {
		return err
	}
	switch r.Op {
	case UplinkHelloOp, UplinkRegister, UplinkFlush:
		if r.ID == 0 {
			return fieldErr(m, "id", "%s needs an id of at least 1", r.Op)
		}
	case UplinkEvents:
		if r.ID != 0 {
			return fieldErr(m, "id", "events take no id")
		}
	default:
		return fieldErr(m, "op", "unknown operation %.20q (want hello, register, events or flush)", r.Op)
	}
	if (r.Op == UplinkFlush) != (len(r.Data) == 0) {
		return fieldErr(m, "data", "hello, register and events carry data, flush none")
	}
	if len(r.Data) > 0 && r.Data[0] != '{' {
		return fieldErr(m, "data", "want a JSON object")
	}
	return nil
}

// UplinkAnswer is one line the agent writes back into a process's uplink.
type UplinkAnswer struct {
	V     int             `json:"v"`
	Op    string          `json:"op"`
	ID    uint64          `json:"id,omitempty"`
	Data  json.RawMessage `json:"data,omitempty"` // register: the RegisterReply
	Error *Error          `json:"error,omitempty"`
}

// Validate checks an uplink answer.
func (a *UplinkAnswer) Validate() error {
	const m = "uplink answer"
	if err := checkVersion(m, a.V); err != nil {
		return err
	}
	switch a.Op {
	case UplinkReply:
		if a.ID == 0 {
			return fieldErr(m, "id", "a reply needs the id of its request")
		}
	case UplinkReconnected:
		if a.ID != 0 || len(a.Data) > 0 || a.Error != nil {
			return fieldErr(m, "op", "reconnected carries nothing")
		}
	case UplinkLease:
		if a.ID != 0 || len(a.Data) == 0 || a.Error != nil {
			return fieldErr(m, "op", "a lease carries the lease as data and nothing else")
		}
	default:
		return fieldErr(m, "op", "unknown operation %.20q (want reply, reconnected or lease)", a.Op)
	}
	if len(a.Data) > 0 && a.Data[0] != '{' {
		return fieldErr(m, "data", "want a JSON object")
	}
	return nil
}

// DecodeUplinkRequest decodes and validates one uplink line (the agent).
func DecodeUplinkRequest(data []byte, limit int) (*UplinkRequest, error) {
	return decodeAs[UplinkRequest]("uplink request", data, MaxUplinkLine(limit))
}

// DecodeUplinkAnswer decodes and validates one uplink answer (the SDK).
func DecodeUplinkAnswer(data []byte, limit int) (*UplinkAnswer, error) {
	return decodeAs[UplinkAnswer]("uplink answer", data, MaxUplinkLine(limit))
}

// AgentRegister is the subject node's agent registers its processes' jobs on.
func (s Subjects) AgentRegister(node string) string { return s.Prefix + ".agent." + node + ".register" }

// AgentEvents is the subject node's agent publishes its processes' event
// batches on, one batch a message, the job in HdrJob.
func (s Subjects) AgentEvents(node string) string { return s.Prefix + ".agent." + node + ".events" }

// MaxTokenLen bounds the token a hello carries.
const MaxTokenLen = 4096

// Validate checks a hello.
func (h *UplinkHello) Validate() error {
	const m = "uplink hello"
	if err := checkVersion(m, h.V); err != nil {
		return err
	}
	if len(h.Token) > MaxTokenLen {
		return fieldErr(m, "token", "longer than %d bytes", MaxTokenLen)
	}
	return nil
}

// Validate checks a welcome.
func (w *UplinkWelcome) Validate() error {
	const m = "uplink welcome"
	if err := checkVersion(m, w.V); err != nil {
		return err
	}
	return ValidateNodeName(m, "node", w.Node)
}

// DecodeUplinkHello decodes and validates a hello's data (the agent).
func DecodeUplinkHello(data []byte) (*UplinkHello, error) {
	return decodeAs[UplinkHello]("uplink hello", data, MaxTokenLen+256)
}

// DecodeUplinkWelcome decodes and validates a welcome (the SDK).
func DecodeUplinkWelcome(data []byte) (*UplinkWelcome, error) {
	return decodeAs[UplinkWelcome]("uplink welcome", data, 1024)
}
