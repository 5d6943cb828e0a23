package coordinator

import "time"

// What the service does with a folded record: checks while it replays,
// answers, leases and desired states once it leads.

// handle folds one record; once live it publishes what the record
// produced. It returns the record's kind.
func (s *Service) handle(r record) string {
	if !s.live && s.behind(r) { // catchup.go
		return "skipped"
	}
	o := s.fold.apply(r)
	s.seq.Store(r.Seq)
	s.after(r, &o, false)
	for i := range o.held {
		h := &o.held[i]
		s.after(h.r, &h.o, true)
	}
	return o.kind
}

// after does what a folded record asks for: checks while replaying,
// answers and leases once live.
// A held record (folded when the round it arrived in closed) was checked
// when it arrived.
func (s *Service) after(r record, o *outcome, held bool) {
	if s.cfg.onApply != nil && o.kind != kindHeld {
		s.cfg.onApply(r, o)
	}
	s.observeFold(r, o)
	if !s.live {
		if !held {
			s.checkRecord(r)
			s.verify(r)
		}
		if r.Seq >= s.catchUp && s.standby.CompareAndSwap(false, true) {
			ev := s.log.Debug()
			if s.epoch == 0 {
				ev = s.log.Info()
			}
			ev.Uint64("records", s.catchUp).Float64("took_s", time.Since(s.started).Seconds()).Msg("log replayed; standing by while another coordinator leads")
		}
		if s.fatal == nil && o.kind == kindLeader && s.epoch != 0 && o.leader != nil && o.leader.Epoch == s.epoch && o.leader.ID == s.nonce {
			s.goLive()
		}
		return
	}
	s.m.logSeq.Set(float64(r.Seq))
	switch o.kind {
	case kindRegister:
		s.answerRegister(o)
	case kindEvents:
		s.m.observeEvents(o, r.Time)
		if o.err != nil {
			s.rejectLog.Debug().Err(o.err).Str("job", o.job).Strs("reasons", o.rejected).Msg("events rejected")
		}
		s.publishLeases(o.exits)
	case kindTick:
		s.openRound(o)
		if o.round != nil { // a whole round from an older log (fold.go)
			s.startRound(r, o) // its desired states go with its leases
			s.checkpoint(false)
		}
	case kindPlan:
		if len(o.rejected) > 0 { // a duplicate or stale plan record: the open round is not concerned
			s.log.Warn().Err(o.err).Uint64("seq", r.Seq).Msg("plan record ignored")
			break
		}
		s.startRound(r, o)
		if o.round == nil {
			s.publishDesired()
		}
		if s.snapDue {
			s.checkpoint(true)
		} else if o.round != nil {
			s.checkpointLater()
		}
	case kindSubmit, kindCancel, kindNode, kindReport:
		s.afterRunnerRecord(o)
	case kindCarried: // its batches follow as held records (carry.go)
		if o.err != nil {
			s.m.rejected.WithLabelValues("bad_carried").Inc()
			s.log.Warn().Err(o.err).Uint64("seq", r.Seq).Msg("carried record refused")
		}
	case kindHeld:
	default:
		if o.err != nil {
			s.log.Warn().Err(o.err).Str("subject", r.Subject).Uint64("seq", r.Seq).Msg("log record ignored")
		}
	}
}

// verify compares the replayed state with the stored snapshot when the
// replay reaches the record the snapshot covers.
func (s *Service) verify(r record) {
	if s.expect == nil || r.Seq != s.expect.Seq || s.fold.core == nil {
		return
	}
	s.verifyDigest(r.Seq)
}
