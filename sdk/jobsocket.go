package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/shockwave-sched/shockwave/protocol"
)

// The agent's job socket: a resident process that its node agent did not
// start (so it has no uplink descriptor and no lease pipe) may still send
// through the agent instead of opening a NATS connection of its own
// (protocol.EnvAgentSocket; docs/agent.md, "The job socket"). It dials the
// agent's Unix socket, says hello (with the job token in token mode), and
// learns the node the agent runs on from the welcome; from then on the
// socket is an uplink (uplink.go) that also carries the job's leases, as
// "lease" lines, in place of the lease pipe and the NATS subscription.

// EnvAgentSocket names the path of the node agent's job socket
// (protocol.EnvAgentSocket).
const EnvAgentSocket = protocol.EnvAgentSocket

// JobSocketTimeout bounds the connection to the agent's job socket and
// the agent's answer to its hello; past it the job connects to NATS.
const JobSocketTimeout = 3 * time.Second

// maxSocketPath is the longest path of a Unix socket (Linux: sun_path of
// 108 bytes, its terminating NUL included).
const maxSocketPath = 107

// WithAgentSocket sets the path of the node agent's job socket (default
// $SHOCKWAVE_AGENT_SOCKET). A single-process job that its agent did not
// start (no $SHOCKWAVE_UPLINK_FD nor $SHOCKWAVE_LEASE_FD) then registers,
// sends its events and receives its leases through the agent, and opens no
// NATS connection (Job.Uplinked). Its registration names the agent's node:
// the job is resident there (a node configured otherwise, WithNode or
// $SHOCKWAVE_NODE, that is not the agent's keeps the job on NATS, as does
// EXIT mode without a configured node, since a restarted process may run
// elsewhere). When the socket cannot be reached, is not a socket, or the
// agent refuses the hello (a wrong token; an agent that takes no resident
// jobs) or does not answer it within JobSocketTimeout, the job logs why
// and connects to NATS itself. WithoutUplink turns it off.
func WithAgentSocket(path string) Option {
	return func(o *options) error {
		if err := checkSocketPath(path); err != nil {
			return fmt.Errorf("WithAgentSocket: %w", err)
		}
		o.agentSocket, o.agentSocketFrom = path, "WithAgentSocket"
		return nil
	}
}

// agentSocketDefault reads $SHOCKWAVE_AGENT_SOCKET when WithAgentSocket
// was not given (an empty variable means no socket).
func (o *options) agentSocketDefault() error {
	if o.agentSocket != "" {
		return nil
	}
	v := os.Getenv(EnvAgentSocket)
	if v == "" {
		return nil
	}
	if err := checkSocketPath(v); err != nil {
		return fmt.Errorf("$%s: %w", EnvAgentSocket, err)
	}
	o.agentSocket, o.agentSocketFrom = v, "$"+EnvAgentSocket
	return nil
}

// checkSocketPath rejects a path that no Unix socket can have.
func checkSocketPath(path string) error {
	switch {
	case path == "":
		return errors.New("empty path (want the path of the node agent's job socket)")
	case strings.IndexByte(path, 0) >= 0:
		return fmt.Errorf("%.60q contains a NUL byte", path)
	case len(path) > maxSocketPath:
		return fmt.Errorf("%.60q…: %d bytes, longer than a Unix socket path may be (%d)", path, len(path), maxSocketPath)
	}
	return nil
}

// openJobSocket returns the agent's job socket as the job's uplink, once
// the agent welcomed it, or nil: the job then connects to NATS itself.
// Only a single process that no agent started uses it.
func (j *Job) openJobSocket(ctx context.Context) *uplink {
	o := &j.o
	switch {
	case o.agentSocket == "":
		return nil
	case j.rk != nil:
		j.log.Debug("not using the agent's job socket: the ranks of a multi-process job talk over NATS", "setting", o.agentSocketFrom)
		return nil
	case o.uplinkFD != 0 || o.leaseFD != 0:
		j.log.Debug("not using the agent's job socket: the agent started this process and gave it its own descriptors",
			"setting", o.agentSocketFrom)
		return nil
	case o.exitMode && o.node == "":
		j.log.Info("not using the agent's job socket: in EXIT mode with no node configured the job is not resident on the agent's node; the job connects to NATS itself",
			"setting", o.agentSocketFrom)
		return nil
	}
	hctx, cancel := context.WithTimeout(ctx, JobSocketTimeout)
	defer cancel()
	u, err := j.dialJobSocket(hctx)
	if err != nil {
		j.socketFallback(slog.LevelWarn, err)
		return nil
	}
	w, level, err := j.hello(hctx, u)
	if err != nil {
		u.release(true)
		j.socketFallback(level, err)
		return nil
	}
	if o.node != "" && o.node != w.Node {
		u.release(true)
		j.socketFallback(slog.LevelWarn, fmt.Errorf("the job is configured on node %q but the agent runs on node %q", o.node, w.Node))
		return nil
	}
	u.mu.Lock()
	u.job, err = j, u.err
	u.mu.Unlock()
	if err != nil { // the agent closed it right after its welcome
		u.release(true)
		j.socketFallback(slog.LevelWarn, fmt.Errorf("the socket ended after the welcome: %w", err))
		return nil
	}
	if o.node == "" {
		o.node = w.Node // the process is resident there
	}
	j.log.Debug("sending through the agent's job socket", "setting", o.agentSocketFrom, "path", o.agentSocket, "node", w.Node)
	return u
}

// dialJobSocket connects to the agent's socket and starts reading it.
func (j *Job) dialJobSocket(ctx context.Context) (*uplink, error) {
	path := j.o.agentSocket
	if !strings.HasPrefix(path, "@") { // not an abstract address: a file
		fi, err := os.Stat(path)
		switch {
		case err != nil:
			return nil, err
		case fi.Mode().Type() != fs.ModeSocket:
			return nil, fmt.Errorf("%s is not a socket (a %s)", path, fileKind(fi.Mode()))
		}
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	// An *os.File, as an inherited uplink is: non-blocking and
	// close-on-exec (the job's children do not inherit it).
	f, err := c.(*net.UnixConn).File()
	_ = c.Close()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	u := &uplink{fd: -1, f: f, done: make(chan struct{}), via: EnvAgentSocket, dialed: true,
		waiting: map[uint64]chan *protocol.UplinkAnswer{}}
	go u.read()
	return u, nil
}

// hello opens the job socket: it sends the job token (token mode) and
// returns the agent's welcome, or why the job cannot use the socket and
// the level to log it at (a refusal by an agent that takes no resident
// jobs is expected: info).
func (j *Job) hello(ctx context.Context, u *uplink) (*protocol.UplinkWelcome, slog.Level, error) {
	data, err := json.Marshal(protocol.UplinkHello{V: protocol.Version, Token: j.o.token})
	if err != nil {
		return nil, slog.LevelWarn, err
	}
	a, err := u.call(ctx, protocol.UplinkHelloOp, data, JobSocketTimeout)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return nil, slog.LevelWarn, fmt.Errorf("the agent did not answer the hello within %v", JobSocketTimeout)
	case err != nil:
		return nil, slog.LevelWarn, fmt.Errorf("saying hello: %w", err)
	case a.Error != nil && a.Error.Code == protocol.CodeNoUplink:
		return nil, slog.LevelInfo, fmt.Errorf("the agent takes no resident jobs: %w", a.Error)
	case a.Error != nil && a.Error.Code == protocol.CodeForbidden:
		return nil, slog.LevelWarn, fmt.Errorf("the agent refused the hello (wrong job token? $%s): %w", EnvToken, a.Error)
	case a.Error != nil:
		return nil, slog.LevelWarn, fmt.Errorf("the agent refused the hello: %w", a.Error)
	case len(a.Data) == 0:
		return nil, slog.LevelWarn, errors.New("the agent's welcome carries no data")
	}
	w, err := protocol.DecodeUplinkWelcome(a.Data)
	if err != nil {
		return nil, slog.LevelWarn, fmt.Errorf("the agent's welcome: %w", err)
	}
	return w, slog.LevelInfo, nil
}

// socketFallback logs why the job connects to NATS instead.
func (j *Job) socketFallback(level slog.Level, err error) {
	j.log.Log(context.Background(), level, "not using the agent's job socket; the job connects to NATS itself",
		"setting", j.o.agentSocketFrom, "path", j.o.agentSocket, "err", err)
}

// socketLease applies a lease line of the agent's job socket as a lease
// from NATS or the pipe: decoded strictly, then through applyLease's job,
// epoch and round checks. A lease on an inherited uplink, which carries
// none (its leases come through the pipe), is ignored.
func (j *Job) socketLease(u *uplink, data []byte, recv time.Time) {
	if !u.dialed {
		j.badSocketLease(errors.New("a lease on the uplink of a process the agent started (its leases come through the pipe)"))
		return
	}
	l, err := protocol.DecodeLease(data, protocol.DefaultMaxMessageBytes)
	if err != nil {
		j.badSocketLease(err)
		return
	}
	j.applyLease(*l, recv)
}

func (j *Job) badSocketLease(err error) {
	j.mu.Lock()
	j.badLeases++
	j.mu.Unlock()
	j.log.Warn("ignoring a bad lease line from the agent", "err", err)
}

// fileKind names the type of a file mode, for the logs.
func fileKind(m fs.FileMode) string {
	switch m.Type() {
	case 0:
		return "regular file"
	case fs.ModeDir:
		return "directory"
	case fs.ModeNamedPipe:
		return "named pipe"
	case fs.ModeSymlink:
		return "symbolic link"
	case fs.ModeDevice, fs.ModeDevice | fs.ModeCharDevice:
		return "device"
	}
	return m.Type().String()
}
