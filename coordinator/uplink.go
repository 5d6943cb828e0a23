package coordinator

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/protocol"
)

// The uplink (protocol/uplink.go; docs/agent.md, "The uplink"): a node
// agent carries its processes' registrations and event batches over its
// own connection, on its node's subjects, so that a submitted job's
// process opens no NATS connection.
//
//	<prefix>.agent.<node>.register  a Register, answered like one on
//	                                <prefix>.register
//	<prefix>.agent.<node>.events    one Batch, the job in protocol.HdrJob
//
// Both enter the log as they would have from the job (a register record;
// the batch on the job's own events subject), with hdrVia naming the node;
// batches arriving together share a carried record (carry.go).
// The fold accepts such a record only for a submitted job whose current or
// most recent grant includes that node (vouches), so an agent speaks only
// for the jobs it runs. The header only ever adds that check: a job that
// sets it on its own batches gains nothing. Which agent published is known
// from the subject (in creds mode an agent may publish only on its own
// node's subjects), so the service, not the agent, writes the header.

// hdrVia names the node whose agent carried a record (the uplink).
const hdrVia = "Shockwave-Via"

// hdrResidents, on a record an agent carried, says the agents of this
// deployment may also speak for the jobs resident on their node, which
// reach them through the agent's job socket (ServiceConfig.
// AgentsCarryResidents; docs/agent.md, "The job socket"). The service
// writes it, never the agent: like hdrVia, a job that sets it on its own
// records gains nothing, since without hdrVia nothing is checked.
const hdrResidents = "Shockwave-Residents"

// Per node, the uplink's events may arrive at most uplinkRate a second on
// average and uplinkBurst at once; more are dropped before the log. An
// agent forwards about one batch a second per process, and a node runs at
// most protocol.MaxAgentJobs jobs.
const (
	uplinkRate  = 2_000
	uplinkBurst = 8_000
)

// uplinkState is the events handler's per-node budget. Only the goroutine
// of the events subscription touches it (agents.go).
type uplinkState struct {
	budgets map[string]*budget
}

// onAgentEvents takes an agent's events message (on the NATS handler
// goroutine): the batch goes to the log on its job's events subject,
// marked with the node. The batch itself is decoded and checked by the
// fold, as a job's own would be.
func (s *Service) onAgentEvents(m *nats.Msg, node string) {
	job := m.Header.Get(protocol.HdrJob)
	var err error
	switch {
	case protocol.ValidateJobID("agent events", job) != nil:
		err = fmt.Errorf("coordinator: agent events on %q: header %s: %w", m.Subject, protocol.HdrJob, protocol.ValidateJobID("agent events", job))
	case len(m.Data) > s.cfg.MaxMessageBytes && s.cfg.MaxMessageBytes > 0:
		err = fmt.Errorf("coordinator: agent events on %q: %d bytes exceed the limit of %d", m.Subject, len(m.Data), s.cfg.MaxMessageBytes)
	case !s.uplink.spend(node, time.Now()):
		s.m.rejected.WithLabelValues("uplink_rate").Inc()
		return
	}
	if err != nil {
		s.m.rejected.WithLabelValues("uplink_invalid").Inc()
		s.rejectLog.Info().Err(err).Str("node", node).Msg("agent events refused")
		return
	}
	if s.carrier.window >= 0 { // carry.go
		b := carriedBatch{node: node, job: job, hdr: keptHeader(m.Header), data: m.Data}
		if n := headerSize(b.hdr); n > maxCarriedHeader {
			s.m.rejected.WithLabelValues("uplink_invalid").Inc()
			s.rejectLog.Info().Str("node", node).Str("job", job).Int("header_bytes", n).Int("limit", maxCarriedHeader).Msg("agent events refused: headers over the carried limit")
			return
		}
		select {
		case s.carrier.in <- b:
		case <-s.runCtx.Done():
		}
		return
	}
	rec := &nats.Msg{Subject: s.subj.Events(job), Header: carriedHeader(m.Header, node, s.cfg.AgentsCarryResidents), Data: m.Data}
	if err := s.nc.PublishMsg(rec); err != nil {
		s.log.Debug().Err(err).Str("node", node).Str("job", job).Msg("cannot forward agent events")
	}
}

// carriedHeader is the header an agent's batch enters the log with: the
// agent's own headers, as a job's own batch keeps its, less NATS's
// ("Nats-": message ids and expectations would act on the log) and the
// job, node and residents headers, then hdrVia naming node and, when
// agents may speak for resident jobs, hdrResidents.
func carriedHeader(h nats.Header, node string, residents bool) nats.Header {
	out := keptHeader(h)
	if out == nil {
		out = nats.Header{}
	}
	out[hdrVia] = []string{node}
	if residents {
		out[hdrResidents] = []string{"1"}
	}
	return out
}

// keptHeader is an agent's batch's own headers, as a job's own batch keeps
// its, less the reserved ones (reservedHeader); nil when none is left.
func keptHeader(h nats.Header) nats.Header {
	var out nats.Header
	for k, v := range h {
		if reservedHeader(k) {
			continue
		}
		if out == nil {
			out = nats.Header{}
		}
		out[k] = v
	}
	return out
}

// spend takes one message from node's budget.
func (u *uplinkState) spend(node string, now time.Time) bool {
	if u.budgets == nil || len(u.budgets) > maxClients {
		u.budgets = map[string]*budget{}
	}
	return budgetOf(u.budgets, node, seconds(now), uplinkBurst).take(seconds(now), uplinkRate, uplinkBurst, 1)
}

// onAgentRegister takes a registration an agent carries for one of its
// processes: it is appended to the log like a job's own, marked with the
// node, and answered by the loop once folded.
func (s *Service) onAgentRegister(m *nats.Msg, node string) {
	fail := func(code protocol.ErrorCode, reason string, err error) {
		s.m.registrations.WithLabelValues("rejected_" + reason).Inc()
		s.respond(m, protocol.RegisterReply{V: protocol.Version, Error: protocol.ErrorOf(code, err)})
	}
	r, err := protocol.DecodeRegister(m.Data, s.cfg.MaxMessageBytes)
	if err != nil {
		fail(protocol.Code(err), protocol.Reason(err), err)
		return
	}
	if reason, err := s.admitRegistration("agent:"+node, r.Job); err != nil {
		fail(protocol.CodeRejected, reason, err)
		return
	}
	hdr := nats.Header{}
	hdr.Set(hdrVia, node)
	if s.cfg.AgentsCarryResidents {
		hdr.Set(hdrResidents, "1")
	}
	s.carryRegistration(m, node, hdr, func(err error) { fail(protocol.CodeUnavailable, "unavailable", err) })
}

var errNotVouched = errors.New("coordinator: the job's grant does not include the node whose agent sent this")

// vouches checks a record r an agent carried (hdrVia: its node) for job:
// the job must be a submitted one whose current or most recent grant
// includes the node, or, where agents may speak for resident jobs
// (hdrResidents), a job resident on the node: regNode is the node a
// registration names (register records), else the job's registered node
// counts. An ended job passes, so that the registration that confirms a
// job's end is answered as usual ("ended"); its events are refused as
// ended anyway. A record without hdrVia needs nothing.
func (f *fold) vouches(r record, job, regNode string, register bool) error {
	via := r.viaNode()
	if via == "" {
		return nil
	}
	if _, ok := f.run.subs[job]; !ok {
		if !r.carriesResidents() {
			return fmt.Errorf("%w: %s is not a submitted job (node %s)", errNotVouched, job, via)
		}
		node := regNode
		if !register {
			node = f.core.ResidentNode(job)
		}
		if node != via {
			return fmt.Errorf("%w: %s is neither a submitted job nor resident on %s", errNotVouched, job, via)
		}
		return nil
	}
	if st, managed := f.core.Managed(job); !managed || (st != Pending && st != Active) {
		return nil // ended (or forgotten): Enroll and Deliver answer that
	}
	if l, ok := f.leases[job]; ok && slices.ContainsFunc(f.leaseNodes(l), func(d protocol.NodeDevices) bool { return d.Node == via }) {
		return nil
	}
	if slices.Contains(f.run.last[job], via) {
		return nil
	}
	return fmt.Errorf("%w: %s is not placed on %s", errNotVouched, job, via)
}
