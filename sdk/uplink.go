package sdk

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/shockwave-sched/shockwave/protocol"
)

// The uplink: a single-process job started by a relaying node agent talks
// to its agent only, over a Unix socket the agent gives it besides the
// lease pipe, and opens no NATS connection (protocol/uplink.go; docs/agent.md,
// "The uplink"). The agent forwards the registrations and event batches
// over its own connection, so that a round that stops and starts a few
// thousand processes does not make the NATS server accept and drop as many
// connections.

// EnvUplinkFD names the socket of the agent's uplink: "FD:INODE", the
// descriptor number and the socket's inode (protocol.EnvUplinkFD).
const EnvUplinkFD = protocol.EnvUplinkFD

// WithoutUplink makes the job open its own NATS connection even when its
// node agent offers an uplink ($SHOCKWAVE_UPLINK_FD) or a job socket
// (WithAgentSocket, $SHOCKWAVE_AGENT_SOCKET), which are then not read: for
// a process that needs Job.Conn, or to take the agent out of the path
// while debugging.
func WithoutUplink() Option {
	return func(o *options) error {
		o.noUplink = true
		return nil
	}
}

// uplinkDefaults reads $SHOCKWAVE_UPLINK_FD and $SHOCKWAVE_AGENT_SOCKET
// unless WithoutUplink.
func (o *options) uplinkDefaults() error {
	if o.noUplink {
		o.agentSocket = ""
		return nil
	}
	if err := o.agentSocketDefault(); err != nil { // jobsocket.go
		return err
	}
	v := os.Getenv(EnvUplinkFD)
	if v == "" {
		return nil
	}
	fd, ino, err := parseFD(EnvUplinkFD, "socket", v)
	if err != nil {
		return err
	}
	o.uplinkFD, o.uplinkIno = fd, ino
	return nil
}

// uplinks are the uplink sockets this process opened, by descriptor. As
// with the lease pipes, a Register that failed leaves its socket (and its
// reader) to the next Register; Close closes it for good.
var uplinks = struct {
	sync.Mutex
	by map[int]*uplink
}{by: map[int]*uplink{}}

// uplink is the process's end of an agent's uplink: request lines written
// under wmu, answers read by one goroutine (read) that hands each reply to
// the waiter of its id. It is an inherited descriptor ($SHOCKWAVE_UPLINK_FD),
// or a connection to the agent's job socket (dialed; jobsocket.go).
type uplink struct {
	fd     int // the inherited descriptor; -1 when dialed
	f      *os.File
	done   chan struct{} // closed when read returned
	via    string        // what named it, for logs: EnvUplinkFD or EnvAgentSocket
	dialed bool          // the job socket: not kept for a later Register, leases come on it

	wmu sync.Mutex // one line at a time

	mu      sync.Mutex
	job     *Job // the job using it; nil while none
	next    uint64
	waiting map[uint64]chan *protocol.UplinkAnswer
	err     error // why the uplink ended; nil while open
}

// errUplinkClosed is why the uplink of a closed job ended.
var errUplinkClosed = errors.New("closed by the job")

// openUplink returns descriptor fd as the uplink of job j when it is a
// socket whose inode is ino: the one the agent made, inherited. Anything
// else is not touched and an error says what it is. The socket is made
// close-on-exec, so that the job's own children do not inherit it, and
// non-blocking, so that Close ends a read in progress.
func openUplink(fd int, ino uint64, j *Job) (*uplink, error) {
	uplinks.Lock()
	defer uplinks.Unlock()
	u := uplinks.by[fd]
	if u != nil {
		u.mu.Lock()
		user, err := u.job, u.err
		u.mu.Unlock()
		switch {
		case user != nil:
			return nil, fmt.Errorf("descriptor %d is the uplink of job %s of this process already", fd, user.id)
		case err != nil:
			return nil, fmt.Errorf("descriptor %d: the uplink ended: %w", fd, err)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("descriptor %d: %w", fd, err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFSOCK {
		return nil, fmt.Errorf("descriptor %d is not a socket (mode %#o)", fd, st.Mode&syscall.S_IFMT)
	}
	if st.Ino != ino {
		return nil, fmt.Errorf("descriptor %d is a socket with inode %d, not %d", fd, st.Ino, ino)
	}
	if u == nil {
		syscall.CloseOnExec(fd)
		if err := syscall.SetNonblock(fd, true); err != nil {
			return nil, fmt.Errorf("descriptor %d: %w", fd, err)
		}
		u = &uplink{fd: fd, f: os.NewFile(uintptr(fd), "uplink"), done: make(chan struct{}), via: EnvUplinkFD,
			waiting: map[uint64]chan *protocol.UplinkAnswer{}}
		uplinks.by[fd] = u
		go u.read()
	}
	u.mu.Lock()
	u.job = j
	u.mu.Unlock()
	return u, nil
}

// release detaches the uplink from its job, leaving it open for a later
// Register (after a failed one), or closes it for good and waits for its
// reader. A job socket is always closed: a later Register dials again.
func (u *uplink) release(close bool) {
	close = close || u.dialed
	uplinks.Lock()
	u.mu.Lock()
	u.job = nil
	u.mu.Unlock()
	if close {
		_ = u.f.Close()
		if uplinks.by[u.fd] == u {
			delete(uplinks.by, u.fd)
		}
	}
	uplinks.Unlock()
	if close {
		<-u.done
	}
}

// open reports whether the uplink still carries lines.
func (u *uplink) open() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.err == nil
}

// ended is why the uplink ended (nil while open).
func (u *uplink) ended() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.err
}

// end ends the uplink for good: the waiters get the error, the socket is
// closed (the agent sees end of file) and the job hears of it.
func (u *uplink) end(err error) {
	u.mu.Lock()
	if u.err != nil {
		u.mu.Unlock()
		return
	}
	u.err = err
	for id, ch := range u.waiting {
		close(ch)
		delete(u.waiting, id)
	}
	j := u.job
	u.mu.Unlock()
	_ = u.f.Close()
	if j != nil {
		j.uplinkEnded(err)
	}
}

// read decodes the agent's answers until end of file, a bad line or
// Close. Any of them ends the uplink: a stream with a bad line in it
// cannot be trusted to be in step with its requests.
func (u *uplink) read() {
	defer close(u.done)
	limit := protocol.MaxUplinkLine(0)
	br := bufio.NewReaderSize(u.f, 64<<10)
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		if len(line)+len(frag) > limit+1 {
			u.end(fmt.Errorf("the agent wrote a line longer than %d bytes", limit))
			return
		}
		line = append(line, frag...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		switch {
		case errors.Is(err, io.EOF):
			u.end(errors.New("the agent closed it"))
			return
		case errors.Is(err, os.ErrClosed):
			u.end(errUplinkClosed)
			return
		case err != nil:
			u.end(fmt.Errorf("reading: %w", err))
			return
		}
		a, err := protocol.DecodeUplinkAnswer(bytes.TrimSuffix(line, []byte("\n")), 0)
		if err != nil {
			u.end(fmt.Errorf("the agent wrote a bad line: %w", err))
			return
		}
		u.deliver(a)
		line = line[:0]
	}
}

// deliver hands a reply to its waiter, a reconnection to the job, and a
// lease (job socket only) to the job's lease checks.
func (u *uplink) deliver(a *protocol.UplinkAnswer) {
	u.mu.Lock()
	j := u.job
	var ch chan *protocol.UplinkAnswer
	if a.Op == protocol.UplinkReply {
		ch = u.waiting[a.ID]
		delete(u.waiting, a.ID)
	}
	u.mu.Unlock()
	switch {
	case a.Op == protocol.UplinkReconnected && j != nil:
		j.uplinkReconnected()
	case a.Op == protocol.UplinkLease && j != nil:
		j.socketLease(u, a.Data, time.Now())
	case ch != nil:
		ch <- a // buffered: one answer per id
	case j != nil:
		j.log.Debug("an answer from the agent that nothing waits for (its request timed out)", "id", a.ID)
	}
}

// call writes a request with a new id and waits for its answer, ctx's end
// or the uplink's.
func (u *uplink) call(ctx context.Context, op string, data []byte, timeout time.Duration) (*protocol.UplinkAnswer, error) {
	ch := make(chan *protocol.UplinkAnswer, 1)
	u.mu.Lock()
	if u.err != nil {
		u.mu.Unlock()
		return nil, fmt.Errorf("the uplink to the agent ended: %w", u.err)
	}
	u.next++
	id := u.next
	u.waiting[id] = ch
	u.mu.Unlock()
	forget := func() {
		u.mu.Lock()
		delete(u.waiting, id)
		u.mu.Unlock()
	}
	if err := u.send(op, id, data, timeout); err != nil {
		forget()
		return nil, err
	}
	select {
	case a, ok := <-ch:
		if !ok {
			return nil, fmt.Errorf("the uplink to the agent ended: %w", u.ended())
		}
		return a, nil
	case <-ctx.Done():
		forget()
		return nil, ctx.Err()
	}
}

// send writes one request line. A write that fails, or does not finish
// within timeout (the agent stopped reading), ends the uplink: a line cut
// short would corrupt the stream.
func (u *uplink) send(op string, id uint64, data []byte, timeout time.Duration) error {
	line := uplinkLine(op, id, data)
	if max := protocol.MaxUplinkLine(0); len(line) > max {
		return fmt.Errorf("a %s line of %d bytes exceeds the uplink's limit of %d", op, len(line), max)
	}
	u.wmu.Lock()
	defer u.wmu.Unlock()
	if err := u.ended(); err != nil {
		return fmt.Errorf("the uplink to the agent ended: %w", err)
	}
	_ = u.f.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := u.f.Write(line); err != nil {
		err = fmt.Errorf("writing to the agent: %w", err)
		u.end(err)
		return err
	}
	return nil
}

// uplinkLine encodes a protocol.UplinkRequest and its newline; data is
// JSON from json.Marshal (an object, no raw newline in it).
func uplinkLine(op string, id uint64, data []byte) []byte {
	b := make([]byte, 0, len(data)+64)
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, protocol.Version, 10)
	b = append(b, `,"op":"`...)
	b = append(b, op...)
	b = append(b, '"')
	if id != 0 {
		b = append(b, `,"id":`...)
		b = strconv.AppendUint(b, id, 10)
	}
	if len(data) > 0 {
		b = append(b, `,"data":`...)
		b = append(b, data...)
	}
	return append(b, '}', '\n')
}

// openUplink opens the agent's uplink for a single process that reads its
// leases from the agent's pipe (the uplink carries no leases), or returns
// nil: the job then tries the agent's job socket (jobsocket.go), else opens
// its own NATS connection, as without an agent.
func (j *Job) openUplink(piped bool) *uplink {
	o := &j.o
	switch {
	case o.uplinkFD == 0:
		return nil
	case j.rk != nil:
		j.log.Debug("not using the agent's uplink: the ranks of a multi-process job talk over NATS", "env", EnvUplinkFD)
		return nil
	case !piped:
		j.log.Warn("not using the agent's uplink: it goes with the lease pipe, which this process does not read; the job talks to NATS itself",
			"env", EnvUplinkFD)
		return nil
	}
	u, err := openUplink(o.uplinkFD, o.uplinkIno, j)
	if err != nil {
		j.log.Warn("not using the agent's uplink (not inherited, e.g. a launcher closed it): the job talks to NATS itself",
			"env", EnvUplinkFD, "err", err)
		return nil
	}
	return u
}

// Uplinked reports whether the job reaches the coordinator through its
// node agent, over the uplink the agent gave it ($SHOCKWAVE_UPLINK_FD) or
// its job socket ($SHOCKWAVE_AGENT_SOCKET), instead of a NATS connection
// of its own.
func (j *Job) Uplinked() bool { return j.up != nil }

// connected reports whether the job can send now: its NATS connection is
// up, or its uplink open.
func (j *Job) connected() bool {
	if j.up != nil {
		return j.up.open()
	}
	return j.nc.IsConnected()
}

// dropTransport lets go of the connection or uplink of a Register that
// failed; an uplink stays open for the next Register.
func (j *Job) dropTransport() {
	if j.up != nil {
		j.up.release(false)
		return
	}
	j.nc.Close()
}

// uplinkRegister sends a registration through the agent and returns the
// coordinator's reply, with the errors of the NATS request's cases.
func (j *Job) uplinkRegister(ctx context.Context, data []byte) ([]byte, error) {
	a, err := j.up.call(ctx, protocol.UplinkRegister, data, j.o.requestTimeout)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return nil, fmt.Errorf("%w: the agent did not answer the registration on its uplink: %w", ErrRegister, errRetry)
	case err != nil:
		return nil, fmt.Errorf("%w: job %s: registering through the agent's uplink: %w", ErrRegister, j.id, err)
	case a.Error != nil && a.Error.Code == protocol.CodeNoUplink:
		return nil, fmt.Errorf("%w: job %s: %w: %w", ErrRegister, j.id, errNoUplink, a.Error)
	case a.Error != nil:
		err := fmt.Errorf("%w: job %s: the agent could not forward the registration: %w", ErrRegister, j.id, a.Error)
		if a.Error.Code == protocol.CodeUnavailable {
			err = fmt.Errorf("%w (%w)", err, errRetry)
		}
		return nil, err
	case len(a.Data) == 0:
		return nil, fmt.Errorf("%w: job %s: the agent's answer to the registration carries no reply", ErrRegister, j.id)
	}
	return a.Data, nil
}

// errNoUplink: the agent found no coordinator that takes registrations
// through agents (one older than the uplink); the job connects itself.
var errNoUplink = errors.New("the coordinator takes no registrations through agents")

// leaveUplink gives up the agent's uplink after errNoUplink and opens the
// job's own NATS connection, as without an agent. The lease pipe stays.
func (j *Job) leaveUplink() error {
	j.log.Warn("the coordinator takes no registrations through the agent's uplink (older than the agent?); the job connects to NATS itself",
		"env", j.up.via)
	j.up.release(true)
	j.up = nil
	return j.connect()
}

// uplinkFlush waits until the agent has every earlier line of this process
// on the NATS server.
func (j *Job) uplinkFlush() error {
	ctx, cancel := contextWithTimeout(j.o.requestTimeout)
	defer cancel()
	a, err := j.up.call(ctx, protocol.UplinkFlush, nil, j.o.requestTimeout)
	switch {
	case err != nil:
		return fmt.Errorf("the agent's uplink: %w", err)
	case a.Error != nil:
		return fmt.Errorf("the agent's uplink: %w", a.Error)
	}
	return nil
}

// uplinkReconnected: the agent's NATS connection came back, as after the
// job's own reconnection.
func (j *Job) uplinkReconnected() {
	j.log.Info("the agent reconnected to the coordinator")
	select {
	case j.reconnect <- struct{}{}:
	default:
	}
}

// uplinkEnded: the agent closed the uplink or broke it. It does not come
// back: the job trains until its lease expires, its events stay buffered,
// and Flush, Finish and Close no longer wait for them to be delivered. A
// job socket ends the same way (the job does not dial again, nor fall
// back to NATS): its leases came on it too, so none renews the current one.
func (j *Job) uplinkEnded(err error) {
	j.setErr(fmt.Errorf("the uplink to the agent ended: %w", err))
	j.log.Warn("the agent's uplink ended; training continues until the lease expires", "err", err)
	j.poke()
}
