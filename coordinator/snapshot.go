package coordinator

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/shockwave-sched/shockwave/internal/wire"
	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
)

// A state snapshot is the whole state of a fold — the Core with its jobs
// and its policy's state (forecaster posteriors, market plan, Gavel
// mechanism), the last round and its leases, the log's configuration —
// at one log sequence. A restart restores the newest good snapshot and
// replays only the records after it; the log is compacted behind
// snapshots (recovery.go). The envelope (magic, version, digest,
// compression) is snapenvelope.go's.
//
// The payload holds the configuration record (JSON), the fold's clock,
// the last round and its RUN leases (JSON), then the Core's state
// (snapshot_core.go) ending with the policy's (policy.Stateful).

// encodeState writes the fold's state as a snapshot.
func (f *fold) encodeState() ([]byte, error) {
	payload, err := f.encodePayload()
	if err != nil {
		return nil, err
	}
	return sealSnapshot(f.seq, f.core.NextRound(), payload), nil
}

// encodePayload writes the fold's state without the envelope: the part a
// snapshot costs the loop (sealSnapshot, hashing it, runs in the writer).
func (f *fold) encodePayload() ([]byte, error) {
	f.returnPolicy()
	if f.core != nil && f.core.lent {
		return nil, errors.New("coordinator: cannot snapshot while the policy's state is being saved")
	}
	img, sp, err := f.capture()
	if err != nil {
		return nil, err
	}
	head, tail, err := img.encode()
	if err != nil {
		return nil, err
	}
	state := sp.MarshalState()
	var e wire.Encoder
	e.Blob(state)
	return slices.Concat(head, e.Bytes(), tail), nil
}

// foldImage is the fold's state at one log record, captured by the loop
// in little time; its encoding (the JSON of the last round and of the last
// plan, the job table, the event budgets) can run on another goroutine
// while the loop goes on folding. The last round, its leases and the plan
// are immutable once made; the rest is copied.
type foldImage struct {
	cfg     []byte // the configuration record's JSON
	now     float64
	seq     uint64
	last    *Round
	leases  []protocol.Lease // RUN leases of the last round still held, in map order
	core    *coreImage
	run     *runnerState // submitted jobs and nodes (runner.go), encoded with the rest
	epoch   uint64
	budgets []budgetImage // in map order
	sizes   *encodeSizes  // the fold's: the last encoding's sizes
}

// encodeSizes are the sizes of the last snapshot's encoded head and tail,
// from which the next sizes its buffers (wire.Encoder.GrowLike): at
// 10,000 jobs, growing the head by appends allocated several times its
// size. Atomic: a snapshot's encoding may overlap the next capture.
type encodeSizes struct{ head, tail atomic.Int64 }

type budgetImage struct {
	job string
	b   budget
}

// capture takes the fold's state but the policy's (sp's MarshalState).
func (f *fold) capture() (*foldImage, policy.Stateful, error) {
	img, sp, err := f.captureHead()
	if err != nil {
		return nil, nil, err
	}
	if img.core, sp, err = f.core.capture(); err != nil {
		return nil, nil, err
	}
	return img, sp, nil
}

// captureHead takes what the fold holds besides the Core.
func (f *fold) captureHead() (*foldImage, policy.Stateful, error) {
	if f.core == nil || f.cfg == nil {
		return nil, nil, errors.New("coordinator: nothing to snapshot before the configuration record")
	}
	cfg, err := json.Marshal(f.cfg)
	if err != nil {
		return nil, nil, err
	}
	img := &foldImage{cfg: cfg, now: f.now, seq: f.seq, last: f.last, run: f.run.capture(), epoch: f.epoch,
		leases: make([]protocol.Lease, 0, len(f.leases)), budgets: make([]budgetImage, 0, len(f.budgets)), sizes: &f.sizes}
	for _, l := range f.leases {
		img.leases = append(img.leases, l)
	}
	for j, b := range f.budgets {
		img.budgets = append(img.budgets, budgetImage{job: j, b: *b})
	}
	return img, nil, nil
}

// lendParts captures the fold's state and lends the policy's to the
// caller (marshal), to save on another goroutine: until returnPolicy the
// Core holds back its policy calls and begins no round
// (snapshot_core.go, lendPolicy). The payload is the image's head, the
// policy's state as a blob, then the image's tail (foldImage.encode).
func (f *fold) lendParts() (img *foldImage, marshal func() []byte, err error) {
	f.returnPolicy()
	if img, _, err = f.captureHead(); err != nil {
		return nil, nil, err
	}
	if img.core, marshal, err = f.core.lendPolicy(); err != nil {
		return nil, nil, err
	}
	return img, marshal, nil
}

// returnPolicy waits for a lent policy's state to be saved and gives the
// policy back to the Core.
func (f *fold) returnPolicy() {
	if f.lending == nil {
		return
	}
	<-f.lending
	f.lending = nil
	f.core.returnPolicy()
}

// lent is closed when a lent policy can go back to the Core (nil: none is
// lent).
func (f *fold) lent() <-chan struct{} { return f.lending }

// encode writes the captured state: the payload is head, the policy's
// state as a blob, then tail.
func (img *foldImage) encode() (head, tail []byte, err error) {
	var e, t wire.Encoder
	e.GrowLike(int(img.sizes.head.Load()))
	t.GrowLike(int(img.sizes.tail.Load()))
	if err := img.encodeHead(&e); err != nil {
		return nil, nil, err
	}
	if err := img.core.append(&e); err != nil {
		return nil, nil, err
	}
	run, err := img.run.marshal()
	if err != nil {
		return nil, nil, err
	}
	t.Blob(run)
	img.appendFences(&t) // leader epoch and event budgets (caps.go), last: older snapshots lack them
	img.sizes.head.Store(int64(len(e.Bytes())))
	img.sizes.tail.Store(int64(len(t.Bytes())))
	return e.Bytes(), t.Bytes(), nil
}

func (img *foldImage) encodeHead(e *wire.Encoder) error {
	last, err := roundJSON(img.last) // off the loop, in yielding pieces (yield.go)
	if err != nil {
		return fmt.Errorf("coordinator: snapshot of the last round: %w", err)
	}
	slices.SortFunc(img.leases, func(a, b protocol.Lease) int { return strings.Compare(a.Job, b.Job) })
	leases, err := leasesJSON(img.leases)
	if err != nil {
		return err
	}
	e.Blob(img.cfg)
	e.F64(img.now)
	e.U64(img.seq)
	e.Blob(last)
	e.Blob(leases)
	return nil
}

// blobLen is the length prefix wire.Encoder.Blob writes before a blob.
func blobLen(b []byte) []byte {
	var e wire.Encoder
	e.U64(uint64(len(b)))
	return e.Bytes()
}

// restore builds a fold from the snapshot: a fresh Core and policy from
// the configuration it carries, then the state.
func (s *StateSnapshot) restore(subj protocol.Subjects, limit int) (*fold, error) {
	d := wire.NewDecoder(s.payload)
	rawCfg := d.Blob()
	now, seq := d.F64(), d.U64()
	last, leases := d.Blob(), d.Blob()
	if d.Err() != nil {
		return nil, fmt.Errorf("%w: %v", ErrSnapshotCorrupt, d.Err())
	}
	if seq != s.Seq {
		return nil, fmt.Errorf("%w: payload covers log record %d, header %d", ErrSnapshotCorrupt, seq, s.Seq)
	}
	cfg, err := decodeConfigRecord(rawCfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSnapshotCorrupt, err)
	}
	core, err := cfg.core()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSnapshotCorrupt, err)
	}
	f := newFold(subj, limit)
	f.core, f.cfg, f.now, f.seq = core, cfg, now, seq
	core.onForget = f.forgetJob
	if err := json.Unmarshal(last, &f.last); err != nil {
		return nil, fmt.Errorf("%w: last round: %v", ErrSnapshotCorrupt, err)
	}
	var ls []protocol.Lease
	if err := json.Unmarshal(leases, &ls); err != nil {
		return nil, fmt.Errorf("%w: leases: %v", ErrSnapshotCorrupt, err)
	}
	for _, l := range ls {
		f.leases[l.Job] = l
	}
	if err := core.loadState(d); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSnapshotCorrupt, err)
	}
	if err := f.run.unmarshal(d.Blob()); err != nil || d.Err() != nil {
		return nil, fmt.Errorf("%w: submitted jobs and nodes: %v", ErrSnapshotCorrupt, errors.Join(err, d.Err()))
	}
	if d.Left() > 0 {
		f.loadFences(d)
	}
	if err := d.End(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSnapshotCorrupt, err)
	}
	if core.NextRound() != s.Round {
		return nil, fmt.Errorf("%w: header says round %d, state %d", ErrSnapshotCorrupt, s.Round, core.NextRound())
	}
	return f, nil
}

// RestoreStateSnapshot decodes a snapshot and restores its state into a
// fresh Core, as a restart does; it returns the Core and the log sequence
// the state covers.
func RestoreStateSnapshot(data []byte, prefix string) (*Core, uint64, error) {
	s, err := DecodeStateSnapshot(data)
	if err != nil {
		return nil, 0, err
	}
	f, err := s.restore(protocol.Subjects{Prefix: prefix}, protocol.DefaultMaxMessageBytes)
	if err != nil {
		return nil, 0, err
	}
	return f.core, f.seq, nil
}
