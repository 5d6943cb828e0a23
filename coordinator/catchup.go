package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A coordinator that does not serve (replaying at start, standing by, or
// deposed) can fall behind the log's compaction: the leader purges the log
// behind the older of its two newest snapshots, so a standby paused for two
// snapshot intervals (a long GC pause, a frozen VM, a slow start that
// restored a snapshot the leader has since replaced) finds the records it
// needs next gone. They are not lost: a stored snapshot covers them. The
// standby then continues from that snapshot, as a restart would, instead
// of refusing to serve or, worse, folding on past the gap with a state no
// other coordinator has.
//
// A gap that compaction does not explain (records missing inside the log,
// or no readable snapshot covering them) is damage: at start the integrity
// checks of recovery.go decide; later it stops the coordinator with an
// IntegrityError, since a standby that skipped records must never lead.

// catchUpTimeout bounds reading the newest snapshot while catching up.
const catchUpTimeout = 2 * time.Minute

// behind runs before a record is folded while this coordinator does not
// serve. It reports whether the record is to be skipped: one the snapshot
// restored after a gap already covers.
func (s *Service) behind(r record) (skip bool) {
	if s.live || s.fold.core == nil {
		return false
	}
	next := s.fold.seq + 1
	switch {
	case r.Seq < next:
		return true // covered by the snapshot this coordinator continued from
	case r.Seq == next:
		return false
	}
	err := s.continueFromSnapshot(r)
	if err == nil {
		if s.start != nil { // still replaying: the start's record of where it began moves too
			s.start.restored, s.start.expected = s.fold.seq, s.fold.seq+1
		}
		return r.Seq <= s.fold.seq
	}
	if s.start != nil {
		return false // the start-up checks (checkRecord) judge the gap
	}
	s.fatal = &IntegrityError{Problems: []string{fmt.Sprintf("standing by, log records %d–%d are missing: %v", next, r.Seq-1, err)}}
	return true
}

// continueFromSnapshot replaces the fold with the newest stored snapshot when the log's
// compaction removed the records between the fold and r.
func (s *Service) continueFromSnapshot(r record) error {
	ctx, cancel := context.WithTimeout(s.runCtx, catchUpTimeout)
	defer cancel()
	info, err := s.store.stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("reading the log's state: %w", err)
	}
	if first := info.State.FirstSeq; first <= s.fold.seq+1 {
		return fmt.Errorf("the log begins at record %d: the missing records were not compacted away", first)
	}
	for try := 1; ; try++ {
		err := s.continueFromListed(ctx, r, info)
		if !errors.Is(err, errSnapshotGone) || try == maxSnapshotLists {
			return err
		}
		s.log.Info().Err(err).Msg("a snapshot went while it was read; listing the snapshots again")
	}
}

// continueFromListed is continueFromSnapshot over one listing of the
// store; it returns errSnapshotGone when a snapshot went while it was read.
func (s *Service) continueFromListed(ctx context.Context, r record, info *jetstream.StreamInfo) error {
	seqs, err := s.snaps.list(ctx)
	if err != nil {
		return fmt.Errorf("listing snapshots: %w", err)
	}
	var problems []error
	for _, seq := range seqs { // newest first
		if seq+1 < r.Seq || seq <= s.fold.seq {
			break // this one and the older ones leave a gap before r
		}
		snap, err := s.snaps.get(ctx, seq)
		if errors.Is(err, errSnapshotGone) {
			return err
		}
		if err != nil {
			problems = append(problems, err)
			continue
		}
		f, err := snap.restore(s.subj, s.cfg.MaxMessageBytes)
		if err != nil {
			problems = append(problems, fmt.Errorf("%s: %w", snapshotName(seq), err))
			continue
		}
		from := s.fold.seq
		s.fold = f
		s.seq.Store(f.seq)
		if f.epoch > s.logEpoch.Load() {
			s.logEpoch.Store(f.epoch)
		}
		s.learnKnown()
		s.m.catchUps.Inc()
		s.log.Warn().Uint64("folded_to", from).Uint64("snapshot_seq", seq).Uint64("log_first", info.State.FirstSeq).
			Msg("fell behind the log's compaction; continuing from the newest snapshot")
		return nil
	}
	if len(problems) > 0 {
		return fmt.Errorf("no stored snapshot covering them restores: %v", problems)
	}
	return fmt.Errorf("no stored snapshot covers them")
}
