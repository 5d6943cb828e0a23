package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shockwave-sched/shockwave/protocol"
)

// The service side of node agents and submissions (runner.go has the fold
// side). Joins, exit reports, submissions and cancellations change state:
// they are appended to the log and answered once folded, so an
// acknowledged submission survives a kill -9 of the coordinator.
// Heartbeats and credential requests change nothing: the loop answers
// them. A node whose heartbeats stop for AgentTimeout leaves the cluster
// through a leave record, decided here (wall clock) and folded like any
// other record.

// DefaultAgentTimeout is how long a node agent may stay silent.
const DefaultAgentTimeout = 15 * time.Second

// JobCredsTTL is the validity of job credentials fetched by an agent.
const JobCredsTTL = 24 * time.Hour

type agentRequest struct {
	msg  *nats.Msg
	node string
	verb string
	job  string // creds: the job
}

// agentState is the loop's view of node liveness.
type agentState struct {
	seen    map[string]time.Time // last heartbeat or join of each node
	leaving map[string]bool      // a leave record is on its way
}

func (s *Service) subscribeAgents() ([]*nats.Subscription, error) {
	var subs []*nats.Subscription
	// One subscription, so one goroutine, per kind of traffic: the uplink's
	// registrations (a few thousand at a rotation round's start at 10,000
	// jobs) and its event batches (one per running job a second) do not
	// wait behind each other or behind heartbeats.
	handlers := map[string]nats.MsgHandler{
		s.subj.AgentEvents("*"): s.onAgent,
		s.subj.Submit():         s.onSubmit,
		s.subj.Cancel():         s.onCancel,
	}
	for _, verb := range agentRequests {
		handlers[s.subj.Prefix+".agent.*."+verb] = s.onAgent
	}
	for subj, h := range handlers {
		sub, err := s.nc.Subscribe(subj, h)
		if err != nil {
			for _, o := range subs {
				_ = o.Unsubscribe()
			}
			return nil, err
		}
		_ = sub.SetPendingLimits(64<<10, 64<<20)
		subs = append(subs, sub)
	}
	return subs, nil
}

// fromJob reports a request that came from the JOBS account of creds mode
// (through a service import): jobs may not act as agents or operators. In
// none and token mode agents share the local JOBS account with jobs (they
// authenticate alike), so requests from it are allowed (localauth.go).
func fromJob(m *nats.Msg) bool {
	ri, err := requester(m.Header)
	return err != nil || (ri != nil && ri.Account != localJobsAccount)
}

func (s *Service) agentFail(m *nats.Msg, code protocol.ErrorCode, err error) {
	s.m.rejected.WithLabelValues("agent_" + string(code)).Inc()
	s.rejectLog.Info().Err(err).Str("subject", m.Subject).Msg("agent request refused")
	if m.Reply != "" {
		s.respond(m, protocol.AgentReply{V: protocol.Version, Error: protocol.ErrorOf(code, err)})
	}
}

// onAgent runs on the NATS handler goroutine.
func (s *Service) onAgent(m *nats.Msg) {
	node, verb, ok := s.subj.AgentSubject(m.Subject)
	switch {
	case !ok:
		s.agentFail(m, protocol.CodeBadRequest, fmt.Errorf("coordinator: %q is not an agent subject", m.Subject))
		return
	case fromJob(m):
		s.agentFail(m, protocol.CodeForbidden, errors.New("coordinator: job credentials may not act as an agent"))
		return
	case verb == "events": // published, not requested (uplink.go)
		s.onAgentEvents(m, node)
		return
	case m.Reply == "":
		s.agentFail(m, protocol.CodeBadRequest, errNoReply)
		return
	}
	lim := s.cfg.MaxMessageBytes
	var body string // the node the body names
	var data []byte // the log record, for verbs that change state
	var job, id string
	switch verb {
	case "register":
		s.onAgentRegister(m, node)
		return
	case "join", "heartbeat":
		h, err := protocol.DecodeAgentHello(m.Data, lim)
		if err != nil {
			s.agentFail(m, protocol.Code(err), err)
			return
		}
		body = h.Node
		if verb == "join" {
			data, _ = json.Marshal(nodeRecord{V: protocol.Version, Op: "join", Hello: *h})
		}
	case "report":
		r, err := protocol.DecodeAgentReport(m.Data, lim)
		if err != nil {
			s.agentFail(m, protocol.Code(err), err)
			return
		}
		body, job = r.Node, r.Job
		if r.Event == protocol.ReportExited {
			data = m.Data
			id = fmt.Sprintf("exit-%s-%s-%d-%d", r.Node, r.Job, r.Attempt, r.Since)
		} else {
			s.log.Info().Str("node", r.Node).Str("job", r.Job).Int("attempt", r.Attempt).Msg("job started")
			s.respond(m, protocol.AgentReply{V: protocol.Version})
			return
		}
	case "creds":
		r, err := protocol.DecodeCredsRequest(m.Data, lim)
		if err != nil {
			s.agentFail(m, protocol.Code(err), err)
			return
		}
		body, job = r.Node, r.Job
	}
	if body != node {
		s.agentFail(m, protocol.CodeForbidden, fmt.Errorf("coordinator: a request on node %q's subject names node %q", node, body))
		return
	}
	if data == nil {
		select {
		case s.agentq <- agentRequest{msg: m, node: node, verb: verb, job: job}:
		default:
			s.agentFail(m, protocol.CodeUnavailable, errors.New("coordinator busy; retry"))
		}
		return
	}
	subject := logNode
	if verb == "report" {
		subject = logAgent
	}
	s.appendRecord(m, subject, data, id, "agent", func(err error) { s.agentFail(m, protocol.CodeUnavailable, err) })
}

// appendRecord appends a record that the loop answers once folded; fail
// answers a record the log did not take.
func (s *Service) appendRecord(m *nats.Msg, subject string, data []byte, msgID, kind string, fail func(error)) {
	rec := nats.NewMsg(s.subj.Prefix + "." + subject)
	rec.Data = data
	rec.Header.Set(hdrReply, m.Reply)
	var opts []jetstream.PublishOpt
	if msgID != "" {
		// Scoped by this process's nonce: no client can squat the id of a
		// coordinator record (writes.go); a retry to this process still
		// deduplicates.
		opts = append(opts, jetstream.WithMsgID("coord-"+s.nonce+"-"+msgID))
	}
	f, err := s.js.PublishMsgAsync(rec, opts...)
	if err != nil {
		fail(err)
		return
	}
	go func() {
		select {
		case ack := <-f.Ok():
			if ack.Duplicate {
				// a retry within the dedupe window: the first copy was folded
				// and answered; answer this one with the current state.
				select {
				case s.agentq <- agentRequest{msg: m, verb: "duplicate-" + kind, job: strings.TrimPrefix(msgID, "submit-")}:
				default:
				}
			}
		case err := <-f.Err():
			fail(err)
		}
	}()
}

func (s *Service) submitFail(m *nats.Msg, code protocol.ErrorCode, err error) {
	s.m.rejected.WithLabelValues("submit_" + string(code)).Inc()
	if m.Reply != "" {
		s.respond(m, protocol.SubmitReply{V: protocol.Version, Error: protocol.ErrorOf(code, err)})
	}
}

// onSubmit runs on the NATS handler goroutine: a valid submission goes to
// the log, keyed by its job id so that a client's retry is stored once.
func (s *Service) onSubmit(m *nats.Msg) {
	if fromJob(m) {
		s.submitFail(m, protocol.CodeForbidden, errors.New("coordinator: job credentials may not submit jobs"))
		return
	}
	if m.Reply == "" {
		s.submitFail(m, protocol.CodeBadRequest, errNoReply)
		return
	}
	sub, err := protocol.DecodeSubmit(m.Data, s.cfg.MaxMessageBytes)
	if err == nil && sub.Job == "" {
		err = fmt.Errorf("%w: submit: field \"job\": empty job id", protocol.ErrInvalid)
	}
	if err != nil {
		s.submitFail(m, protocol.Code(err), err)
		return
	}
	s.appendRecord(m, logSubmit, m.Data, "submit-"+sub.Job, "submit", func(err error) { s.submitFail(m, protocol.CodeUnavailable, err) })
}

// onCancel runs on the NATS handler goroutine.
func (s *Service) onCancel(m *nats.Msg) {
	if fromJob(m) {
		s.submitFail(m, protocol.CodeForbidden, errors.New("coordinator: job credentials may not cancel jobs"))
		return
	}
	if m.Reply == "" {
		s.submitFail(m, protocol.CodeBadRequest, errNoReply)
		return
	}
	if _, err := protocol.DecodeCancel(m.Data, s.cfg.MaxMessageBytes); err != nil {
		s.submitFail(m, protocol.Code(err), err)
		return
	}
	s.appendRecord(m, logCancel, m.Data, "", "submit", func(err error) { s.submitFail(m, protocol.CodeUnavailable, err) })
}

// answerAgent handles heartbeats and credential requests in the loop.
func (s *Service) answerAgent(req agentRequest) {
	m := req.msg
	switch req.verb {
	case "duplicate-agent":
		go s.respond(m, protocol.AgentReply{V: protocol.Version})
	case "duplicate-submit":
		rep := protocol.SubmitReply{V: protocol.Version, Job: req.job}
		if s.fold.core != nil {
			st, _ := s.fold.core.Job(req.job)
			rep.State = st.State
		}
		go s.respond(m, rep)
	case "retry-leave":
		delete(s.agents.leaving, req.node)
	case "heartbeat":
		if _, ok := s.fold.run.nodes[req.node]; !ok || s.fold.core == nil {
			s.respond(m, protocol.AgentReply{V: protocol.Version, Error: &protocol.Error{Code: protocol.CodeUnknownNode,
				Message: fmt.Sprintf("node %s has not joined (or left after a timeout); join again", req.node)}})
			return
		}
		if !s.agents.leaving[req.node] {
			s.agents.seen[req.node] = time.Now()
		}
		go s.respond(m, protocol.AgentReply{V: protocol.Version, Desired: s.desired(req.node)})
	case "creds":
		if s.fold.core == nil || !s.fold.placedOn(req.job, req.node) {
			s.agentFail(m, protocol.CodeForbidden, fmt.Errorf("%w: %s is not placed on %s", errNotPlaced, req.job, req.node))
			return
		}
		if s.cfg.Authority == nil {
			s.agentFail(m, protocol.CodeRejected, errors.New("coordinator: no credentials authority (the coordinator does not run with --auth creds)"))
			return
		}
		creds, err := s.cfg.Authority.IssueJob(s.subj, req.job, JobCredsTTL)
		if err != nil {
			s.agentFail(m, protocol.CodeUnavailable, err)
			return
		}
		go s.respond(m, protocol.CredsReply{V: protocol.Version, Creds: string(creds)})
	}
}

// afterRunnerRecord answers a folded runner record and publishes what it
// changed.
func (s *Service) afterRunnerRecord(o *outcome) {
	if o.err != nil {
		s.rejectLog.Info().Err(o.err).Str("kind", o.kind).Str("id", o.job).Msg("request refused")
	} else {
		s.log.Info().Str("kind", o.kind).Str("id", o.job).Msg("folded")
	}
	if o.kind == kindNode {
		if _, joined := s.fold.run.nodes[o.job]; joined {
			s.agents.seen[o.job] = time.Now()
		}
		delete(s.agents.leaving, o.job)
	}
	if o.reply != "" && o.agentAnswer != nil {
		if r, ok := o.agentAnswer.(*protocol.AgentReply); ok && r.Desired != nil {
			r.Desired.Epoch = s.epoch
		}
		data, _ := json.Marshal(o.agentAnswer)
		if err := s.nc.Publish(o.reply, data); err != nil {
			s.log.Warn().Err(err).Str("id", o.job).Msg("cannot answer")
		}
	}
	s.publishLeases(o.exits)
	if o.desired {
		s.publishDesired()
	}
}

// desired is node's desired state stamped with the current time: the
// expiries are storage times of the log (this clock), and an agent measures
// them from Now, so Now must not lag behind when no record came lately.
func (s *Service) desired(node string) *protocol.NodeDesired {
	d := s.fold.desired(node)
	d.Now = max(d.Now, seconds(time.Now()))
	d.Epoch = s.epoch // agents ignore a deposed leader's states
	return d
}

// publishDesired sends every joined node its desired state.
// The states are built here and sent by the publisher, off the loop, on
// the connection their node's round states take (publish.go): marshaling
// and sending 320 of them on the loop held it for about 20 ms, every
// event waiting behind.
func (s *Service) publishDesired() {
	if d := s.desiredStates(); len(d) > 0 {
		s.enqueueLeases(leaseBatch{desired: d})
	}
}

// desiredStates are the joined nodes' desired states, by node name.
func (s *Service) desiredStates() []*protocol.NodeDesired {
	if s.fold.core == nil {
		return nil
	}
	nodes := s.fold.run.joined()
	out := make([]*protocol.NodeDesired, len(nodes))
	for i, node := range nodes {
		out[i] = s.desired(node)
	}
	return out
}

// checkAgents appends a leave record for every node silent too long.
func (s *Service) checkAgents(ctx context.Context) {
	if !s.live || s.fold.core == nil {
		return
	}
	now := time.Now()
	for _, node := range s.fold.run.joined() {
		seen, ok := s.agents.seen[node]
		if !ok {
			s.agents.seen[node] = now
			continue
		}
		if s.agents.leaving[node] || now.Sub(seen) < s.cfg.AgentTimeout {
			continue
		}
		s.agents.leaving[node] = true
		h := s.fold.run.nodes[node]
		reason := fmt.Sprintf("no heartbeat for %s", now.Sub(seen).Round(time.Millisecond))
		s.log.Warn().Str("node", node).Str("reason", reason).Msg("node left")
		data, _ := json.Marshal(nodeRecord{V: protocol.Version, Op: "leave", Hello: h, Reason: reason})
		go func() {
			err := s.append(ctx, s.subj.Prefix+"."+logNode, data, nil)
			if err != nil && ctx.Err() == nil {
				s.log.Warn().Err(err).Str("node", node).Msg("cannot log a node leaving; will retry")
				select {
				case s.agentq <- agentRequest{verb: "retry-leave", node: node}:
				case <-ctx.Done():
				}
			}
		}()
	}
}
