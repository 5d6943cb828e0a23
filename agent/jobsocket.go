package agent

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/shockwave-sched/shockwave/protocol"
)

// The job socket (docs/agent.md, "The job socket"). Resident jobs, whose
// processes the agent did not start (a user or another launcher did, and
// their Register names the node), connect to a Unix socket at a path the
// agent's operator chooses ($SHOCKWAVE_AGENT_SOCKET) instead of opening a
// NATS connection each: at 10,000 resident jobs the server then holds one
// connection per node instead of one per job. A connection opens with a
// hello (the job token in token mode), then speaks the uplink (uplink.go:
// the same reader, writer, limits and forwarding), bound to the job of its
// first register, which must name this node. Once the coordinator
// answered that register, the agent subscribes to the job's lease subject
// and writes each lease into the socket as a lease line. A relaying agent
// also marks the registers it forwards relayed, and writes the RUN leases
// the coordinator lists in the node's desired state (NodeDesired.Residents)
// into the sockets of their jobs, and a SUSPEND when a job it relayed a RUN
// to is no longer listed: a coordinator that relays them publishes none of
// their RUN or SUSPEND leases.

// Defaults of the job socket.
const (
	DefaultJobSocketMode os.FileMode = 0o600

	defaultJobHelloTimeout = 5 * time.Second
	defaultJobSocketConns  = 1024
	// maxSocketPath is the longest path a Unix socket address holds
	// (sun_path is 108 bytes with its terminating NUL).
	maxSocketPath = 107
)

// JobSocketStats counts what the job socket did since the agent started
// (part of UplinkStats). The lines of a welcomed connection count with the
// uplinks' (Registers, Batches, Refused, …).
type JobSocketStats struct {
	SocketConns     uint64 // connections accepted
	SocketBusy      uint64 // connections closed at once: the limit of connections was reached
	Unwelcome       uint64 // connections closed without a welcome: no hello in time, not a hello, a wrong token, creds mode
	Leases          uint64 // lease lines queued for a connection from the job's lease subject
	LeasesDropped   uint64 // messages on a job's lease subject that were not a valid lease of the job
	RelayedLeases   uint64 // lease lines queued for a connection from a desired state's Residents (RUN)
	RelayedSuspends uint64 // SUSPEND lease lines queued for a connection whose job left the Residents
}

func (c *Config) validateJobSocket() error {
	if c.JobSocketMode == 0 {
		c.JobSocketMode = DefaultJobSocketMode
	}
	switch {
	case c.JobSocket == "":
	case len(c.JobSocket) > maxSocketPath:
		return fmt.Errorf("agent: job socket %s: the path is longer than a Unix socket's %d bytes", c.JobSocket, maxSocketPath)
	case c.JobSocketMode&^fs.ModePerm != 0:
		return fmt.Errorf("agent: job socket mode %#o: only permission bits (at most 0777)", uint32(c.JobSocketMode))
	}
	if c.jobHelloTimeout <= 0 {
		c.jobHelloTimeout = defaultJobHelloTimeout
	}
	if c.jobSocketConns <= 0 {
		c.jobSocketConns = defaultJobSocketConns
	}
	return nil
}

// jobSocket is the agent's listener for resident jobs.
type jobSocket struct {
	hub    *uplinkHub // the agent's uplink hub, or one of the socket's own (NoUplink, NoRelay)
	path   string
	mode   os.FileMode
	token  string // token mode: a hello must carry it
	creds  bool   // creds mode: resident jobs connect with their own credentials
	relays bool   // the agent relays: registers are marked relayed, Residents are written (relay)
	hello  time.Duration
	limit  int
	lease  func(job string) string // the job's lease subject
	log    zerolog.Logger
	ln     *net.UnixListener
	file   os.FileInfo // the socket file, removed at close if still the same
	done   sync.WaitGroup
	nextID atomic.Uint64
	warned atomic.Int64 // when the socket last logged a warning (Unix ns)
	stats  struct {
		conns, busy, unwelcome, leases, leasesDropped, relayedLeases, relayedSuspends atomic.Uint64
	}

	mu   sync.Mutex
	open map[*uplink]struct{} // connections not closed yet, welcomed or not
}

func (a *Agent) newJobSocket() *jobSocket {
	h := a.uplinks
	if h == nil {
		h = newUplinkHub(a.cfg.Conn, a.subj, a.cfg.Node, a.log)
		h.hello, _ = json.Marshal(a.hello)
	}
	return &jobSocket{hub: h, path: a.cfg.JobSocket, mode: a.cfg.JobSocketMode, token: a.cfg.Token, creds: a.cfg.FetchCreds,
		hello: a.cfg.jobHelloTimeout, limit: a.cfg.jobSocketConns, lease: a.subj.Lease, open: map[*uplink]struct{}{},
		relays: !a.cfg.NoRelay, log: a.log.With().Str("socket", a.cfg.JobSocket).Logger()}
}

// UplinkStats returns the counts of the agent's uplinks and job socket
// (zero when it has neither).
func (a *Agent) UplinkStats() UplinkStats {
	h := a.uplinks
	var js JobSocketStats
	if a.jobs != nil {
		h = a.jobs.hub
		s := &a.jobs.stats
		js = JobSocketStats{SocketConns: s.conns.Load(), SocketBusy: s.busy.Load(), Unwelcome: s.unwelcome.Load(),
			Leases: s.leases.Load(), LeasesDropped: s.leasesDropped.Load(),
			RelayedLeases: s.relayedLeases.Load(), RelayedSuspends: s.relayedSuspends.Load()}
	}
	if h == nil {
		return UplinkStats{}
	}
	s := &h.stats
	return UplinkStats{Registers: s.registers.Load(), Batches: s.batches.Load(), Flushes: s.flushes.Load(),
		Refused: s.refused.Load(), Malformed: s.malformed.Load(), OverRate: s.overRate.Load(), Failed: s.failed.Load(),
		TooLong: s.tooLong.Load(), Unanswered: s.unanswered.Load(), Notices: s.notices.Load(), JobSocketStats: js}
}

// pollUplinks tells the uplinks and the job socket's connections that the
// agent's connection is back (uplinkHub.poll). Called from the loop.
func (a *Agent) pollUplinks() {
	if a.uplinks != nil {
		a.uplinks.poll()
	}
	if a.jobs != nil && a.jobs.hub != a.uplinks {
		a.jobs.hub.poll()
	}
}

// listen creates the socket and starts accepting. A socket at the path
// that answers belongs to another agent (an error); one that refuses is
// left over from an agent that died, and is replaced; anything else at the
// path is an error.
func (js *jobSocket) listen() error {
	if err := clearStaleSocket(js.path); err != nil {
		return err
	}
	ln, err := listenUnix(js.path, js.mode)
	if err != nil {
		return err
	}
	js.file, err = os.Lstat(js.path)
	if err != nil {
		ln.Close()
		return fmt.Errorf("agent: job socket %s: %w", js.path, err)
	}
	js.ln = ln
	js.done.Add(1)
	go js.accept()
	js.log.Info().Str("mode", fmt.Sprintf("%#o", uint32(js.mode))).Msg("job socket open")
	return nil
}

// clearStaleSocket removes a socket at path that nobody serves.
func clearStaleSocket(path string) error {
	st, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("agent: job socket %s: %w", path, err)
	case st.Mode().Type() != fs.ModeSocket:
		return fmt.Errorf("agent: job socket %s: the path exists and is not a socket (%s); remove it or choose another path", path, st.Mode().Type())
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("agent: job socket %s: another agent serves it", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("agent: job socket %s: cannot tell whether another agent serves it: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("agent: job socket %s: removing the stale socket: %w", path, err)
	}
	return nil
}

// listenUnix listens on a Unix socket at path with the given mode. The
// socket file is created with no permission at all (fchmod before bind,
// which Linux applies to the file bind creates), so that nobody but root
// connects before it has its mode.
func listenUnix(path string, mode os.FileMode) (*net.UnixListener, error) {
	fail := func(what string, err error) (*net.UnixListener, error) {
		return nil, fmt.Errorf("agent: job socket %s: %s: %w", path, what, err)
	}
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return fail("socket", err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close() // net.FileListener holds a duplicate
	if err := syscall.Fchmod(fd, 0); err != nil {
		return fail("fchmod", err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: path}); err != nil {
		return fail("bind", err)
	}
	if err := syscall.Listen(fd, syscall.SOMAXCONN); err != nil {
		os.Remove(path)
		return fail("listen", err)
	}
	if err := os.Chmod(path, mode); err != nil {
		os.Remove(path)
		return fail("chmod", err)
	}
	l, err := net.FileListener(f)
	if err != nil {
		os.Remove(path)
		return fail("listener", err)
	}
	return l.(*net.UnixListener), nil
}

// close stops accepting, closes every connection of the socket and
// removes the socket file (unless another file replaced it meanwhile).
func (js *jobSocket) close() {
	js.ln.Close()
	js.done.Wait()
	for _, u := range js.conns() {
		u.close()
	}
	if st, err := os.Lstat(js.path); err == nil && os.SameFile(st, js.file) {
		if err := os.Remove(js.path); err != nil {
			js.log.Warn().Err(err).Msg("job socket not removed")
		}
	}
}

// accept serves connections until the listener closes; beyond the limit a
// connection is closed at once.
func (js *jobSocket) accept() {
	defer js.done.Done()
	var wait time.Duration
	for {
		c, err := js.ln.AcceptUnix()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil { // out of descriptors, for instance: retry
			wait = min(max(2*wait, 5*time.Millisecond), time.Second)
			js.log.Warn().Err(err).Dur("retry_in", wait).Msg("job socket accept")
			time.Sleep(wait)
			continue
		}
		wait = 0
		if js.openConns() >= js.limit {
			c.Close()
			if n := js.stats.busy.Add(1); js.warn() {
				js.log.Warn().Int("limit", js.limit).Uint64("refused_total", n).
					Msg("job socket connection refused: too many open")
			}
			continue
		}
		js.stats.conns.Add(1)
		js.serve(c)
	}
}

// openConns counts the connections open.
func (js *jobSocket) openConns() int {
	js.mu.Lock()
	defer js.mu.Unlock()
	return len(js.open)
}

// warn says whether the socket may log a warning now: one per
// uplinkWarnEvery across its connections, so that connecting processes
// cannot flood the agent's log.
func (js *jobSocket) warn() bool {
	now, last := time.Now().UnixNano(), js.warned.Load()
	return now-last >= int64(uplinkWarnEvery) && js.warned.CompareAndSwap(last, now)
}

// resident is what a job socket's connection adds to an uplink. Its fields
// before mu are owned by the uplink's reader.
type resident struct {
	js         *jobSocket
	welcomed   bool // the hello was answered with a welcome
	shut       bool // the hello was refused: the lines after it are dropped
	subscribed bool // the job's leases are subscribed to

	mu    sync.Mutex
	sub   *nats.Subscription // the job's leases, after its first register
	ended bool               // closed ran
	job   string             // the job the connection is bound to (u.job, for the agent's loop)
	run   *protocol.Lease    // the RUN lease last relayed from a desired state (nil: none, or a SUSPEND since)
}

// serve runs one connection: an uplink not yet bound to a job, whose
// reader waits js.hello at most for the hello.
func (js *jobSocket) serve(c *net.UnixConn) {
	now := time.Now()
	h := js.hub
	u := &uplink{h: h, conn: c, res: &resident{js: js},
		log: js.log.With().Uint64("conn", js.nextID.Add(1)).Logger(), done: make(chan struct{}), kick: make(chan struct{}, 1),
		lines: newBucket(uplinkLineRate, uplinkLineBurst, now), bytes: newBucket(uplinkByteRate, uplinkByteBurst, now)}
	u.ctx, u.cancel = context.WithCancel(context.Background())
	_ = c.SetReadDeadline(now.Add(js.hello))
	js.mu.Lock()
	js.open[u] = struct{}{}
	js.mu.Unlock()
	h.running.Add(2)
	go func() {
		u.read()
		if !u.res.welcomed {
			js.stats.unwelcome.Add(1)
		}
		// The process closed its end, or the line limit was passed: the
		// writer closes the uplink once the answers due are written, and
		// this closes it when a process that does not read them blocks it.
		time.AfterFunc(uplinkDrain, u.close)
	}()
	go u.write()
}

// admit takes the hello and lets the later lines through to the uplink.
func (r *resident) admit(u *uplink, line []byte) bool {
	switch {
	case r.shut:
		return false
	case !r.welcomed:
		r.hello(u, line)
		return false
	}
	req, err := protocol.DecodeUplinkRequest(line, 0)
	if err == nil && req.Op == protocol.UplinkHelloOp {
		u.reply(req.ID, nil, protocol.CodeBadRequest, errors.New("a job socket takes one hello, as its first line"))
		return false
	}
	return true
}

// hello answers the connection's first line: a welcome, or an error after
// which the connection closes.
func (r *resident) hello(u *uplink, line []byte) {
	js := r.js
	req, err := protocol.DecodeUplinkRequest(line, 0)
	var h *protocol.UplinkHello
	code := protocol.CodeBadRequest
	switch {
	case err != nil:
	case req.Op != protocol.UplinkHelloOp:
		err = fmt.Errorf("the first line on a job socket is a hello, not %s", req.Op)
	case js.creds:
		code, err = protocol.CodeNoUplink, fmt.Errorf("agent %s: in creds mode a resident job connects with its own credentials", u.h.node)
	default:
		if h, err = protocol.DecodeUplinkHello(req.Data); err == nil && js.token != "" &&
			subtle.ConstantTimeCompare([]byte(h.Token), []byte(js.token)) != 1 {
			code, err = protocol.CodeForbidden, fmt.Errorf("agent %s: the hello does not carry the job token", u.h.node)
		}
	}
	if err != nil {
		r.shut = true
		if req != nil && req.ID != 0 {
			u.reply(req.ID, nil, code, err)
		}
		if js.warn() {
			u.log.Warn().Err(err).Msg("job socket connection refused")
		}
		_ = u.conn.CloseRead() // the reader ends; the writer writes the answer, then closes
		return
	}
	welcome, _ := json.Marshal(protocol.UplinkWelcome{V: protocol.Version, Node: u.h.node})
	r.welcomed = true
	_ = u.conn.SetReadDeadline(time.Time{})
	u.reply(req.ID, welcome, "", nil)
	// From now on the connection hears "reconnected" (uplinkHub.poll),
	// after its welcome.
	u.h.mu.Lock()
	select {
	case <-u.done: // closed meanwhile: stay out of the hub
	default:
		u.h.live[u] = struct{}{}
		u.reconnects = u.h.reconnects
	}
	u.h.mu.Unlock()
}

// refuse checks a register on a job socket: it must name this node, read
// no lease pipe (it has none), and name the job of the socket's first
// register, which binds the socket to it.
func (r *resident) refuse(u *uplink, reg *protocol.Register) error {
	switch {
	case reg.Node != u.h.node:
		return fmt.Errorf("agent %s: a job on this agent's socket is resident on node %s (register names node %q)", u.h.node, u.h.node, reg.Node)
	case reg.Relayed:
		return fmt.Errorf("agent %s: a job on this agent's socket has no lease pipe (register says relayed)", u.h.node)
	case u.job != "" && reg.Job != u.job:
		return fmt.Errorf("agent %s: this socket carries job %q; it may not register job %q", u.h.node, u.job, reg.Job)
	}
	if u.job == "" {
		u.job = reg.Job
		r.mu.Lock()
		r.job = reg.Job
		r.mu.Unlock()
	}
	return nil
}

// mark is the register the connection forwards (data, decoded as reg, has
// passed refuse): when the agent relays, reg marked relayed, so that the
// coordinator lists the job's RUN leases in the node's desired state
// instead of publishing them (relay); otherwise data as the process sent it.
func (r *resident) mark(reg *protocol.Register, data []byte) []byte {
	if !r.js.relays {
		return data
	}
	reg.Relayed = true
	b, err := json.Marshal(reg)
	if err != nil { // cannot happen: reg was decoded from JSON
		return data
	}
	return b
}

// registered subscribes to the job's leases once the coordinator answered
// its register without an error (reply). An error means the agent cannot
// carry the job's leases: the process should connect itself.
func (r *resident) registered(u *uplink, reply []byte) error {
	var rep struct {
		Error *protocol.Error `json:"error"`
	}
	if err := json.Unmarshal(reply, &rep); err != nil || rep.Error != nil || r.subscribed {
		return nil
	}
	job, subject := u.job, r.js.lease(u.job)
	sub, err := u.h.nc.Subscribe(subject, func(m *nats.Msg) { r.leaseMsg(u, job, m.Data) })
	if err != nil {
		u.log.Error().Err(err).Str("subject", subject).Msg("job socket: cannot subscribe to the job's leases")
		return fmt.Errorf("agent %s: cannot carry the leases of job %s (%v): register directly", u.h.node, job, err)
	}
	r.mu.Lock()
	ended := r.ended
	r.sub = sub
	r.mu.Unlock()
	if ended {
		_ = sub.Unsubscribe()
		return nil
	}
	r.subscribed = true
	// The subscription reaches the server before the process hears the
	// reply, so that no lease published after the reply is missed.
	ctx, cancel := context.WithTimeout(u.ctx, uplinkTimeout)
	defer cancel()
	if err := u.h.nc.FlushWithContext(ctx); err != nil {
		u.log.Debug().Err(err).Msg("job socket: lease subscription not confirmed (it is sent when the connection is back)")
	}
	return nil
}

// leaseMsg writes a lease of job into the socket as a lease line: the
// lease as published (compacted onto one line), after the envelope.
func (r *resident) leaseMsg(u *uplink, job string, data []byte) {
	js := r.js
	l, err := protocol.DecodeLease(data, 0)
	if err == nil && l.Job != job {
		err = fmt.Errorf("a lease of job %q", l.Job)
	}
	if err != nil {
		if n := js.stats.leasesDropped.Add(1); js.warn() {
			u.log.Warn().Err(err).Str("job", job).Uint64("dropped_total", n).Msg("job socket: message on the job's lease subject dropped")
		}
		return
	}
	if u.push(leaseLine(data)) {
		js.stats.leases.Add(1)
	}
}

// leaseLine is the lease line of a lease's JSON encoding data (valid JSON):
// data compacted onto one line, after the envelope, with its newline.
func leaseLine(data []byte) []byte {
	var b bytes.Buffer
	b.Grow(len(data) + 40)
	b.WriteString(`{"v":` + strconv.Itoa(protocol.Version) + `,"op":"` + protocol.UplinkLease + `","data":`)
	_ = json.Compact(&b, data)
	b.WriteString("}\n")
	return b.Bytes()
}

// relay writes the leases of the resident jobs in desired state d into
// their connections: a job's RUN lease listed in d.Residents, unless the
// connection got the same lease last (a heartbeat repeating it), and one
// SUSPEND (leftSuspend, as for a process the agent started) into a
// connection whose job's RUN it relayed and that d no longer lists. Called
// from the agent's loop with each desired state it applies; it never
// blocks (the lines go through the connections' answer queues).
func (js *jobSocket) relay(d *protocol.NodeDesired) {
	if !js.relays {
		return
	}
	runs := make(map[string]*protocol.Lease, len(d.Residents))
	for i := range d.Residents { // one RUN lease per job (DecodeNodeDesired checks)
		if l := &d.Residents[i]; l.Action == protocol.Run {
			runs[l.Job] = l
		}
	}
	for _, u := range js.conns() {
		u.res.relay(u, runs, d)
	}
}

// relay writes the connection's part of desired state d (jobSocket.relay):
// runs holds d's RUN leases by job. A line the answer queue refuses (the
// process does not read) is not remembered, so the next state tries again.
func (r *resident) relay(u *uplink, runs map[string]*protocol.Lease, d *protocol.NodeDesired) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.job == "" || r.ended {
		return
	}
	l, listed := runs[r.job]
	switch {
	case listed && !sameLease(r.run, l):
		if r.push(u, l) {
			r.run = l
			r.js.stats.relayedLeases.Add(1)
		}
	case !listed && r.run != nil:
		if r.push(u, leftSuspend(r.job, u.h.node, d)) {
			r.run = nil
			r.js.stats.relayedSuspends.Add(1)
			u.log.Debug().Str("job", r.job).Int("round", d.Round).Msg("job socket: relayed a SUSPEND lease")
		}
	}
}

// push queues lease l as a lease line.
func (r *resident) push(u *uplink, l *protocol.Lease) bool {
	data, err := protocol.MarshalLease(l)
	if err != nil { // a non-finite start or expiry
		u.log.Error().Err(err).Str("job", l.Job).Msg("job socket: lease not relayed")
		return false
	}
	return u.push(leaseLine(data))
}

// closed ends the job's lease subscription and frees the connection's
// place. Called once, by uplink.close.
func (r *resident) closed(u *uplink) {
	r.mu.Lock()
	r.ended = true
	sub := r.sub
	r.mu.Unlock()
	if sub != nil {
		_ = sub.Unsubscribe()
	}
	r.js.mu.Lock()
	delete(r.js.open, u)
	r.js.mu.Unlock()
}

// conns is the socket's open connections, at the moment of the call.
func (js *jobSocket) conns() []*uplink {
	js.mu.Lock()
	defer js.mu.Unlock()
	out := make([]*uplink, 0, len(js.open))
	for u := range js.open {
		out = append(out, u)
	}
	return out
}
