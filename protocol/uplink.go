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

// EnvUplinkFD names the socket a process writes its registrations and
// event batches into instead of NATS: "FD:INODE".
const EnvUplinkFD = "SHOCKWAVE_UPLINK_FD"

// HdrJob names the job whose batch an agent's events message carries.
const HdrJob = "Shockwave-Job"

// Uplink operations.
const (
	UplinkRegister    = "register"
	UplinkEvents      = "events"
	UplinkFlush       = "flush"
	UplinkReply       = "reply"       // answer to a register or flush, by ID
	UplinkReconnected = "reconnected" // the agent's connection is back
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
	case UplinkRegister, UplinkFlush:
		if r.ID == 0 {
			return fieldErr(m, "id", "%s needs an id of at least 1", r.Op)
		}
	case UplinkEvents:
		if r.ID != 0 {
			return fieldErr(m, "id", "events take no id")
		}
	default:
		return fieldErr(m, "op", "unknown operation %.20q (want register, events or flush)", r.Op)
	}
	if (r.Op == UplinkFlush) != (len(r.Data) == 0) {
		return fieldErr(m, "data", "register and events carry data, flush none")
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
	default:
		return fieldErr(m, "op", "unknown operation %.20q (want reply or reconnected)", a.Op)
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
