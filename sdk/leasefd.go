package sdk

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/shockwave-sched/shockwave/protocol"
)

// EnvLeaseFD names the pipe a relaying node agent writes the job's leases
// into: "FD:INODE", the descriptor number and the pipe's inode
// (protocol.EnvLeaseFD; docs/agent.md, "Leases relayed by the agent").
const EnvLeaseFD = protocol.EnvLeaseFD

// parseLeaseFD reads the value of $SHOCKWAVE_LEASE_FD.
func parseLeaseFD(v string) (fd int, ino uint64, err error) { return parseFD(EnvLeaseFD, "pipe", v) }

// parseFD reads the value v of the variable env naming an inherited
// descriptor: "FD:INODE", the inode of a file of the kind what.
func parseFD(env, what, v string) (fd int, ino uint64, err error) {
	a, b, ok := strings.Cut(v, ":")
	fd, err1 := strconv.Atoi(a)
	ino, err2 := strconv.ParseUint(b, 10, 64)
	if !ok || err1 != nil || err2 != nil || fd < 3 || ino == 0 {
		return 0, 0, fmt.Errorf("$%s=%.40q: want FD:INODE, a descriptor number of at least 3 and the %s's inode (set by `shockwave agent`)", env, v, what)
	}
	return fd, ino, nil
}

// pipes are the lease pipes this process opened, by descriptor: the job
// reading each ("" while none does: a Register that failed leaves it open
// for the next one, since the agent wrote into this pipe only).
var pipes = struct {
	sync.Mutex
	by map[int]*pipeEntry
}{by: map[int]*pipeEntry{}}

type pipeEntry struct {
	f   *os.File
	job string
}

// openLeasePipe returns descriptor fd as a file when it is a pipe whose
// inode is ino: the one the agent made, inherited. Anything else (a
// launcher in between closed it and the number now names another file, or
// nothing) is not touched and an error says what it is. The pipe is made
// close-on-exec, so that the job's own children do not inherit it, and
// non-blocking, so that Close ends a read in progress.
func openLeasePipe(fd int, ino uint64, job string) (*os.File, error) {
	pipes.Lock()
	defer pipes.Unlock()
	e := pipes.by[fd]
	if e != nil && e.job != "" {
		return nil, fmt.Errorf("descriptor %d is read by job %s of this process already", fd, e.job)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("descriptor %d: %w", fd, err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFIFO {
		return nil, fmt.Errorf("descriptor %d is not a pipe (mode %#o)", fd, st.Mode&syscall.S_IFMT)
	}
	if st.Ino != ino {
		return nil, fmt.Errorf("descriptor %d is a pipe with inode %d, not %d", fd, st.Ino, ino)
	}
	if e == nil {
		syscall.CloseOnExec(fd)
		if err := syscall.SetNonblock(fd, true); err != nil {
			return nil, fmt.Errorf("descriptor %d: %w", fd, err)
		}
		e = &pipeEntry{f: os.NewFile(uintptr(fd), "lease pipe")}
		pipes.by[fd] = e
	}
	e.job = job
	return e.f, nil
}

// releaseLeasePipe leaves the pipe open for a later Register (after a
// failed one), or closes it for good.
func releaseLeasePipe(fd int, close bool) {
	pipes.Lock()
	defer pipes.Unlock()
	e := pipes.by[fd]
	if e == nil {
		return
	}
	e.job = ""
	if close {
		_ = e.f.Close()
		delete(pipes.by, fd)
	}
}

// leasePipe opens the pipe of $SHOCKWAVE_LEASE_FD for the process that
// follows the leases (a single process, or rank 0). It returns nil when
// there is none or it is not the agent's: leases then come over NATS only.
// A rank above 0 does not read it and closes it, so the agent stops
// writing to it.
func (j *Job) leasePipe() *os.File {
	o := &j.o
	if o.leaseFD == 0 {
		return nil
	}
	f, err := openLeasePipe(o.leaseFD, o.leaseIno, j.id)
	if err != nil {
		j.log.Warn("not reading leases from the agent's pipe (not inherited, e.g. a launcher closed it): they come over NATS",
			"env", EnvLeaseFD, "err", err)
		return nil
	}
	if j.rk != nil && j.rk.rank > 0 {
		releaseLeasePipe(o.leaseFD, true)
		return nil
	}
	return f
}

// Relayed reports whether the job reads its leases from its node agent's
// pipe ($SHOCKWAVE_LEASE_FD), as its registration says; false when the
// pipe was not inherited or the agent closed it.
func (j *Job) Relayed() bool { return j.relayed.Load() }

// readLeases hands every lease line of the agent's pipe to applyLease, the
// path of the NATS lease subscription, until end of file (the agent is
// gone) or Close. A line longer than protocol.DefaultMaxMessageBytes is
// skipped up to its newline; it and a line that is not a valid lease count
// as bad leases.
func (j *Job) readLeases(f *os.File, done chan<- struct{}) {
	defer close(done)
	br := bufio.NewReaderSize(f, 64<<10)
	var line []byte
	over := false
	for {
		frag, err := br.ReadSlice('\n')
		if !over && len(line)+len(frag) > protocol.DefaultMaxMessageBytes+1 {
			over, line = true, line[:0]
		}
		if !over {
			line = append(line, frag...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil { // end of file or Close: a partial last line is dropped
			if errors.Is(err, io.EOF) {
				j.relayed.Store(false) // later registrations say so
				j.log.Debug("the agent closed the lease pipe")
			}
			return
		}
		if over {
			over = false
			j.badPipeLine(fmt.Errorf("a line longer than %d bytes", protocol.DefaultMaxMessageBytes))
			continue
		}
		j.pipeLine(bytes.TrimSuffix(line, []byte("\n")), time.Now())
		line = line[:0]
	}
}

func (j *Job) pipeLine(line []byte, recv time.Time) {
	if len(bytes.TrimSpace(line)) == 0 {
		return
	}
	l, err := protocol.DecodeLease(line, protocol.DefaultMaxMessageBytes)
	if err != nil {
		j.badPipeLine(err)
		return
	}
	j.applyLease(*l, recv)
}

func (j *Job) badPipeLine(err error) {
	j.mu.Lock()
	j.badLeases++
	j.mu.Unlock()
	j.log.Warn("ignoring a bad lease line from the agent's pipe", "err", err)
}
