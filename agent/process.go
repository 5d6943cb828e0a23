package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/shockwave-sched/shockwave/protocol"
)

// runKey identifies a run: a job's processes for one attempt and one
// uninterrupted grant.
type runKey struct {
	job            string
	attempt, since int
}

func keyOf(a protocol.Assignment) runKey { return runKey{a.Job, a.Attempt, a.Since} }

// run is the processes of one run on this node.
type run struct {
	key      runKey
	as       protocol.Assignment
	procs    []*exec.Cmd
	done     []bool // process i was reaped
	live     int
	deadline time.Time // SIGTERM past this
	termAt   time.Time // when SIGTERM was sent
	killed   bool
	code     int
	detail   string
	log      *os.File
	// Lease relay (relay.go): the pipe writer of each process (none when
	// the agent does not relay), the lease written last, and whether the
	// SUSPEND of a run that left the desired state was written.
	relays    []*relay
	lease     *protocol.Lease
	suspended bool
	// uplink carries the registrations and batches of the run's process
	// (uplink.go; nil unless the run is a single process under a relaying
	// agent with the uplink on).
	uplink *uplink
}

// exit is one process of a run ending.
type exit struct {
	key  runKey
	idx  int
	code int
	sig  string
}

// baseEnv drops the variables the agent sets from env.
func baseEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if protocol.ValidateEnv("agent", "env", k+"=") == nil {
			out = append(out, kv)
		}
	}
	return out
}

// env is the environment of process i of a run.
func (a *Agent) env(as protocol.Assignment, i int, devs []int, ckpt, creds string) []string {
	ids := make([]string, len(devs))
	for k, d := range devs {
		ids[k] = strconv.Itoa(d)
	}
	env := append(append([]string{}, a.cfg.Env...), as.Env...)
	env = append(env,
		"SHOCKWAVE_JOB_ID="+as.Job,
		"SHOCKWAVE_NATS_URL="+a.cfg.URL,
		"SHOCKWAVE_EXIT_MODE=1",
		"SHOCKWAVE_CHECKPOINT_DIR="+ckpt,
		"SHOCKWAVE_AGENT_NODE="+a.cfg.Node, // not SHOCKWAVE_NODE: that marks a resident process
		"SHOCKWAVE_ATTEMPT="+strconv.Itoa(as.Attempt),
		"CUDA_VISIBLE_DEVICES="+strings.Join(ids, ","),
		"RANK="+strconv.Itoa(as.RankOffset+i),
		"WORLD_SIZE="+strconv.Itoa(as.WorldSize),
		"LOCAL_RANK="+strconv.Itoa(i),
		"LOCAL_WORLD_SIZE="+strconv.Itoa(as.Procs),
		"MASTER_ADDR="+as.MasterAddr,
		"MASTER_PORT="+strconv.Itoa(as.MasterPort),
	)
	if a.cfg.Prefix != protocol.DefaultPrefix {
		env = append(env, "SHOCKWAVE_PREFIX="+a.cfg.Prefix)
	}
	if creds != "" {
		env = append(env, "SHOCKWAVE_CREDS="+creds)
	}
	if a.cfg.Token != "" {
		env = append(env, "SHOCKWAVE_TOKEN="+a.cfg.Token)
	}
	for _, kv := range [][2]string{{"SHOCKWAVE_TLS_CA", a.cfg.TLSCA}, {"SHOCKWAVE_TLS_CERT", a.cfg.TLSCert}, {"SHOCKWAVE_TLS_KEY", a.cfg.TLSKey}} {
		if kv[1] != "" {
			env = append(env, kv[0]+"="+kv[1])
		}
	}
	return env
}

// start launches the processes of an assignment, each the leader of its
// own process group and killed with the agent.
func (a *Agent) start(as protocol.Assignment, deadline time.Time) (*run, error) {
	ckpt := filepath.Join(a.cfg.WorkDir, as.Job)
	if err := os.MkdirAll(ckpt, 0o755); err != nil {
		return nil, err
	}
	creds := ""
	if a.cfg.FetchCreds {
		var err error
		if creds, err = a.credsFile(as.Job); err != nil {
			return nil, err
		}
	}
	out, err := os.OpenFile(filepath.Join(ckpt, "output.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "--- shockwave agent %s: attempt %d, grant of round %d, devices %v, %s\n",
		a.cfg.Node, as.Attempt, as.Since, as.Devices, time.Now().UTC().Format(time.RFC3339))
	r := &run{key: keyOf(as), as: as, deadline: deadline, log: out}
	per := len(as.Devices) / as.Procs
	for i := range as.Procs {
		cmd := exec.Command(as.Command[0], as.Command[1:]...)
		cmd.Env = a.env(as, i, as.Devices[i*per:(i+1)*per], ckpt, creds)
		cmd.Stdout, cmd.Stderr = out, out
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := a.startProc(r, cmd); err != nil {
			r.code, r.detail = 127, fmt.Sprintf("cannot start %q: %v", as.Command[0], err)
			break
		}
		go a.wait(r.key, i, cmd)
	}
	a.relayRun(r, as.Lease)
	if r.live == 0 {
		// nothing started: report the failure as an exit at once
		go func() { a.exits <- exit{key: r.key, idx: -1, code: r.code} }()
		r.live = 1
		return r, nil
	}
	if r.code != 0 {
		a.signal(r, syscall.SIGTERM)
		r.termAt = time.Now()
	}
	a.log.Info().Str("job", as.Job).Int("attempt", as.Attempt).Int("since", as.Since).Ints("devices", as.Devices).
		Int("procs", len(r.procs)).Msg("started")
	return r, nil
}

// startProc starts one process of r, with its lease pipe when the agent
// relays and its uplink when it carries one for r; the parent keeps only
// the pipe's write end and its own end of the uplink.
func (a *Agent) startProc(r *run, cmd *exec.Cmd) error {
	var rd, wr, child *os.File
	var up *net.UnixConn
	fail := func(err error) error {
		for _, f := range []*os.File{rd, wr, child} {
			if f != nil {
				f.Close()
			}
		}
		if up != nil {
			up.Close()
		}
		return err
	}
	if !a.cfg.NoRelay {
		var err error
		if rd, wr, err = attachPipe(cmd); err != nil {
			return err
		}
		if a.wantsUplink(r.as) {
			if child, up, err = attachUplink(cmd); err != nil {
				return fail(err)
			}
		}
	}
	if err := cmd.Start(); err != nil {
		return fail(err)
	}
	for _, f := range []*os.File{rd, child} {
		if f != nil {
			f.Close()
		}
	}
	r.procs = append(r.procs, cmd)
	r.done = append(r.done, false)
	r.live++
	if wr != nil {
		r.relays = append(r.relays, newRelay(wr))
	}
	if up != nil {
		r.uplink = a.uplinks.newUplink(up, r.key.job, r.key.attempt)
	}
	return nil
}

func (a *Agent) wait(k runKey, i int, cmd *exec.Cmd) {
	err := cmd.Wait()
	e := exit{key: k, idx: i}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			e.code, e.sig = 128+int(ws.Signal()), ws.Signal().String()
		} else {
			e.code = ee.ExitCode()
		}
	} else if err != nil {
		e.code = 1
	}
	a.exits <- e
}

// exited records one process's end; when the run's last process ended it
// reports the run. A rank that fails stops the run's other processes.
func (a *Agent) exited(ctx context.Context, e exit) {
	r := a.runs[e.key]
	if r == nil {
		return
	}
	r.live--
	if e.idx >= 0 {
		r.done[e.idx] = true
		if e.idx < len(r.relays) {
			r.relays[e.idx].close()
		}
		if r.uplink != nil {
			r.uplink.processExited() // a single process: its lines written before it exited are still forwarded
		}
	}
	if e.code != 0 && r.code == 0 {
		r.code = e.code
		r.detail = fmt.Sprintf("process %d exited with status %d", e.idx, e.code)
		if e.sig != "" {
			r.detail = fmt.Sprintf("process %d killed by %s", e.idx, e.sig)
		}
		if r.live > 0 && r.termAt.IsZero() {
			a.signal(r, syscall.SIGTERM)
			r.termAt = time.Now()
		}
	}
	if r.live > 0 {
		return
	}
	if !r.termAt.IsZero() && time.Now().After(r.deadline) {
		r.detail = strings.TrimSpace("stopped after its grant expired; " + r.detail)
	}
	r.log.Close()
	r.closeRelays()
	delete(a.runs, e.key)
	a.finished[e.key] = true
	a.log.Info().Str("job", e.key.job).Int("attempt", e.key.attempt).Int("code", r.code).Str("detail", r.detail).Msg("exited")
	rep := protocol.AgentReport{V: protocol.Version, Node: a.cfg.Node, Job: e.key.job, Attempt: e.key.attempt,
		Since: e.key.since, Event: protocol.ReportExited, Code: r.code, Detail: r.detail}
	go a.report(ctx, rep)
	a.startWanted()
}

// signal sends sig to every live process group of r.
func (a *Agent) signal(r *run, sig syscall.Signal) {
	for i, cmd := range r.procs {
		if !r.done[i] {
			_ = syscall.Kill(-cmd.Process.Pid, sig)
		}
	}
}

// enforce stops runs past their deadline: SIGTERM, then SIGKILL.
func (a *Agent) enforce() {
	now := time.Now()
	for _, r := range a.runs {
		switch {
		case r.termAt.IsZero() && now.After(r.deadline):
			a.log.Warn().Str("job", r.key.job).Msg("running past its grant: SIGTERM")
			a.signal(r, syscall.SIGTERM)
			r.termAt = now
		case !r.termAt.IsZero() && !r.killed && now.Sub(r.termAt) > a.cfg.KillGrace:
			a.log.Warn().Str("job", r.key.job).Msg("still running after SIGTERM: SIGKILL")
			a.signal(r, syscall.SIGKILL)
			r.killed = true
		}
	}
}

// stopAll ends every run: SIGTERM, SIGKILL after KillGrace.
func (a *Agent) stopAll() {
	for _, r := range a.runs {
		a.signal(r, syscall.SIGTERM)
	}
	deadline := time.After(a.cfg.KillGrace)
	for len(a.runs) > 0 {
		select {
		case e := <-a.exits:
			if r := a.runs[e.key]; r != nil {
				if e.idx >= 0 {
					r.done[e.idx] = true
				}
				if r.live--; r.live <= 0 {
					r.log.Close()
					r.closeRelays()
					if r.uplink != nil {
						r.uplink.close() // the agent stops: nothing more is forwarded
					}
					delete(a.runs, e.key)
				}
			}
		case <-deadline:
			for _, r := range a.runs {
				a.signal(r, syscall.SIGKILL)
			}
			deadline = time.After(time.Minute)
		}
	}
}
