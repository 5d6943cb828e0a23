package coordinator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// Bounded restart and integrity (docs/durability.md).
//
// After every SnapshotRounds rounds the loop encodes its fold's state
// (snapshot.go) and a writer stores it in the object store bucket
// <PREFIX>_SNAP as "state-<seq>", reads it back and checks it, keeps the
// two newest and purges the log up to the older of them: a record leaves
// the log only when two durable, verified snapshots cover it, so a damaged
// newest snapshot still leaves a lossless way back (the older one and the
// log after it). Rejected records (bad events, refused registrations) go
// with the rest: the log holds at most two snapshot intervals of them.
//
// A start restores the newest snapshot and replays the records after it.
// Before it serves, it checks what it reads:
//
//   - every stored snapshot newer than the one restored must be readable,
//     with a good SHA-256 and a state that restores;
//   - the log must hold every record from the snapshot on: no record lost
//     or deleted inside it (the server's stream state), none purged
//     without a snapshot covering it, no gap while replaying, and no end
//     before the newest sequence a snapshot or the round summary (KV)
//     recorded;
//   - the replayed state must match the round summary's digest when the
//     replay passes the summary's record.
//
// A failed check refuses to serve with an IntegrityError naming each
// problem, unless ServiceConfig.Recover is set: then the coordinator
// restores the newest good snapshot, folds what is readable after it,
// logs exactly what was lost (records skipped, rounds rolled back), writes
// a fresh snapshot and compacts the damage away.

// DefaultSnapshotRounds is how often the service snapshots its state, in
// rounds.
const DefaultSnapshotRounds = 1

// DefaultSnapshotShare is the default bound on the share of the time spent
// taking snapshots: the loop's capture and the policy's encoding of its
// state. Up to a few thousand jobs a snapshot takes milliseconds and every
// round has one; at 10,000 jobs it takes 55–75 ms, so one comes every
// 6–8 s at most (a restart replays more records, events wait behind a
// capture less often).
const DefaultSnapshotShare = 0.01

// snapshotCheap is the loop time under which a snapshot never defers the
// next (small clusters keep one snapshot a round).
const snapshotCheap = 20 * time.Millisecond

// keepSnapshots is how many snapshots the store keeps.
const keepSnapshots = 2

// ErrIntegrity is wrapped by IntegrityError.
var ErrIntegrity = errors.New("coordinator: the log or its snapshots are damaged")

// IntegrityError is why a coordinator refused to serve: each problem found
// in the log or the snapshots.
type IntegrityError struct {
	Problems []string
}

func (e *IntegrityError) Error() string {
	return fmt.Sprintf("%v: %s; refusing to serve: start with --recover-from-snapshot to continue from the last good snapshot, discarding what was lost",
		ErrIntegrity, strings.Join(e.Problems, "; "))
}

// Unwrap makes errors.Is(err, ErrIntegrity) hold.
func (e *IntegrityError) Unwrap() error { return ErrIntegrity }

// snapshotStore keeps state snapshots in a JetStream object store.
type snapshotStore struct {
	obj         jetstream.ObjectStore
	bucket      string
	readTimeout time.Duration // bounds one read (0: snapshotReadTimeout; snapread.go)
}

func snapshotBucket(prefix string) string {
	stream, _ := streamNames(prefix)
	return strings.TrimSuffix(stream, "_LOG") + "_SNAP"
}

func snapshotName(seq uint64) string { return fmt.Sprintf("state-%020d", seq) }

func openSnapshotStore(ctx context.Context, js jetstream.JetStream, prefix string, cfg *ServiceConfig) (*snapshotStore, error) {
	bucket := snapshotBucket(prefix)
	obj, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket: bucket, Description: "shockwave coordinator state snapshots",
		Storage: cfg.Storage, Replicas: cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("coordinator: snapshot store %s: %w", bucket, err)
	}
	if cfg.snapStore != nil {
		obj = cfg.snapStore(obj)
	}
	return &snapshotStore{obj: obj, bucket: bucket}, nil
}

// list returns the sequences of the stored snapshots, newest first.
func (s *snapshotStore) list(ctx context.Context) ([]uint64, error) {
	infos, err := s.obj.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var seqs []uint64
	for _, in := range infos {
		if seq, err := strconv.ParseUint(strings.TrimPrefix(in.Name, "state-"), 10, 64); err == nil && strings.HasPrefix(in.Name, "state-") {
			seqs = append(seqs, seq)
		}
	}
	slices.Sort(seqs)
	slices.Reverse(seqs)
	return seqs, nil
}

// get reads and checks the snapshot covering seq.
func (s *snapshotStore) get(ctx context.Context, seq uint64) (*StateSnapshot, error) {
	data, err := s.read(ctx, snapshotName(seq))
	if errors.Is(err, errSnapshotGone) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrSnapshotCorrupt, snapshotName(seq), err)
	}
	snap, err := DecodeStateSnapshot(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", snapshotName(seq), err)
	}
	if snap.Seq != seq {
		return nil, fmt.Errorf("%w: %s holds the state at record %d", ErrSnapshotCorrupt, snapshotName(seq), snap.Seq)
	}
	return snap, nil
}

// verify reads the snapshot covering seq back and checks it, as get does,
// holding the stored (compressed) body but not the payload it inflates
// to, at pace bytes a second (pace.go).
func (s *snapshotStore) verify(ctx context.Context, seq uint64, pace int64) error {
	r, err := s.obj.Get(ctx, snapshotName(seq))
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrSnapshotCorrupt, snapshotName(seq), err)
	}
	defer r.Close()
	got, err := verifySealed(paced(ctx, r, pace))
	if err != nil {
		return fmt.Errorf("%s: %w", snapshotName(seq), err)
	}
	if got != seq {
		return fmt.Errorf("%w: %s holds the state at record %d", ErrSnapshotCorrupt, snapshotName(seq), got)
	}
	return nil
}

// startState is what a start found: the fold to continue (restored from
// a snapshot, or fresh), where the replay begins, and in recovery what is
// known to be lost.
type startState struct {
	restored  uint64   // sequence of the restored snapshot, 0 if none
	from      uint64   // first record to replay
	problems  []string // integrity problems
	highWater uint64   // newest record a snapshot or the round summary saw
	hwRound   int      // next round of the newest summary or snapshot header
	expected  uint64   // next record the replay expects
	skipped   uint64   // records lost (recovery: gaps while replaying)
	drop      []uint64 // snapshots to delete after a recovery
}

// planStart restores the newest good snapshot into s.fold and checks the
// log around it (see the file comment). It returns an IntegrityError when
// something is damaged and the service is not recovering.
func (s *Service) planStart(ctx context.Context, st *storage, snaps *snapshotStore) (*startState, error) {
	ss := &startState{from: 1, hwRound: -1}
	s.start = ss
	if err := s.restoreNewest(ctx, snaps, ss); err != nil {
		return nil, err
	}
	if sum, err := st.snapshot(ctx); err != nil {
		ss.problems = append(ss.problems, fmt.Sprintf("round summary unreadable: %v", err))
	} else if sum != nil {
		ss.highWater = max(ss.highWater, sum.Seq)
		ss.hwRound = max(ss.hwRound, sum.Round+1)
		s.expect = sum
	}
	info, err := st.stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("coordinator: log %s: %w", st.name, err)
	}
	ls := info.State
	if ls.Lost != nil && len(ls.Lost.Msgs) > 0 {
		ss.problems = append(ss.problems, fmt.Sprintf("the server lost %d log records (%d bytes) while loading the log", len(ls.Lost.Msgs), ls.Lost.Bytes))
	}
	if ls.NumDeleted > 0 {
		ss.problems = append(ss.problems, fmt.Sprintf("%d records are missing inside the log (records %d–%d hold %d messages)",
			ls.NumDeleted, ls.FirstSeq, ls.LastSeq, ls.Msgs))
	}
	if ls.Msgs > 0 && ls.FirstSeq > ss.from {
		ss.problems = append(ss.problems, fmt.Sprintf("log records %d–%d are gone and no snapshot covers them", ss.from, ls.FirstSeq-1))
	}
	if ls.LastSeq < ss.highWater {
		ss.problems = append(ss.problems, fmt.Sprintf("the log ends at record %d, but records up to %d were written", ls.LastSeq, ss.highWater))
	}
	if len(ss.problems) > 0 && !s.cfg.Recover {
		return nil, &IntegrityError{Problems: ss.problems}
	}
	if ss.restored == 0 && ls.FirstSeq > 1 {
		return nil, fmt.Errorf("%w: %s; no snapshot is left to recover from, and the log's beginning is gone",
			ErrIntegrity, strings.Join(ss.problems, "; "))
	}
	if s.cfg.Recover && ss.restored > 0 && ls.LastSeq < ss.restored {
		// The log lost records the snapshot covers: move its sequence past
		// the snapshot so that new records follow it.
		if err := st.stream.Purge(ctx, jetstream.WithPurgeSequence(ss.restored+1)); err != nil {
			return nil, fmt.Errorf("coordinator: moving the log past the snapshot: %w", err)
		}
	}
	ss.expected = ss.from
	if s.expect != nil && s.fold.core != nil && s.expect.Seq == s.fold.seq {
		s.verifyDigest(s.fold.seq)
		if s.fatal != nil {
			return nil, s.fatal
		}
	}
	return ss, nil
}

// verifyDigest compares the state at log record seq with the round
// summary's digest.
func (s *Service) verifyDigest(seq uint64) {
	got, _, _ := digest(s.fold.core)
	if got == s.expect.Digest {
		s.log.Info().Uint64("seq", seq).Int("round", s.expect.Round).Msg("the replayed state matches the round summary")
		return
	}
	s.m.snapshotErrors.Inc()
	problem := fmt.Sprintf("the state at log record %d differs from the round summary written then (digest %s, summary %s)", seq, got, s.expect.Digest)
	if !s.cfg.Recover {
		s.fatal = &IntegrityError{Problems: []string{problem}}
		return
	}
	s.start.problems = append(s.start.problems, problem)
	s.log.Error().Uint64("seq", seq).Msg("recovery: " + problem)
}

// restoreNewest restores the newest snapshot that reads, checks and
// restores into s.fold; newer ones that do not are problems.
func (s *Service) restoreNewest(ctx context.Context, snaps *snapshotStore, ss *startState) error {
	for try := 1; ; try++ {
		err := s.restoreListed(ctx, snaps, ss)
		if !errors.Is(err, errSnapshotGone) || try == maxSnapshotLists {
			return err
		}
		s.log.Info().Err(err).Msg("a snapshot went while it was read; listing the snapshots again")
		*ss = startState{from: 1, hwRound: -1}
	}
}

// maxSnapshotLists bounds how often a start lists the snapshots again
// because the one it read was deleted meanwhile (each deletion means the
// leader stored a newer one).
const maxSnapshotLists = 5

// restoreListed is restoreNewest over one listing of the store; it returns
// errSnapshotGone when a snapshot went while it was read.
func (s *Service) restoreListed(ctx context.Context, snaps *snapshotStore, ss *startState) error {
	seqs, err := snaps.list(ctx)
	if err != nil {
		return fmt.Errorf("coordinator: listing snapshots: %w", err)
	}
	for i, seq := range seqs {
		ss.highWater = max(ss.highWater, seq)
		snap, err := snaps.get(ctx, seq)
		if errors.Is(err, errSnapshotGone) {
			return err
		}
		if err == nil {
			ss.hwRound = max(ss.hwRound, snap.Round)
			var f *fold
			if f, err = snap.restore(s.subj, s.cfg.MaxMessageBytes); err == nil {
				s.fold, ss.restored, ss.from = f, seq, seq+1
				ss.drop = slices.Clone(seqs[:i]) // the damaged newer ones
				break
			}
		}
		ss.problems = append(ss.problems, err.Error())
	}
	if len(seqs) > 0 && ss.restored == 0 {
		ss.problems = append(ss.problems, "no stored snapshot is readable")
		ss.drop = seqs
	}
	return nil
}

// checkRecord runs for each record replayed before going live: the log
// must continue where the previous record ended.
func (s *Service) checkRecord(r record) {
	ss := s.start
	if ss == nil {
		return
	}
	if r.Seq > ss.expected {
		gap := fmt.Sprintf("log records %d–%d are missing", ss.expected, r.Seq-1)
		if !s.cfg.Recover {
			s.fatal = &IntegrityError{Problems: []string{gap}}
			return
		}
		ss.skipped += r.Seq - ss.expected
		s.log.Error().Uint64("from", ss.expected).Uint64("to", r.Seq-1).Msg("recovery: " + gap + "; skipped")
	}
	ss.expected = r.Seq + 1
}

// finishRecovery runs when a recovering service goes live: it says what
// was lost, deletes the snapshots and the round summary that describe a
// state it no longer has, and snapshots the state it continues from.
func (s *Service) finishRecovery(ctx context.Context, st *storage, snaps *snapshotStore) {
	ss := s.start
	if ss == nil || !s.cfg.Recover {
		return
	}
	if end := max(ss.highWater, s.catchUp); end > s.fold.seq {
		ss.skipped += end - s.fold.seq
	}
	rolled := 0
	if ss.hwRound >= 0 {
		rolled = max(0, ss.hwRound-s.nextRound())
	}
	s.recovery = fmt.Sprintf("recovered from the snapshot at log record %d: %d log records lost, %d rounds rolled back; problems: %s",
		ss.restored, ss.skipped, rolled, strings.Join(ss.problems, "; "))
	if len(ss.problems) == 0 && ss.skipped == 0 {
		s.recovery = ""
		s.log.Info().Msg("recovery requested, but the log and the snapshots are intact: nothing lost")
		return
	}
	s.log.Error().Uint64("snapshot_seq", ss.restored).Uint64("records_lost", ss.skipped).Int("rounds_rolled_back", rolled).
		Strs("problems", ss.problems).Int("next_round", s.nextRound()).Msg(s.recovery)
	// Records up to the log's end at start are folded or lost for good:
	// the recovery snapshot covers them, so the compaction behind it
	// removes the damage (new records come after that end).
	s.fold.seq = max(s.fold.seq, s.catchUp)
	for _, seq := range ss.drop {
		if err := snaps.obj.Delete(ctx, snapshotName(seq)); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			s.log.Warn().Err(err).Uint64("seq", seq).Msg("recovery: cannot delete a damaged snapshot")
		}
	}
	if err := st.kv.Delete(ctx, snapshotKey); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		s.log.Warn().Err(err).Msg("recovery: cannot delete the round summary")
	}
	s.checkpoint(true)
}

// stateWrite is one snapshot for the writer. After a recovery the log is
// compacted up to the snapshot itself, taking the damage with it: the
// state before the recovery is gone anyway.
type stateWrite struct {
	parts     [][]byte // the payload, sealed by the writer
	seq       uint64
	round     int
	recovered bool
}

// snapshotDelay is how long after a round's plan its snapshot waits, at
// most (half a round at the least): the plan sets off the round's burst of
// work, its leases sent, the jobs' processes starting and stopping, their
// first events, and at 10,000 jobs a snapshot's capture and encoding
// (tens of milliseconds on the loop, 100 and more off it) on top of that
// burst made most of the events that waited over 10 ms (docs/scale.md,
// session 14). A second later the cores are idle.
const snapshotDelay = time.Second

// checkpointLater schedules the snapshot of every SnapshotRounds-th round
// for after the round's burst (snapshotDelay); the loop's timer takes it
// (checkpointDue).
func (s *Service) checkpointLater() {
	if s.fold.core == nil || (!s.snapCarry && s.fold.core.NextRound()%s.cfg.SnapshotRounds != 0) {
		return
	}
	s.snapCarry = false
	s.snapLater = time.Now().Add(min(snapshotDelay, s.roundLength()/2))
}

// checkpointDue takes the snapshot checkpointLater scheduled. A round
// opened meanwhile (rounds shorter than the delay allows, or a tick
// retried) carries it to that round's plan.
func (s *Service) checkpointDue() {
	if s.snapLater.IsZero() {
		return
	}
	s.snapLater = time.Time{}
	if !s.live { // deposed meanwhile: snapshots are the leader's
		return
	}
	if s.fold.open != nil {
		s.snapCarry = true
		return
	}
	s.snapshot(false)
}

// checkpoint hands the fold's state to the snapshot writer, every
// SnapshotRounds rounds or when forced.
func (s *Service) checkpoint(recovered bool) {
	if s.fold.core == nil || (!recovered && s.fold.core.NextRound()%s.cfg.SnapshotRounds != 0) {
		return
	}
	s.snapshot(recovered)
}

// snapshot hands the fold's state to the snapshot writer now, unless a
// round is open or a snapshot is being saved (then when forced, at the
// next plan), or the last one was expensive and not forced.
func (s *Service) snapshot(recovered bool) {
	if s.fold.core == nil {
		return
	}
	if s.fold.open != nil || s.fold.lending != nil { // a snapshot holds no open round; one at a time
		s.snapDue = s.snapDue || recovered
		return
	}
	cost := s.snapTook + time.Duration(s.snapPolicy.Load())
	if !recovered && cost >= snapshotCheap && time.Since(s.snapAt) < time.Duration(float64(cost)/s.cfg.SnapshotShare) {
		return // the last one was expensive: wait (DefaultSnapshotShare)
	}
	s.snapDue = false
	start := time.Now()
	img, marshal, err := s.fold.lendParts()
	s.snapAt, s.snapTook = time.Now(), time.Since(start)
	s.observeStep("snapshot_capture", s.snapTook)
	if err != nil {
		s.m.snapshotErrors.Inc()
		s.log.Error().Err(err).Msg("cannot snapshot the state")
		return
	}
	w := stateWrite{seq: s.fold.seq, round: s.fold.core.NextRound(), recovered: recovered}
	done := make(chan struct{})
	s.fold.lending = done
	go func() {
		// The policy's state, the larger part, is saved here while the
		// loop goes on folding events, then the state the loop captured
		// is encoded (snapshot.go, foldImage); their time counts too.
		start := time.Now()
		state := marshal()
		close(done)
		head, tail, err := img.encode()
		took := time.Since(start)
		if err != nil {
			s.snapPolicy.Store(int64(took))
			s.m.snapshotErrors.Inc()
			s.log.Error().Err(err).Msg("cannot snapshot the state")
			return
		}
		w.parts = [][]byte{head, blobLen(state), state, tail}
		s.handOver(w, took)
	}()
}

// handOver gives a snapshot to the writer; a newer one replaces one the
// writer has not taken yet.
func (s *Service) handOver(w stateWrite, took time.Duration) {
	s.snapPolicy.Store(int64(took))
	select {
	case s.stateq <- w:
	default:
		select {
		case old := <-s.stateq: // the writer fell behind: the newer snapshot wins
			w.recovered = w.recovered || old.recovered
		default:
		}
		s.stateq <- w
	}
}

// writeStates stores the snapshots the loop hands over, then compacts.
func (s *Service) writeStates(ctx context.Context, st *storage, snaps *snapshotStore) {
	for {
		select {
		case <-ctx.Done():
			return
		case w := <-s.stateq:
			if err := s.storeState(ctx, st, snaps, w); err != nil && ctx.Err() == nil {
				s.m.snapshotErrors.Inc()
				s.log.Warn().Err(err).Msg("cannot store the state snapshot")
			}
		}
	}
}

// storeState writes one snapshot, reads it back, keeps the two newest and
// purges the log behind the older of them.
func (s *Service) storeState(ctx context.Context, st *storage, snaps *snapshotStore, w stateWrite) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	head := &StateSnapshot{Seq: w.seq}
	start := time.Now()
	sealed := sealSnapshot(w.seq, w.round, w.parts...)
	w.parts = nil
	s.storeStep(fmt.Sprintf("compression to %.1f MiB", float64(len(sealed))/(1<<20)), &start)
	info, err := snaps.obj.Put(ctx, jetstream.ObjectMeta{Name: snapshotName(head.Seq)}, paced(ctx, bytes.NewReader(sealed), snapshotPace))
	if err != nil {
		return fmt.Errorf("writing %s: %w", snapshotName(head.Seq), err)
	}
	s.storeStep(fmt.Sprintf("put of %.1f MiB", float64(info.Size)/(1<<20)), &start)
	if err := snaps.verify(ctx, head.Seq, snapshotPace); err != nil {
		return fmt.Errorf("reading back: %w", err)
	}
	s.storeStep("verify", &start)
	defer func() { // once the log is compacted behind it
		s.m.snapshotSeq.Set(float64(head.Seq))
		s.m.snapshotBytes.Set(float64(info.Size))
	}()
	seqs, err := snaps.list(ctx)
	if err != nil {
		return err
	}
	keep := keepSnapshots
	if w.recovered {
		keep = 1
	}
	if len(seqs) < keep {
		return nil
	}
	for _, seq := range seqs[keep:] {
		if err := snaps.obj.Delete(ctx, snapshotName(seq)); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			return fmt.Errorf("deleting %s: %w", snapshotName(seq), err)
		}
	}
	upTo := seqs[keep-1]
	if err := purgeBelow(ctx, st.stream, upTo+1, purgeStep, purgePause); err != nil {
		return fmt.Errorf("compacting the log up to record %d: %w", upTo, err)
	}
	s.storeStep("purge", &start)
	s.log.Debug().Uint64("snapshot_seq", head.Seq).Uint64("bytes", info.Size).Uint64("compacted_to", upTo).Msg("state snapshot stored")
	return nil
}

// storeStep reports how long a step of storing a snapshot took since
// *start (tests, benchmarks: onStore) and restarts the clock.
func (s *Service) storeStep(step string, start *time.Time) {
	if s.cfg.onStore != nil {
		s.cfg.onStore(step, time.Since(*start))
	}
	*start = time.Now()
}

// snapshotMetrics describe the newest stored state snapshot.
type snapshotMetrics struct {
	snapshotSeq   prometheus.Gauge
	snapshotBytes prometheus.Gauge
	catchUps      prometheus.Counter // catchup.go
}

func newSnapshotMetrics(reg prometheus.Registerer) snapshotMetrics {
	m := snapshotMetrics{
		snapshotSeq:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "shockwave_snapshot_log_sequence", Help: "Log record the newest stored state snapshot covers; the log is compacted behind the one before it."}),
		snapshotBytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "shockwave_snapshot_bytes", Help: "Size of the newest stored state snapshot."}),
		catchUps:      prometheus.NewCounter(prometheus.CounterOpts{Name: "shockwave_standby_catch_ups_total", Help: "Times this coordinator, not serving, fell behind the log's compaction and continued from the newest snapshot."}),
	}
	reg.MustRegister(m.snapshotSeq, m.snapshotBytes, m.catchUps)
	return m
}
