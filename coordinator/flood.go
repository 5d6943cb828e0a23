package coordinator

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// The flood guard of the embedded server. A job's event budget acts in the
// fold, after the log has stored every message, so a connection that
// publishes as fast as it can fills the log faster than the fold reads it
// and the rounds stall behind the backlog (docs/security.md: no round in a
// 10 s flood of about 300,000 messages a second). The guard reads the
// message and byte counts of the jobs' account's connections every second
// and disconnects any connection that sent more than the limit a second
// (or more than floodBytesPerMsg times it in bytes) since the last
// reading; in creds mode it also revokes that credential, so the job
// cannot connect again, and in none and token mode it refuses the address
// new job connections for a cooldown. Honest clients stay far below: a job
// sends an event batch every sampling interval (a second by default), an
// agent a heartbeat every few seconds. With an external NATS server
// (--nats-url) there is no guard: that server's operator sets its limits.

// DefaultFloodLimit is the message rate, per second, beyond which the
// embedded server's flood guard disconnects a job's connection.
const DefaultFloodLimit = 10_000

// floodEvery is how often the guard reads the connections' counts.
const floodEvery = time.Second

// floodGuard tracks the message counts of the jobs' connections.
type floodGuard struct {
	limit  float64
	byUser bool                  // sum each credential's connections (creds mode: the user is the job's key)
	last   map[uint64]floodCount // connection id → what it had sent at the last reading
	at     time.Time
	kicks  atomic.Int64

	// In none and token mode a disconnected client can connect again at
	// once (any client may; there is no credential to revoke), so the
	// address a flooding connection came from is refused new job
	// connections for a cooldown: floodCooldown, doubling with every
	// disconnection from that address within floodMemory, up to
	// floodCooldownMax. Its other connections stay.
	mu     sync.Mutex
	banned map[string]floodBan // by remote host
}

// floodBan is an address's cooldown.
type floodBan struct {
	until, last time.Time
	strikes     int
}

const (
	floodCooldown    = 10 * time.Second
	floodCooldownMax = 5 * time.Minute
	floodMemory      = 10 * time.Minute
)

// ban starts or extends host's cooldown at now and returns it.
func (g *floodGuard) ban(host string, now time.Time) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.banned == nil {
		g.banned = map[string]floodBan{}
	}
	for h, b := range g.banned { // forget the addresses quiet for floodMemory
		if now.Sub(b.last) > floodMemory {
			delete(g.banned, h)
		}
	}
	b := g.banned[host]
	b.strikes++
	d := min(floodCooldown<<min(b.strikes-1, 10), floodCooldownMax)
	b.until, b.last = now.Add(d), now
	g.banned[host] = b
	return d
}

// refused says whether a new job connection from host is refused at now.
func (g *floodGuard) refused(host string, now time.Time) bool {
	if g == nil || host == "" {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	b, ok := g.banned[host]
	return ok && now.Before(b.until)
}

// floodSuspect is a connection over the limit.
type floodSuspect struct {
	cid   uint64
	user  string  // the credential's user key in creds mode
	name  string  // the client's connection name
	host  string  // the client's address ("" in process)
	rate  float64 // messages a second
	bytes float64 // bytes a second
}

// floodBytesPerMsg sets the byte limit: the message limit times this (10
// MiB a second by default); an honest job's batch is a few hundred bytes,
// the largest (256 events after an outage) about 64 KiB.
const floodBytesPerMsg = 1 << 10

// floodCount is a connection's counts at a reading.
type floodCount struct{ msgs, bytes int64 }

// over says whether msgs and bytes a second exceed the guard's limits.
func (g *floodGuard) over(msgs, bytes float64) bool {
	return msgs > g.limit || bytes > g.limit*floodBytesPerMsg
}

// check reads the counts of account's connections at now and returns the
// connections whose message or byte rate since the previous reading
// exceeds the limit. The first reading only records.
func (g *floodGuard) check(s *server.Server, account string, now time.Time) []floodSuspect {
	cz, err := s.Connz(&server.ConnzOptions{Account: account, Username: true, Limit: 1 << 30})
	if err != nil {
		return nil
	}
	next := make(map[uint64]floodCount, len(cz.Conns))
	var out []floodSuspect
	secs := now.Sub(g.at).Seconds()
	// A credential's connections together (creds mode): a job may not
	// split a flood over several connections with its one credential.
	// Addresses are not summed: jobs behind one address (a NAT, or all
	// of them on a loopback-only setup) send as much as the cluster does.
	perUser := map[string][]floodSuspect{}
	userRate := map[string][2]float64{}
	for _, c := range cz.Conns {
		next[c.Cid] = floodCount{c.InMsgs, c.InBytes}
		prev, ok := g.last[c.Cid]
		if !ok || g.at.IsZero() || secs <= 0 || c.InMsgs <= prev.msgs {
			continue
		}
		s := floodSuspect{cid: c.Cid, user: c.AuthorizedUser, name: c.Name, host: c.IP,
			rate: float64(c.InMsgs-prev.msgs) / secs, bytes: float64(c.InBytes-prev.bytes) / secs}
		switch {
		case g.over(s.rate, s.bytes):
			out = append(out, s)
		case g.byUser && s.user != "":
			perUser[s.user] = append(perUser[s.user], s)
			r := userRate[s.user]
			userRate[s.user] = [2]float64{r[0] + s.rate, r[1] + s.bytes}
		}
	}
	for user, conns := range perUser {
		if r := userRate[user]; g.over(r[0], r[1]) {
			out = append(out, conns...)
		}
	}
	g.last, g.at = next, now
	return out
}

// watch reads the server every floodEvery until stop is closed: the jobs'
// connections' counts for the flood guard when it is on (guard), and the
// connection count for the advice (connadvice.go).
func (e *Embedded) watch(account string, guard bool, stop <-chan struct{}) {
	tick := time.NewTicker(floodEvery)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-tick.C:
			if guard {
				for _, s := range e.flood.check(e.Server, account, now) {
					e.disconnectFlooder(s)
				}
			}
			e.advise()
		}
	}
}

// disconnectFlooder disconnects a connection over the limit and, in creds
// mode, revokes its credential.
func (e *Embedded) disconnectFlooder(s floodSuspect) {
	e.flood.kicks.Add(1)
	revoked := false
	var cooldown time.Duration
	switch {
	case e.auth != nil && s.user != "":
		if err := e.auth.revokeKeys([]string{s.user}, time.Now()); err == nil {
			revoked = true
		} else if e.log != nil {
			e.log.Error().Err(err).Str("user", s.user).Msg("cannot revoke a flooding job's credential")
		}
	case e.local != nil && s.host != "":
		cooldown = e.flood.ban(s.host, time.Now())
	}
	_ = e.Server.DisconnectClientByID(s.cid)
	if e.log != nil {
		e.log.Warn().Uint64("cid", s.cid).Str("client", s.name).Str("user", s.user).Str("host", s.host).
			Float64("msgs_per_s", s.rate).Float64("bytes_per_s", s.bytes).Float64("limit", e.flood.limit).Bool("revoked", revoked).Dur("cooldown", cooldown).
			Msg("disconnected a job connection publishing beyond the flood limit")
	}
}

// FloodDisconnects counts the connections the flood guard disconnected.
func (e *Embedded) FloodDisconnects() int64 { return e.flood.kicks.Load() }
