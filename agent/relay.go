package agent

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"

	"github.com/shockwave-sched/shockwave/protocol"
)

// Leases relayed to the processes (docs/agent.md, "Leases relayed by the
// agent"). Each process the agent starts gets the read end of a pipe as
// descriptor 3, named by $SHOCKWAVE_LEASE_FD="3:<inode>"; the agent writes
// the job's leases into the write end, one JSON line each: the RUN lease of
// the job's assignment whenever the coordinator issues a new one, and one
// SUSPEND when the run leaves the node's desired state.

// leaseFD is the descriptor number of the pipe in a started process: the
// first of cmd.ExtraFiles.
const leaseFD = 3

// relay writes one process's leases into its pipe. Only the latest lease
// not yet written is kept (a one-slot mailbox), and the writing is done by
// its own goroutine, so a process that never reads its pipe blocks that
// goroutine at worst, never the agent's loop, and a slow reader gets the
// newest lease rather than a backlog. The writer stops at the first write
// error (EPIPE: the process exited or closed its end).
type relay struct {
	w    *os.File
	kick chan struct{} // one slot: a lease is waiting
	done chan struct{} // closed by close
	// stopped is closed when the writer goroutine returns.
	stopped chan struct{}
	once    sync.Once

	mu      sync.Mutex
	next    *protocol.Lease // the latest lease not written yet
	err     error           // why the writer stopped (nil: closed, or running)
	written int             // leases written
}

// newRelay starts the writer of the pipe's write end w.
func newRelay(w *os.File) *relay {
	r := &relay{w: w, kick: make(chan struct{}, 1), done: make(chan struct{}), stopped: make(chan struct{})}
	go r.write()
	return r
}

// post hands l to the writer in place of any lease not written yet. It
// never blocks.
func (r *relay) post(l *protocol.Lease) {
	r.mu.Lock()
	r.next = l
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default: // the writer has a kick pending: it will take r.next
	}
}

func (r *relay) write() {
	defer close(r.stopped)
	for {
		select {
		case <-r.done:
			return
		case <-r.kick:
		}
		r.mu.Lock()
		l := r.next
		r.next = nil
		r.mu.Unlock()
		if l == nil {
			continue
		}
		line, err := protocol.MarshalLease(l)
		if err == nil {
			_, err = r.w.Write(append(line, '\n'))
		}
		r.mu.Lock()
		if err != nil {
			r.err = err
		} else {
			r.written++
		}
		r.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// close stops the writer and closes the write end (a write in progress
// ends with an error); the reader then sees end of file. Idempotent.
func (r *relay) close() {
	r.once.Do(func() {
		close(r.done)
		_ = r.w.Close()
	})
}

// stopErr is why the writer stopped on its own (nil while it runs, or
// after close).
func (r *relay) stopErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// attachPipe gives cmd the read end of a new pipe as descriptor 3 and the
// variable naming it, and returns both ends; the caller closes the read
// end once the process started (or failed to).
func attachPipe(cmd *exec.Cmd) (rd, wr *os.File, err error) {
	rd, wr, err = os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("lease pipe: %w", err)
	}
	var st syscall.Stat_t
	if fi, err := rd.Stat(); err == nil {
		if s, ok := fi.Sys().(*syscall.Stat_t); ok {
			st = *s
		}
	}
	if st.Ino == 0 {
		rd.Close()
		wr.Close()
		return nil, nil, fmt.Errorf("lease pipe: no inode")
	}
	cmd.ExtraFiles = []*os.File{rd}
	cmd.Env = append(cmd.Env, protocol.EnvLeaseFD+"="+strconv.Itoa(leaseFD)+":"+strconv.FormatUint(st.Ino, 10))
	return rd, wr, nil
}

// relayRun writes the assignment's lease to r's processes when it differs
// from the one written last (a new round, expiry or leader epoch).
func (a *Agent) relayRun(r *run, l *protocol.Lease) {
	if l == nil || len(r.relays) == 0 {
		return
	}
	if sameLease(r.lease, l) {
		return
	}
	r.lease, r.suspended = l, false
	for _, x := range r.relays {
		x.post(l)
	}
}

// relaySuspend writes, once, a SUSPEND lease to the processes of a run that
// left the desired state d: they run in EXIT mode, so they checkpoint and
// exit at their next iteration boundary, before the run's deadline would
// stop them.
func (a *Agent) relaySuspend(r *run, d *protocol.NodeDesired) {
	if len(r.relays) == 0 || r.suspended {
		return
	}
	r.suspended, r.lease = true, nil
	l := leftSuspend(r.key.job, a.cfg.Node, d)
	for _, x := range r.relays {
		x.post(l)
	}
	a.log.Debug().Str("job", r.key.job).Int("round", d.Round).Msg("relayed a SUSPEND lease")
}

// sameLease says whether l would tell a process nothing p did not: the same
// round, expiry, leader epoch and action (a heartbeat repeating a lease).
func sameLease(p, l *protocol.Lease) bool {
	return p != nil && p.Round == l.Round && p.Expiry == l.Expiry && p.Epoch == l.Epoch && p.Action == l.Action
}

// leftSuspend is the SUSPEND lease the agent relays for job on node when
// the job left the desired state d: of d's round and leader epoch, starting
// and ending at d's now.
func leftSuspend(job, node string, d *protocol.NodeDesired) *protocol.Lease {
	return &protocol.Lease{V: protocol.Version, Job: job, Round: d.Round, Action: protocol.Suspend, Epoch: d.Epoch,
		Start: d.Now, Expiry: d.Now, Reason: fmt.Sprintf("not granted on node %s in round %d", node, d.Round)}
}

// closeRelays closes the pipes of r's processes.
func (r *run) closeRelays() {
	for _, x := range r.relays {
		if x != nil {
			x.close()
		}
	}
}
