package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
)

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

var errNoReply = errors.New("coordinator: request without a reply subject")

// respond sends a reply; a requester that went away is not an error.
func (s *Service) respond(m *nats.Msg, v any) {
	data, err := json.Marshal(v)
	if err == nil {
		err = m.Respond(data)
	}
	if err != nil {
		s.log.Debug().Err(err).Str("subject", m.Subject).Msg("cannot reply")
	}
}

// onRegister runs on the NATS handler goroutine. It answers bad requests
// itself; a good one is appended to the log and answered by the loop once
// folded, so that every accepted registration is durable before its reply.
func (s *Service) onRegister(m *nats.Msg) {
	fail := func(code protocol.ErrorCode, reason string, err error) {
		s.m.registrations.WithLabelValues("rejected_" + reason).Inc()
		if m.Reply != "" {
			s.respond(m, protocol.RegisterReply{V: protocol.Version, Error: protocol.ErrorOf(code, err)})
		}
	}
	if m.Reply == "" {
		fail(protocol.CodeBadRequest, "no_reply", errNoReply)
		return
	}
	r, err := protocol.DecodeRegister(m.Data, s.cfg.MaxMessageBytes)
	if err != nil {
		fail(protocol.Code(err), protocol.Reason(err), err)
		return
	}
	ri, err := requester(m.Header)
	if err == nil {
		err = authorize(ri, r.Job)
	}
	if err != nil {
		fail(protocol.CodeForbidden, "forbidden", err)
		return
	}
	if reason, err := s.admitRegistration(ri.clientKey(), r.Job); err != nil {
		fail(protocol.CodeRejected, reason, err)
		return
	}
	s.carryRegistration(m, "", nats.Header{}, func(err error) { fail(protocol.CodeUnavailable, "unavailable", err) })
}

// answerRegister replies to a registration the loop folded.
func (s *Service) answerRegister(o *outcome) {
	result := "new"
	switch {
	case o.answer.Error != nil:
		result = "rejected_" + o.rejected[0]
		s.log.Info().Err(o.err).Str("job", o.job).Msg("registration rejected")
	case o.answer.Resumed:
		result = "resumed"
		s.log.Info().Str("job", o.job).Str("state", o.answer.State).Uint64("last_seq", o.answer.LastSeq).Msg("job resumed")
	default:
		s.log.Info().Str("job", o.job).Msg("job registered")
	}
	s.m.registrations.WithLabelValues(result).Inc()
	if o.reply == "" {
		return
	}
	// The publisher sends it: with thousands of jobs registering at once,
	// publishing from the loop held it 20–150 ms a reply (docs/scale.md).
	// The same queue as the leases keeps a reply before the job's leases.
	s.enqueueLeases(leaseBatch{reply: o.reply, answer: o.answer, job: o.job})
}

// onStatus runs on the NATS handler goroutine and hands the request to the
// loop, which alone may read the Core.
func (s *Service) onStatus(m *nats.Msg) {
	req, err := protocol.DecodeStatusRequest(m.Data, s.cfg.MaxMessageBytes)
	if err != nil {
		s.respond(m, protocol.StatusReply{V: protocol.Version, Error: protocol.ErrorOf(protocol.Code(err), err)})
		return
	}
	select {
	case s.statusq <- statusRequest{msg: m, req: req}:
	default:
		s.respond(m, protocol.StatusReply{V: protocol.Version,
			Error: &protocol.Error{Code: protocol.CodeUnavailable, Message: "coordinator busy; retry"}})
	}
}

// answerStatus builds the reply in the loop and sends it from a goroutine.
func (s *Service) answerStatus(req statusRequest) {
	rep := protocol.StatusReply{V: protocol.Version, Policy: s.cfg.Policy, GPUs: s.cfg.Core.GPUs,
		RoundSeconds: s.cfg.Core.RoundSeconds, Round: s.nextRound(), Now: s.fold.now,
		Recovering: !s.live, LogSeq: s.fold.seq, Jobs: []protocol.JobInfo{}}
	total := 0
	if c := s.fold.core; c != nil {
		rep.GPUs = c.GPUs()
		switch {
		case req.req.Job != "":
			if st, ok := c.Job(req.req.Job); ok {
				rep.Jobs = append(rep.Jobs, st)
			}
		case req.web != nil:
			rep.Jobs, total = c.ShownJobs(req.shown)
		case req.req.Limit > 0:
			if rep.Jobs, total = c.ShownJobs(req.req.Limit); total > len(rep.Jobs) {
				rep.JobsTotal = total
			}
		default:
			rep.Jobs = append(rep.Jobs, c.Jobs()...)
		}
		rep.Plan = c.LastPlan()
		if rep.JobsTotal > 0 || req.req.Job != "" { // the plan explains the jobs listed
			shown := make(map[string]bool, len(rep.Jobs))
			for _, j := range rep.Jobs {
				shown[j.Job] = true
			}
			rep.Plan = explainOnly(rep.Plan, shown)
		}
		rep.Nodes, rep.GPUs = c.NodeStatus(), c.GPUs()
		s.fold.annotate(rep.Nodes, rep.Jobs)
	}
	if req.web != nil {
		req.web <- WebState{Status: rep, Rounds: slices.Clone(s.web.rounds), JobsTotal: total}
		return
	}
	go s.respondStatus(req.msg, rep, req.req.Job == "")
}

// respondStatus sends a status reply cut to what the server takes in one
// message (encodeStatus); the reply about one job is not cut.
func (s *Service) respondStatus(m *nats.Msg, rep protocol.StatusReply, cut bool) {
	if err := m.Respond(encodeStatus(rep, s.nc.MaxPayload(), cut)); err != nil {
		s.log.Debug().Err(err).Str("subject", m.Subject).Msg("cannot reply")
	}
}

// startRound publishes a live round's leases, then records it.
func (s *Service) startRound(r record, o *outcome) {
	fired, gcs := s.roundFired, s.roundGC
	if fired.IsZero() {
		fired, gcs = time.Now(), gcCycles()
	}
	s.roundFired, s.planSent = time.Time{}, -1
	if o.round == nil {
		if o.err != nil {
			s.m.roundErrors.Inc()
			s.log.Error().Err(o.err).Msg("round failed")
		}
		s.tickWanted = time.Now().Add(s.roundLength())
		return
	}
	rd := o.round
	times := roundTimes{Fired: fired, GCAtFire: gcs, Opened: s.roundOpen, Solve: o.solve, Admitted: o.admitted, SolveBegan: o.began, PlanAsked: s.planAsked, PlanBack: s.stepStart}
	if s.roundOpen.IsZero() || s.planAsked.IsZero() { // a round of an older log, or opened before this coordinator led
		times.Opened, times.PlanAsked, times.SolveBegan = fired, fired, fired
	}
	s.roundOpen, s.planAsked = time.Time{}, time.Time{}
	times.Closed = time.Now()
	s.m.leasesCovered.Add(float64(len(rd.Covered)))
	send := toSend(rd)
	direct, relayed, held := s.fold.toPublish(send)
	times.Leases, times.Relayed, times.Held = len(direct), relayed, held
	s.m.leasesRelayed.Add(float64(relayed))
	s.m.leasesHeld.Add(float64(held))
	// The nodes' desired states go with the leases: an agent that relays
	// needs its node's before its jobs' grants begin.
	desired := s.desiredStates()
	times.Desired = len(desired)
	times.Queued = time.Now()
	s.enqueueLeases(leaseBatch{leases: direct, desired: desired, round: rd, times: times})

	s.tickWanted = wall(rd.Start).Add(s.roundLength())
	s.rounds.Add(1)

	// The job table is copied here; hashing it, the per-job metrics and
	// storing the summary run in the writer, off the loop.
	var table []JobStatus // an earlier summary's, once written: 2.5 MB a round at 10,000 jobs
	select {
	case table = <-s.tables:
	default:
	}
	jobs, plan := s.fold.core.AppendJobs(table[:0]), s.fold.core.LastPlan()
	clear(jobs[len(jobs):cap(jobs)]) // what a longer table left
	s.m.observeRound(o.solve)
	s.m.observeEnded(rd)
	s.web.add(rd, o.solve)
	for _, e := range rd.Lost {
		s.log.Warn().Str("job", e.Job).Str("reason", e.Reason).Int("round", rd.Index).Msg("job lost")
	}
	for _, e := range rd.Ended {
		s.log.Info().Str("job", e.Job).Str("state", string(e.State)).Str("reason", e.Reason).Msg("job ended")
	}
	sum := roundSummary{round: rd, jobs: jobs, plan: plan,
		snap: &Snapshot{V: protocol.Version, Round: rd.Index, Seq: r.Seq, Time: rd.Start, Policy: s.cfg.Policy,
			GPUs: s.cfg.Core.GPUs, Jobs: jobs, Written: time.Now().UTC()}}
	select {
	case s.snapq <- sum:
	default:
		select {
		case old := <-s.snapq: // the writer fell behind: the newer summary wins
			s.recycle(old.jobs)
		default:
		}
		s.snapq <- sum
	}
}

// roundSummary is a round's summary for the writer: the job table and the
// plan as the round left them.
type roundSummary struct {
	round *Round
	jobs  []JobStatus
	plan  *policy.Plan
	snap  *Snapshot
}

// writeSnapshots stores the snapshots the loop hands over, newest first.
func (s *Service) writeSnapshots(ctx context.Context, st *storage) {
	for {
		select {
		case <-ctx.Done():
			return
		case sum := <-s.snapq:
			s.m.observeJobs(sum.round, sum.jobs, s.cfg.JobSeries)
			snap := sum.snap
			data, err := summarize(snap, sum.plan)
			if err == nil {
				pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				_, err = st.kv.Put(pctx, snapshotKey, data)
				cancel()
			}
			if err != nil && ctx.Err() == nil {
				s.m.snapshotErrors.Inc()
				s.log.Warn().Err(err).Int("round", snap.Round).Msg("cannot store the snapshot")
			}
			s.recycle(sum.jobs)
		}
	}
}

// recycle gives a written summary's job table back to the loop for a later
// round's (nothing else holds it once the summary is encoded).
func (s *Service) recycle(table []JobStatus) {
	select {
	case s.tables <- table:
	default:
	}
}
