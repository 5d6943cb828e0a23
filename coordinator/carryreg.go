package coordinator

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"
	"unicode"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shockwave-sched/shockwave/protocol"
)

// Carried registrations: the registrations the leader takes (a job's own,
// and those agents carry for their processes) enter the log several to a
// record, as agents' event batches do (carry.go). When thousands of jobs
// start at once, a record each queued the log's writes: a tick record
// appended behind 3,753 registrations took 494 ms to come back through the
// log, and with it the first round (docs/scale.md, session 18). The leader
// gathers the registrations that arrive within CarryWindow of the first
// into one record on <prefix>.log.registers; the fold takes it apart into
// the register records they used to be, each answered once folded as
// before, so a registration is still durable before its reply.
//
// The record's data is a version byte (registersVersion) and then, per
// registration: the node whose agent carried it ("" for a job's own), the
// subject its reply goes to, and the registration as it came, each a
// string (an unsigned varint length, then the bytes). The record's NATS
// header carries hdrResidents when agents may speak for resident jobs, as
// a single carried registration's would.
const logRegisters = "log.registers"

const registersVersion = 1

// maxCarriedReply bounds a carried registration's reply subject; a
// registration with a longer one is appended on its own.
const maxCarriedReply = 512

// carriedRegistration is one registration the leader took: the node whose
// agent carried it ("" for a job's own), its reply subject, the
// registration, and what answers the requester when the log does not take
// the record it is in (leader only; not encoded).
type carriedRegistration struct {
	node, reply string
	data        []byte
	fail        func(error)
}

// registrationSize is what appendRegistration adds for g, at most.
func registrationSize(g carriedRegistration) int {
	return len(g.node) + len(g.reply) + len(g.data) + 3*binary.MaxVarintLen32
}

// appendRegistration encodes g onto buf (which starts with the version
// byte).
func appendRegistration(buf []byte, g carriedRegistration) []byte {
	buf = appendString(appendString(buf, g.node), g.reply)
	buf = binary.AppendUvarint(buf, uint64(len(g.data)))
	return append(buf, g.data...)
}

// validReply says a reply subject may be carried: 1 to maxCarriedReply
// printable bytes without spaces (NATS gave it to the requester; a record
// that claims another is damaged).
func validReply(s string) error {
	if s == "" || len(s) > maxCarriedReply {
		return fmt.Errorf("reply subject of %d bytes, want 1 to %d", len(s), maxCarriedReply)
	}
	for _, c := range s {
		if c > unicode.MaxASCII || !unicode.IsGraphic(c) || c == ' ' {
			return fmt.Errorf("reply subject %q has a byte no subject has", s)
		}
	}
	return nil
}

// decodeRegisters takes a record of carried registrations apart; limit
// bounds each registration (0: none). Any damage refuses the whole
// record, naming where.
func decodeRegisters(data []byte, limit int) ([]carriedRegistration, error) {
	if len(data) == 0 || data[0] != registersVersion {
		return nil, fmt.Errorf("%w: version %v, want %d", errCarried, head(data), registersVersion)
	}
	rd := &fieldReader{rest: data[1:], item: "registration"}
	var out []carriedRegistration
	for i := 0; len(rd.rest) > 0; i++ {
		if i == maxCarried {
			return nil, fmt.Errorf("%w: more than %d registrations", errCarried, maxCarried)
		}
		nodeb, err := rd.field(i, "node", protocol.MaxNodeNameLen)
		if err != nil {
			return nil, err
		}
		node := string(nodeb)
		if node != "" {
			if err := protocol.ValidateNodeName("carried registration", "node", node); err != nil {
				return nil, fmt.Errorf("%w: registration %d: %w", errCarried, i, err)
			}
		}
		replyb, err := rd.field(i, "reply subject", maxCarriedReply)
		if err != nil {
			return nil, err
		}
		reply := string(replyb)
		if err := validReply(reply); err != nil {
			return nil, fmt.Errorf("%w: registration %d: %w", errCarried, i, err)
		}
		reg, err := rd.field(i, "registration", limit)
		if err != nil {
			return nil, err
		}
		out = append(out, carriedRegistration{node: node, reply: reply, data: reg})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no registrations", errCarried)
	}
	return out, nil
}

// unpackRegisters turns a record of carried registrations into the
// register records they would have been on their own: the reply in
// hdrReply, marked with the node that carried it, at the record's place in
// the log.
func unpackRegisters(r record, subj protocol.Subjects, limit int) ([]record, error) {
	gs, err := decodeRegisters(r.Data, limit)
	if err != nil {
		return nil, err
	}
	residents := r.Header.Get(hdrResidents) != ""
	out := make([]record, len(gs))
	for i, g := range gs {
		out[i] = record{Seq: r.Seq, Pending: r.Pending, Time: r.Time, Subject: subj.Prefix + "." + logRegister,
			Header: nats.Header{hdrReply: []string{g.reply}}, Data: g.data, via: g.node, residents: residents && g.node != ""}
	}
	return out, nil
}

// RegistersSubject is the subject of carried registrations in the log of
// prefix; RegisteredJobs names the job of each registration in one, in
// order (a registration that does not decode: ""). Both are for tools and
// tests that read the log.
func RegistersSubject(prefix string) string { return prefix + "." + logRegisters }

// RegisteredJobs: see RegistersSubject.
func RegisteredJobs(data []byte) ([]string, error) {
	gs, err := decodeRegisters(data, 0)
	jobs := make([]string, len(gs))
	for i, g := range gs {
		if reg, err := protocol.DecodeRegister(g.data, 0); err == nil {
			jobs[i] = reg.Job
		}
	}
	return jobs, err
}

// carryRegistration appends a registration the leader accepted: into the
// registrations being gathered, or, when the window is off or its reply
// subject is too long to carry, on its own, with hdr (hdrVia and
// hdrResidents already set for an agent's). fail answers the requester
// when the log does not take it.
func (s *Service) carryRegistration(m *nats.Msg, node string, hdr nats.Header, fail func(error)) {
	if s.registrar.window >= 0 && validReply(m.Reply) == nil {
		select {
		case s.registrar.in <- carriedRegistration{node: node, reply: m.Reply, data: m.Data, fail: fail}:
		case <-s.runCtx.Done():
		}
		return
	}
	hdr.Set(hdrReply, m.Reply)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.append(ctx, s.subj.Prefix+"."+logRegister, m.Data, hdr); err != nil {
			fail(err)
		}
	}()
}

// carryRegistrations gathers and appends until ctx ends, then appends what
// it holds. Each record is appended with an acknowledgement, and every
// registration in a record the log did not take is answered unavailable,
// as a single one was.
func (s *Service) carryRegistrations(ctx context.Context, c *gatherer[carriedRegistration]) {
	buf := []byte{registersVersion}
	var fails []func(error)
	var hdr nats.Header
	if s.cfg.AgentsCarryResidents {
		hdr = nats.Header{hdrResidents: []string{"1"}}
	}
	gather(ctx, c.in, c.window,
		func(g carriedRegistration, n int) bool {
			return n == 0 || len(buf)+registrationSize(g) <= max(c.limit, 1)
		},
		func(g carriedRegistration) {
			buf = appendRegistration(buf, g)
			fails = append(fails, g.fail)
		},
		func(n int) {
			s.m.carriedRegistrations.Observe(float64(n))
			s.appendRegistrations(buf, hdr, fails)
			buf, fails = []byte{registersVersion}, nil // the publish may still read buf
		})
}

// appendRegistrations appends one record of registrations, answering
// each with fails[i] when the log does not take it.
func (s *Service) appendRegistrations(data []byte, hdr nats.Header, fails []func(error)) {
	failAll := func(err error) {
		for _, fail := range fails {
			fail(err)
		}
	}
	msg := &nats.Msg{Subject: s.subj.Prefix + "." + logRegisters, Header: nats.Header{}, Data: data}
	for k, v := range hdr {
		msg.Header[k] = v
	}
	id := s.msgID()
	f, err := s.js.PublishMsgAsync(msg, jetstream.WithMsgID(id))
	if err != nil {
		s.m.logWrites.WithLabelValues("error").Inc()
		failAll(err)
		return
	}
	go func() {
		select {
		case ack := <-f.Ok():
			if ack.Duplicate {
				err := fmt.Errorf("coordinator: the log acknowledged the record %s on %s as a duplicate of sequence %d: another writer used this message id", id, msg.Subject, ack.Sequence)
				s.m.logWrites.WithLabelValues("duplicate").Inc()
				s.log.Error().Err(err).Msg("log write refused")
				s.failing.Store(true)
				failAll(err)
				return
			}
			s.m.logWrites.WithLabelValues("ok").Inc()
			s.failing.Store(false)
		case err := <-f.Err():
			s.m.logWrites.WithLabelValues("error").Inc()
			s.failing.Store(true)
			failAll(err)
		case <-time.After(5 * time.Second):
			s.m.logWrites.WithLabelValues("error").Inc()
			s.failing.Store(true)
			failAll(fmt.Errorf("coordinator: no acknowledgement of %d registrations from the log in 5s", len(fails)))
		}
	}()
}
