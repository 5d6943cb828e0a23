package coordinator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shockwave-sched/shockwave/protocol"
)

// Coordinator-only records (config, register, tick, leader) live on
// <prefix>.log.*, which no job may publish to in any auth mode, and carry
// message ids no client can guess: a random per-process nonce and a counter.
// The log stream deduplicates by message id across all its subjects, and
// jobs publish into it with headers of their choosing; with guessable ids
// (the old "tick-<round>") a job could publish its events with the ids of
// future ticks and have every tick dropped as a duplicate. A duplicate
// acknowledgement of the coordinator's own write therefore means someone
// else used its id: it is an error, logged, counted, retried with a new id,
// and /healthz reports it until a write succeeds.

// newNonce returns 128 random bits in hex.
func newNonce() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("coordinator: random nonce: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// msgID is the next unguessable message id of this process.
func (s *Service) msgID() string {
	return fmt.Sprintf("coord-%s-%d", s.nonce, s.writes.Add(1))
}

// append writes one coordinator record to the log and waits for its ack.
func (s *Service) append(ctx context.Context, subject string, data []byte, hdr nats.Header) error {
	msg := nats.NewMsg(subject)
	msg.Data = data
	for k, v := range hdr {
		msg.Header[k] = v
	}
	id := s.msgID()
	ack, err := s.js.PublishMsg(ctx, msg, jetstream.WithMsgID(id))
	switch {
	case err != nil:
		s.m.logWrites.WithLabelValues("error").Inc()
	case ack.Duplicate:
		err = fmt.Errorf("coordinator: the log acknowledged the record %s on %s as a duplicate of sequence %d: another writer used this message id", id, subject, ack.Sequence)
		s.m.logWrites.WithLabelValues("duplicate").Inc()
		s.log.Error().Err(err).Msg("log write refused")
	default:
		s.m.logWrites.WithLabelValues("ok").Inc()
		s.failing.Store(false)
		return nil
	}
	s.failing.Store(true)
	return err
}

// appendRetrying appends a record, retrying with new ids until it is stored
// or ctx ends.
func (s *Service) appendRetrying(ctx context.Context, subject string, data []byte) error {
	for {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := s.append(actx, subject, data, nil)
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
		s.log.Warn().Err(err).Str("subject", subject).Msg("cannot write to the log; retrying")
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// elect runs in the loop when this coordinator won the leader lease: it
// answers status from now on and appends its leader record; it goes live
// when the record comes back through the log, i.e. once it folded every
// record written before it.
func (s *Service) elect(ctx context.Context, epoch uint64) {
	s.epoch = epoch
	s.log.Info().Uint64("epoch", epoch).Msg("won the leader lease; catching up with the log")
	s.subscribe(s.subj.Status(), s.onStatus)
	data, _ := jsonMarshal(leaderRecord{V: protocol.Version, ID: s.nonce, Epoch: epoch})
	go func() {
		if err := s.appendRetrying(ctx, s.subj.Prefix+"."+logLeader, data); err != nil && ctx.Err() == nil {
			s.log.Error().Err(err).Msg("cannot write the leader record")
		}
	}()
}

// depose runs in the loop when this coordinator lost the leader lease: it
// stops publishing at once and goes on folding the log as a standby.
func (s *Service) depose(err error) {
	s.m.deposed.Inc()
	s.log.Error().Err(err).Uint64("epoch", s.epoch).Msg("deposed: no more leases, ticks or answers from this coordinator")
	s.epoch, s.live = 0, false
	s.gen.Add(1) // leases queued but not yet sent are dropped
	s.ready.Store(false)
	s.unsubscribe()
	s.tickRound, s.planSent, s.roundFired = -1, -1, time.Time{}
}

// observeFold keeps what the handlers and the leadership read from the fold.
func (s *Service) observeFold(r record, o *outcome) {
	if o.kind == kindLeader && o.leader != nil {
		s.logEpoch.Store(o.leader.Epoch)
		if s.live && o.leader.ID != s.nonce {
			// Another coordinator won a later epoch: stop before the
			// leadership goroutine notices.
			s.depose(fmt.Errorf("%w: epoch %d appended by another coordinator", errDeposed, o.leader.Epoch))
		}
	}
	if o.kind == kindLeader && o.leader == nil && s.epoch != 0 && !s.live {
		// Our own leader record came back below the log's epoch (the
		// leader bucket lost its history): claim the next epoch instead.
		if rec, err := decodeLeaderRecord(r.Data); err == nil && rec.ID == s.nonce && rec.Epoch == s.epoch {
			s.epoch = s.fold.epoch + 1
			s.log.Warn().Uint64("epoch", s.epoch).Msg("the log has a higher leader epoch than the leader bucket; claiming the next one")
			data, _ := jsonMarshal(leaderRecord{V: protocol.Version, ID: s.nonce, Epoch: s.epoch})
			go func() { _ = s.appendRetrying(s.runCtx, s.subj.Prefix+"."+logLeader, data) }()
		}
	}
	if o.err != nil && (o.kind == kindTick || o.kind == kindPlan || o.kind == kindLeader) && s.live {
		s.log.Warn().Err(o.err).Uint64("seq", r.Seq).Msg("log record ignored")
	}
	if c := s.fold.core; c != nil && o.kind == kindRegister {
		s.admit.live.Store(int64(len(c.active) + len(c.pending)))
		if o.answer != nil && o.answer.Error == nil {
			s.admit.known.Store(o.job, true)
		}
	}
	if c := s.fold.core; c != nil && o.kind == kindSubmit {
		// A submitted job is known: its processes register it later, and
		// may do so while the job cap is reached.
		s.admit.live.Store(int64(len(c.active) + len(c.pending)))
		if o.err == nil {
			s.admit.known.Store(o.job, true)
		}
	}
	if c := s.fold.core; c != nil && o.kind == kindPlan && o.round != nil {
		s.admit.live.Store(int64(len(c.active) + len(c.pending)))
	}
	for _, id := range s.fold.takeForgotten() { // the Core forgot them (retention.go)
		s.admit.known.Delete(id)
	}
}
