package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/shockwave-sched/shockwave/protocol"
)

// One writer (see doc.go, "Leadership"). Coordinators on one log elect a
// leader through a key of a JetStream KV bucket, <PREFIX>_LEADER. The key's
// value names the holder and its epoch; every change is a compare-and-swap
// (KV Create, or Update with the revision read), so two coordinators can
// never both win an epoch. The holder renews the key every ttl/4; a standby
// that sees the same revision for ttl takes the key over with epoch+1; a
// leader that shuts down cleanly marks the key released, so a standby (or
// its own restart) takes over at once.
//
// A leader that cannot renew for 2/3 ttl (or learns that another holds the
// key) stops publishing before any standby may take over: it is deposed and
// goes back to standby. The epoch also fences the log: the new leader first
// appends a leader record with its epoch, and the fold ignores every later
// tick of an older epoch. Leases carry the epoch, and the SDK drops leases
// of an epoch below the highest it has seen.

// logLeader is the subject of leader records, below the prefix.
const logLeader = "log.leader"

// leaderKey is the KV key of the leader lease.
const leaderKey = "leader"

// leaderBucket is the KV bucket of prefix's leader lease.
func leaderBucket(prefix string) string {
	stream, _ := streamNames(prefix)
	return stream[:len(stream)-len("_LOG")] + "_LEADER"
}

// leaderValue is the value of the leader key.
type leaderValue struct {
	V        int    `json:"v"`
	ID       string `json:"id"`
	Epoch    uint64 `json:"epoch"`
	Released bool   `json:"released,omitempty"`
	Host     string `json:"host,omitempty"` // informational: host name and pid
	// Server is the id of the NATS server the holder was connected to.
	Server string `json:"server,omitempty"`
}

// leaderRecord is the first record a new leader appends to the log.
type leaderRecord struct {
	V     int    `json:"v"`
	ID    string `json:"id"`
	Epoch uint64 `json:"epoch"`
}

func decodeLeaderRecord(data []byte) (*leaderRecord, error) {
	var r leaderRecord
	if err := protocol.DecodeStrictJSON(data, &r); err != nil {
		return nil, fmt.Errorf("coordinator: leader record: %w", err)
	}
	if r.V != protocol.Version || r.Epoch == 0 || r.ID == "" {
		return nil, fmt.Errorf("coordinator: leader record: version %d, epoch %d, id %q", r.V, r.Epoch, r.ID)
	}
	return &r, nil
}

// errDeposed says that another coordinator holds the leader lease.
var errDeposed = errors.New("coordinator: another coordinator took the leader lease")

// leadership campaigns for, holds and renews the leader lease. Its fields
// are owned by its run goroutine.
type leadership struct {
	kv    jetstream.KeyValue
	id    string
	host  string
	ttl   time.Duration
	log   zerolog.Logger
	floor func() uint64 // the highest epoch the log has seen
	// server is the id of the NATS server this coordinator is connected
	// to; ownServer says it is an embedded single server this process
	// started (ServiceConfig.OwnServer).
	server    func() string
	ownServer bool

	epoch   uint64    // held epoch, 0 when standby
	rev     uint64    // revision of the held key
	renewed time.Time // when the last successful renewal was sent

	seenRev uint64    // standby: the revision last seen
	seenAt  time.Time // standby: when it was first seen
	holder  leaderValue
}

// openLeadership binds the leader bucket.
func openLeadership(ctx context.Context, js jetstream.JetStream, subj protocol.Subjects, cfg *ServiceConfig, id string) (*leadership, error) {
	bucket := leaderBucket(subj.Prefix)
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: bucket, Description: "shockwave coordinator leader lease", History: 1,
		Storage: cfg.Storage, Replicas: cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("coordinator: leader bucket %s: %w", bucket, err)
	}
	host, _ := os.Hostname()
	return &leadership{kv: kv, id: id, host: fmt.Sprintf("%s/%d", host, os.Getpid()), ttl: cfg.LeaderTTL, log: *cfg.Logger,
		server: func() string { return "" }, ownServer: cfg.OwnServer}, nil
}

func (l *leadership) value(epoch uint64, released bool) []byte {
	data, _ := json.Marshal(leaderValue{V: protocol.Version, ID: l.id, Epoch: epoch, Released: released, Host: l.host, Server: l.server()})
	return data
}

// run campaigns until ctx is done: it sends the epoch on elected when this
// coordinator becomes leader, and the reason on deposed when it stops being
// one. A clean stop releases a held lease.
func (l *leadership) run(ctx context.Context, elected chan<- uint64, deposed chan<- error) {
	tick := time.NewTicker(max(l.ttl/5, 10*time.Millisecond))
	defer tick.Stop()
	for {
		if l.epoch == 0 {
			if l.tryAcquire(ctx) {
				select {
				case elected <- l.epoch:
				case <-ctx.Done():
				}
			}
		} else if err := l.renew(ctx); err != nil && ctx.Err() == nil {
			if errors.Is(err, errDeposed) || time.Since(l.renewed) > l.ttl*2/3 {
				l.log.Error().Err(err).Uint64("epoch", l.epoch).Msg("lost the leader lease; stopping publication and standing by")
				l.epoch, l.seenRev = 0, 0
				select {
				case deposed <- err:
				case <-ctx.Done():
				}
			} else {
				l.log.Warn().Err(err).Msg("cannot renew the leader lease; retrying")
			}
		}
		select {
		case <-ctx.Done():
			l.release()
			return
		case <-tick.C:
		}
	}
}

// tryAcquire takes the lease when it is free, released, or unchanged for a
// ttl; it reports whether this coordinator now holds it.
func (l *leadership) tryAcquire(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(ctx, l.ttl)
	defer cancel()
	e, err := l.kv.Get(cctx, leaderKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		epoch := l.floor() + 1
		sent := time.Now()
		rev, err := l.kv.Create(cctx, leaderKey, l.value(epoch, false))
		if err == nil {
			l.epoch, l.rev, l.renewed = epoch, rev, sent
			return true
		}
		return false
	}
	if err != nil {
		return false
	}
	var v leaderValue
	if json.Unmarshal(e.Value(), &v) != nil {
		v = leaderValue{}
	}
	if e.Revision() != l.seenRev {
		if l.seenRev == 0 || v.ID != l.holder.ID {
			l.log.Info().Str("leader", v.Host).Uint64("epoch", v.Epoch).Bool("released", v.Released).Msg("standing by: another coordinator holds the leader lease")
		}
		l.seenRev, l.seenAt, l.holder = e.Revision(), time.Now(), v
	}
	// A holder that reached the log through another incarnation of our own
	// embedded server died with it (this process holds the data
	// directory's lock): no need to wait for its lease to run out.
	stale := l.ownServer && v.Server != "" && v.Server != l.server()
	if !v.Released && !stale && time.Since(l.seenAt) < l.ttl {
		return false
	}
	epoch := max(v.Epoch, l.floor()) + 1
	sent := time.Now()
	rev, err := l.kv.Update(cctx, leaderKey, l.value(epoch, false), e.Revision())
	if err != nil {
		return false
	}
	if !v.Released && !stale {
		l.log.Warn().Str("previous", v.Host).Uint64("previous_epoch", v.Epoch).Float64("silent_for_s", time.Since(l.seenAt).Seconds()).
			Msg("the leader stopped renewing its lease; taking over")
	}
	l.epoch, l.rev, l.renewed = epoch, rev, sent
	return true
}

// renew extends the held lease.
func (l *leadership) renew(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, l.ttl/2)
	defer cancel()
	sent := time.Now()
	rev, err := l.kv.Update(cctx, leaderKey, l.value(l.epoch, false), l.rev)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("%w (epoch %d)", errDeposed, l.epoch)
	}
	if err != nil {
		return err
	}
	l.rev, l.renewed = rev, sent
	return nil
}

// release marks a held lease free, so that a standby takes over at once.
func (l *leadership) release() {
	if l.epoch == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := l.kv.Update(ctx, leaderKey, l.value(l.epoch, true), l.rev); err != nil {
		l.log.Warn().Err(err).Msg("cannot release the leader lease; a standby takes over after its ttl")
	}
	l.epoch = 0
}

// defaultLeaderTTL is the leader lease's ttl for a round length: two
// rounds, between 1 s and 5 s, so that a standby takes over well within
// max(2 rounds, 10 s).
func defaultLeaderTTL(round time.Duration) time.Duration {
	return min(max(2*round, time.Second), 5*time.Second)
}
