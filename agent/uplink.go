package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/shockwave-sched/shockwave/protocol"
)

// The uplink (docs/agent.md, "The uplink"). A process of a single-process
// job gets, besides its lease pipe, one end of a Unix stream socket pair as
// descriptor 4, named by $SHOCKWAVE_UPLINK_FD="4:<inode>". It writes its
// registrations and event batches into it (protocol.UplinkRequest lines)
// and the agent forwards them over its own NATS connection, so that the
// process needs none: at 10,000 jobs a round stops and starts thousands of
// processes, and their connections' opening and closing convoy on the
// server. Each uplink has a reader goroutine, which handles the lines in
// order, and a writer goroutine, which writes the answers: a process that
// does not read its answers blocks its own writer only.

// uplinkFD is the descriptor number of the uplink in a started process:
// the second of cmd.ExtraFiles, after the lease pipe.
const uplinkFD = 4

// Limits of one uplink and of all of an agent's uplinks together.
//
// The coordinator's embedded server disconnects a connection of the jobs'
// account that sends more than 10,000 messages or 10 MiB a second
// (coordinator/flood.go), and in none and token mode the agent's
// connection is one of them, and its address is then refused new
// connections for a while. An honest SDK sends about one batch a second
// (a few hundred bytes; after an outage a few batches of up to 256
// events, about 60 KiB each) and an occasional register or flush.
//
// Per process, lines beyond 20 a second (burst 100) or 256 KiB a second
// (burst 1 MiB) are dropped: one process cannot take the connection.
// Across the agent, forwarded lines wait (the process's writes back up
// into its socket) beyond 2,000 messages and 2 MiB a second with a burst
// of 3,000 and 3 MiB, so that in any second the agent's connection
// carries at most 5,000 messages and 5 MiB of its processes' traffic,
// half the guard's limits, however many processes run (64 processes at
// their full per-process burst would reach 7,680 messages).
const (
	uplinkLineRate  = protocol.UplinkLineRate
	uplinkLineBurst = protocol.UplinkLineBurst
	uplinkByteRate  = 256 << 10
	uplinkByteBurst = 1 << 20

	agentLineRate  = 2000
	agentLineBurst = 3000
	agentByteRate  = 2 << 20
	agentByteBurst = 3 << 20

	// uplinkTimeout bounds a forwarded register and a flush.
	uplinkTimeout = 5 * time.Second
	// uplinkAnswers bounds the answers waiting for a process to read
	// them; beyond it answers are dropped (the process is not reading).
	uplinkAnswers = 64
	// uplinkDrain is how long the reader may go on after the process
	// exited, for the lines it wrote just before; then the uplink closes
	// (a child of the process may still hold the other end).
	uplinkDrain = 2 * time.Second
	// uplinkDecodeDropped bounds the lines over the rate that are still
	// decoded, to answer a register or flush with an error.
	uplinkDecodeDropped = 4 << 10
	// uplinkWarnEvery rate-limits one uplink's warnings.
	uplinkWarnEvery = 10 * time.Second
)

// UplinkStats counts what an agent's uplinks did since it started.
type UplinkStats struct {
	Registers  uint64 // registrations forwarded and answered by the coordinator
	Batches    uint64 // event batches published
	Flushes    uint64 // flushes answered without error
	Refused    uint64 // lines naming another job than the process's own
	Malformed  uint64 // lines that are not a valid request, or carry an invalid register or batch
	OverRate   uint64 // lines dropped over the per-process rate
	Failed     uint64 // lines the connection could not forward (timeout, outage)
	TooLong    uint64 // uplinks closed for a line over the limit
	Unanswered uint64 // answers dropped: the process did not read its answers
	Notices    uint64 // "reconnected" answers written

	JobSocketStats // the job socket's (jobsocket.go)
}

// uplinkHub is the agent's side of all its uplinks.
type uplinkHub struct {
	nc   *nats.Conn
	subj protocol.Subjects
	node string
	log  zerolog.Logger

	hello []byte // the agent's heartbeat, to ask whether a coordinator leads (coordinatorAnswers)

	mu         sync.Mutex
	live       map[*uplink]struct{}
	reconnects uint64 // the connection's reconnection count last seen connected
	lines      bucket // agent-wide
	bytes      bucket

	running atomic.Int64 // goroutines of uplinks
	stats   struct {
		registers, batches, flushes, refused, malformed, overRate, failed, tooLong, unanswered, notices atomic.Uint64
	}
}

func newUplinkHub(nc *nats.Conn, subj protocol.Subjects, node string, log zerolog.Logger) *uplinkHub {
	now := time.Now()
	return &uplinkHub{nc: nc, subj: subj, node: node, log: log, live: map[*uplink]struct{}{},
		reconnects: nc.Stats().Reconnects,
		lines:      newBucket(agentLineRate, agentLineBurst, now), bytes: newBucket(agentByteRate, agentByteBurst, now)}
}

// wantsUplink says whether a process of as gets an uplink: the agent
// relays, carries uplinks, and the job is a single process.
func (a *Agent) wantsUplink(as protocol.Assignment) bool {
	return a.uplinks != nil && as.Procs == 1 && as.WorldSize == 1
}

// poll writes "reconnected" to every live uplink once the agent's
// connection is back after an outage. Called from the agent's loop.
func (h *uplinkHub) poll() {
	n := h.nc.Stats().Reconnects
	if !h.nc.IsConnected() {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if n == h.reconnects {
		return
	}
	h.reconnects = n
	for u := range h.live {
		u.answer(protocol.UplinkAnswer{V: protocol.Version, Op: protocol.UplinkReconnected})
		h.stats.notices.Add(1)
	}
	h.log.Info().Int("uplinks", len(h.live)).Msg("NATS connection back: told the uplinks")
}

// reserve takes one message of n bytes from the agent-wide buckets and
// returns how long the caller must wait before sending it.
func (h *uplinkHub) reserve(n int) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	return max(h.lines.reserve(1, now), h.bytes.reserve(float64(n), now))
}

// attachUplink gives cmd one end of a new socket pair as descriptor 4 (its
// lease pipe is descriptor 3) and the variable naming it; it returns the
// child's end, which the caller closes once the process started, and the
// agent's.
func attachUplink(cmd *exec.Cmd) (child *os.File, parent *net.UnixConn, err error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("uplink: socket pair: %w", err)
	}
	child = os.NewFile(uintptr(fds[1]), "uplink")
	pf := os.NewFile(uintptr(fds[0]), "uplink")
	c, err := net.FileConn(pf) // a duplicate, on the runtime's poller: Close interrupts a blocked read or write
	pf.Close()
	if err != nil {
		child.Close()
		return nil, nil, fmt.Errorf("uplink: %w", err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fds[1], &st); err != nil || st.Ino == 0 {
		child.Close()
		c.Close()
		return nil, nil, fmt.Errorf("uplink: no inode (%v)", err)
	}
	if len(cmd.ExtraFiles) != uplinkFD-3 {
		child.Close()
		c.Close()
		return nil, nil, fmt.Errorf("uplink: descriptor %d would not be %d", 3+len(cmd.ExtraFiles), uplinkFD)
	}
	cmd.ExtraFiles = append(cmd.ExtraFiles, child)
	cmd.Env = append(cmd.Env, protocol.EnvUplinkFD+"="+strconv.Itoa(uplinkFD)+":"+strconv.FormatUint(st.Ino, 10))
	return child, c.(*net.UnixConn), nil
}

// uplink is the agent's side of one process's uplink.
type uplink struct {
	h      *uplinkHub
	job    string
	conn   *net.UnixConn
	log    zerolog.Logger
	ctx    context.Context // cancelled by close: ends a request in flight
	cancel context.CancelFunc
	once   sync.Once
	done   chan struct{} // closed by close
	kick   chan struct{} // one slot: an answer is waiting

	mu       sync.Mutex
	queue    [][]byte // answers not written yet
	draining bool     // the reader ended: the writer closes once the queue is empty
	exited   bool     // the process exited: the uplink closes after uplinkDrain

	// Owned by the reader.
	lines, bytes bucket
	lost         bool   // an events line since the last flush was not forwarded
	reconnects   uint64 // the connection's reconnection count at the last flush
	warnedAt     time.Time

	res *resident // a job socket's connection (jobsocket.go); nil for a started process
}

// newUplink starts the reader and the writer of job's process's uplink.
func (h *uplinkHub) newUplink(conn *net.UnixConn, job string, attempt int) *uplink {
	now := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	u := &uplink{h: h, job: job, conn: conn, log: h.log.With().Str("job", job).Int("attempt", attempt).Logger(),
		ctx: ctx, cancel: cancel, done: make(chan struct{}), kick: make(chan struct{}, 1),
		lines: newBucket(uplinkLineRate, uplinkLineBurst, now), bytes: newBucket(uplinkByteRate, uplinkByteBurst, now)}
	h.mu.Lock()
	h.live[u] = struct{}{}
	u.reconnects = h.reconnects
	h.mu.Unlock()
	h.running.Add(2)
	go u.read()
	go u.write()
	return u
}

// close ends the uplink at once: the socket closes, so the reader and the
// writer return, and a request in flight is cancelled. Idempotent.
func (u *uplink) close() {
	u.once.Do(func() {
		close(u.done)
		u.cancel()
		_ = u.conn.Close()
		u.h.mu.Lock()
		delete(u.h.live, u)
		u.h.mu.Unlock()
		if u.res != nil {
			u.res.closed(u)
		}
	})
}

// processExited lets the reader take the lines the process wrote before it
// exited (they wait in the socket; then it reads end of file), and closes
// the uplink after uplinkDrain at the latest.
func (u *uplink) processExited() {
	u.mu.Lock()
	first := !u.exited
	u.exited = true
	u.mu.Unlock()
	if first {
		_ = u.conn.SetReadDeadline(time.Now().Add(uplinkDrain))
		time.AfterFunc(uplinkDrain, u.close)
	}
}

// answer queues a for the writer; it never blocks.
func (u *uplink) answer(a protocol.UplinkAnswer) {
	line, err := json.Marshal(a)
	if err != nil || len(line) >= protocol.MaxUplinkLine(0) {
		u.log.Error().Err(err).Int("bytes", len(line)).Msg("uplink answer not sent: it cannot be encoded in a line")
		return
	}
	u.push(append(line, '\n'))
}

// push queues one answer line (with its newline) for the writer; it never
// blocks, and reports whether the line was queued.
func (u *uplink) push(line []byte) bool {
	u.mu.Lock()
	full := len(u.queue) >= uplinkAnswers
	if !full {
		u.queue = append(u.queue, line)
	}
	u.mu.Unlock()
	if full {
		u.h.stats.unanswered.Add(1)
		return false
	}
	select {
	case u.kick <- struct{}{}:
	default:
	}
	return true
}

// reply answers request id, with data or an error.
func (u *uplink) reply(id uint64, data []byte, code protocol.ErrorCode, err error) {
	a := protocol.UplinkAnswer{V: protocol.Version, Op: protocol.UplinkReply, ID: id, Data: data}
	if err != nil {
		a.Data, a.Error = nil, protocol.ErrorOf(code, err)
	}
	u.answer(a)
}

func (u *uplink) write() {
	defer u.h.running.Add(-1)
	for {
		select {
		case <-u.done:
			return
		case <-u.kick:
		}
		for {
			u.mu.Lock()
			if len(u.queue) == 0 {
				drained := u.draining
				u.mu.Unlock()
				if drained {
					u.close()
					return
				}
				break
			}
			line := u.queue[0]
			u.queue = u.queue[1:]
			u.mu.Unlock()
			if _, err := u.conn.Write(line); err != nil {
				u.close()
				return
			}
		}
	}
}

func (u *uplink) read() {
	defer u.h.running.Add(-1)
	limit := protocol.MaxUplinkLine(0)
	sc := bufio.NewScanner(u.conn)
	sc.Buffer(make([]byte, 0, 4<<10), limit+1) // the line and its newline
	for sc.Scan() {
		u.handle(sc.Bytes())
	}
	switch err := sc.Err(); {
	case errors.Is(err, bufio.ErrTooLong):
		// The stream cannot be resynchronised: read no more (the
		// process's writes fail), answer what was handled, then close.
		u.h.stats.tooLong.Add(1)
		u.log.Warn().Int("limit", limit).Msg("uplink closed: a line longer than the limit (the stream cannot be resynchronised)")
		_ = u.conn.CloseRead()
	case err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, os.ErrDeadlineExceeded):
		u.log.Debug().Err(err).Msg("uplink read")
	}
	// End of file (the process closed its end or exited), or a line over
	// the limit: write the answers still queued, then close.
	u.mu.Lock()
	u.draining = true
	u.mu.Unlock()
	select {
	case u.kick <- struct{}{}:
	default:
	}
}

// warn says whether the uplink may log a warning now (one per
// uplinkWarnEvery, so that a process cannot flood the agent's log).
func (u *uplink) warn(now time.Time) bool {
	if now.Sub(u.warnedAt) < uplinkWarnEvery {
		return false
	}
	u.warnedAt = now
	return true
}

// handle takes one line: the per-process rate first, then the request.
func (u *uplink) handle(line []byte) {
	if u.res != nil && !u.res.admit(u, line) {
		return // the hello, or a line of a socket being closed
	}
	now := time.Now()
	if !admit(&u.lines, &u.bytes, len(line), now) {
		u.h.stats.overRate.Add(1)
		u.lost = true
		if len(line) <= uplinkDecodeDropped {
			if req, err := protocol.DecodeUplinkRequest(line, 0); err == nil && req.ID != 0 {
				u.reply(req.ID, nil, protocol.CodeUnavailable, fmt.Errorf("agent %s: over the uplink's rate of %d lines a second; line dropped", u.h.node, uplinkLineRate))
			}
		}
		if u.warn(now) {
			u.log.Warn().Uint64("dropped_total", u.h.stats.overRate.Load()).Msg("uplink over its rate: lines dropped")
		}
		return
	}
	req, err := protocol.DecodeUplinkRequest(line, 0)
	if err != nil {
		u.malformed(now, err)
		return
	}
	switch req.Op {
	case protocol.UplinkRegister:
		u.register(req)
	case protocol.UplinkEvents:
		u.events(req, now)
	case protocol.UplinkFlush:
		u.flush(req)
	}
}

func (u *uplink) malformed(now time.Time, err error) {
	u.h.stats.malformed.Add(1)
	if u.warn(now) {
		u.log.Warn().Err(err).Uint64("malformed_total", u.h.stats.malformed.Load()).Msg("uplink line dropped")
	}
}

// wait holds a forwarded line back while the agent-wide rate is spent; it
// returns false when the uplink closed meanwhile.
func (u *uplink) wait(n int) bool {
	d := u.h.reserve(n)
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-u.ctx.Done():
		return false
	}
}

// coordinatorAnswers reports whether a coordinator answers the agent's
// heartbeat now. A registration that met no responders then came to a
// coordinator older than the uplink (the process connects itself); with
// no answer to either, no coordinator leads at this moment (a failover:
// the standbys subscribe when they lead), and the process should retry
// rather than give the uplink up for its lifetime.
func (h *uplinkHub) coordinatorAnswers(ctx context.Context) bool {
	_, err := h.nc.RequestWithContext(ctx, h.subj.AgentHeartbeat(h.node), h.hello)
	return err == nil
}

// register forwards the job's registration and answers with the
// coordinator's reply.
func (u *uplink) register(req *protocol.UplinkRequest) {
	r, err := protocol.DecodeRegister(req.Data, 0)
	switch {
	case err != nil:
		u.malformed(time.Now(), err)
		u.reply(req.ID, nil, protocol.CodeBadRequest, err)
		return
	case u.res != nil:
		err = u.res.refuse(u, r)
	case r.Job != u.job:
		err = fmt.Errorf("agent %s: this process runs job %q; it may not register job %q", u.h.node, u.job, r.Job)
	case r.Node != "":
		err = fmt.Errorf("agent %s: a process started by an agent is not resident on a node (register names node %q)", u.h.node, r.Node)
	}
	if err != nil {
		u.h.stats.refused.Add(1)
		if u.warn(time.Now()) {
			u.log.Warn().Str("registered", r.Job).Str("node", r.Node).Err(err).Msg("uplink registration refused")
		}
		u.reply(req.ID, nil, protocol.CodeForbidden, err)
		return
	}
	data := req.Data
	if u.res != nil {
		data = u.res.mark(r, data)
	}
	if !u.wait(len(data)) {
		return
	}
	ctx, cancel := context.WithTimeout(u.ctx, uplinkTimeout)
	defer cancel()
	m, err := u.h.nc.RequestMsgWithContext(ctx, &nats.Msg{Subject: u.h.subj.AgentRegister(u.h.node), Data: data})
	if err == nil {
		switch d := bytes.TrimSpace(m.Data); {
		case len(d) > protocol.DefaultMaxMessageBytes:
			err = fmt.Errorf("the coordinator's reply of %d bytes does not fit in a line", len(d))
		case len(d) == 0 || d[0] != '{' || !json.Valid(d):
			err = fmt.Errorf("the coordinator's reply is not a JSON object (%d bytes)", len(m.Data))
		}
	}
	if errors.Is(err, nats.ErrNoResponders) && !u.h.coordinatorAnswers(ctx) {
		// Nothing takes heartbeats either: no coordinator leads at this
		// moment (a failover). The process retries, and keeps the uplink
		// once a leader takes the registration.
		err = fmt.Errorf("no coordinator answers on %s or on the node's heartbeat subject", u.h.subj.AgentRegister(u.h.node))
	}
	if errors.Is(err, nats.ErrNoResponders) {
		u.h.stats.failed.Add(1)
		u.log.Warn().Str("subject", u.h.subj.AgentRegister(u.h.node)).
			Msg("no coordinator takes registrations through agents (older than this agent?); the process connects itself")
		u.reply(req.ID, nil, protocol.CodeNoUplink, fmt.Errorf("agent %s: nothing answers on %s: register directly", u.h.node, u.h.subj.AgentRegister(u.h.node)))
		return
	}
	if err != nil {
		u.h.stats.failed.Add(1)
		u.log.Debug().Err(err).Msg("uplink registration not forwarded")
		u.reply(req.ID, nil, protocol.CodeUnavailable, fmt.Errorf("agent %s: registration not answered: %w", u.h.node, err))
		return
	}
	if u.res != nil {
		if err := u.res.registered(u, m.Data); err != nil {
			u.h.stats.failed.Add(1)
			u.reply(req.ID, nil, protocol.CodeNoUplink, err)
			return
		}
	}
	u.h.stats.registers.Add(1)
	u.reply(req.ID, m.Data, "", nil)
}

// events publishes one batch of the job's, unchanged.
func (u *uplink) events(req *protocol.UplinkRequest, now time.Time) {
	b, err := protocol.DecodeBatch(req.Data, 0)
	switch {
	case err != nil:
		u.malformed(now, err)
		return
	case b.Job != u.job:
		u.h.stats.refused.Add(1)
		if u.warn(now) {
			u.log.Warn().Str("batch_job", b.Job).Uint64("refused_total", u.h.stats.refused.Load()).
				Msg("uplink batch of another job dropped")
		}
		return
	}
	if !u.wait(len(req.Data)) {
		return
	}
	m := &nats.Msg{Subject: u.h.subj.AgentEvents(u.h.node), Header: nats.Header{protocol.HdrJob: []string{u.job}}, Data: req.Data}
	if err := u.h.nc.PublishMsg(m); err != nil {
		u.h.stats.failed.Add(1)
		u.lost = true
		if u.warn(now) {
			u.log.Warn().Err(err).Msg("uplink batch not published")
		}
		return
	}
	u.h.stats.batches.Add(1)
}

// flush answers once every earlier line reached the server: the lines were
// handled in order, so a round trip on the connection covers them. It
// answers an error when one of them was not forwarded, or the connection
// was replaced since the last flush (what it had buffered may be lost), so
// that the SDK sends its unconfirmed events again.
func (u *uplink) flush(req *protocol.UplinkRequest) {
	ctx, cancel := context.WithTimeout(u.ctx, uplinkTimeout)
	defer cancel()
	err := u.h.nc.FlushWithContext(ctx)
	n := u.h.nc.Stats().Reconnects
	switch {
	case err != nil:
		err = fmt.Errorf("agent %s: no acknowledgement from the NATS server: %w", u.h.node, err)
	case u.lost:
		err = fmt.Errorf("agent %s: an events line since the last flush was not forwarded", u.h.node)
	case n != u.reconnects:
		err = fmt.Errorf("agent %s: the connection to NATS was re-established since the last flush", u.h.node)
	}
	if err != nil {
		u.h.stats.failed.Add(1)
		u.reply(req.ID, nil, protocol.CodeUnavailable, err)
		u.lost, u.reconnects = false, n
		return
	}
	u.h.stats.flushes.Add(1)
	u.reply(req.ID, nil, "", nil)
}
