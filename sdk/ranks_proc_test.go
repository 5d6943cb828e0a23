package sdk_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/sdk"
	"github.com/shockwave-sched/shockwave/sdk/sdktest"
)

// The test binary doubles as a rank process: with $SDK_RANK_CHILD set, it
// runs rankChild instead of the tests (the tests start it with the rank
// variables torchrun would set).
func TestMain(m *testing.M) {
	switch {
	case os.Getenv("SDK_RANK_CHILD") != "":
		os.Exit(rankChild())
	case os.Getenv("SDK_FD3_PROBE") != "":
		os.Exit(fd3Probe())
	case os.Getenv("SDK_LEASEFD_CHILD") != "":
		os.Exit(leaseFDChild()) // leasefd_test.go
	case os.Getenv("SDK_UPLINK_CHILD") != "":
		os.Exit(uplinkChild()) // uplink_test.go
	case os.Getenv("SDK_JOBSOCKET_CHILD") != "":
		os.Exit(jobSocketChild()) // jobsocket_test.go
	}
	os.Exit(m.Run())
}

// Exit codes of a rank process.
const (
	exitOK       = 0
	exitFailed   = 1
	exitRankLost = 3
)

type rankCheckpoint struct {
	W   float64        `json:"w"`
	SDK sdk.Checkpoint `json:"sdk"`
}

// rankChild trains the toy model as one rank: an all-reduce per step over
// TCP with rank 0 (which fails, rather than hangs, when ranks disagree on
// the step), rank 0's checkpoint written at every suspension and every 50
// steps, and the weights dropped while suspended and reloaded on resume.
func rankChild() int {
	rank, _ := strconv.Atoi(os.Getenv("RANK"))
	world, _ := strconv.Atoi(os.Getenv("WORLD_SIZE"))
	dir := os.Getenv("RANKS_DIR")
	steps, _ := strconv.ParseInt(os.Getenv("RANKS_STEPS"), 10, 64)
	sleep, _ := time.ParseDuration(os.Getenv("RANKS_SLEEP"))
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	say := func(format string, args ...any) {
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush()
	}
	fail := func(code int, err error) int {
		say("error %d %v", code, err)
		return code
	}
	ckptPath := filepath.Join(dir, "ckpt.json")
	var ck rankCheckpoint
	resumed := false
	if data, err := os.ReadFile(ckptPath); err == nil {
		if err := json.Unmarshal(data, &ck); err != nil {
			return fail(exitFailed, err)
		}
		resumed = true
	}
	red, err := dialReducer(rank, world, os.Getenv("RANKS_ADDR"))
	if err != nil {
		return fail(exitFailed, err)
	}
	defer red.close()
	w := ck.W
	var job *sdk.Job
	save := func() error {
		data, _ := json.Marshal(rankCheckpoint{W: w, SDK: job.Checkpoint()})
		tmp := ckptPath + ".tmp"
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			return err
		}
		return os.Rename(tmp, ckptPath)
	}
	opts := []sdk.Option{sdk.WithModel("ranks-proc"), sdk.WithBatchSize(8), sdk.WithDatasetSize(1 << 20),
		sdk.WithTotalSteps(steps), sdk.WithRankTimeout(time.Second, 30*time.Second), sdk.WithRegisterTimeout(20 * time.Second),
		sdk.WithOnSuspend(func(context.Context, protocol.Lease) error {
			say("stop %d", job.StepsDone())
			if rank == 0 {
				if err := save(); err != nil {
					return err
				}
			}
			w = math.NaN() // drop the model: it must come back from the checkpoint
			return nil
		}),
		sdk.WithOnResume(func(_ context.Context, l protocol.Lease) error {
			data, err := os.ReadFile(ckptPath)
			if err == nil {
				err = json.Unmarshal(data, &ck)
			}
			if err != nil {
				return err
			}
			if ck.SDK.StepsDone != job.StepsDone() {
				return fmt.Errorf("checkpoint of step %d, resuming at %d", ck.SDK.StepsDone, job.StepsDone())
			}
			w = ck.W
			say("resume %d %v", job.StepsDone(), sdk.LeaseDevices(l))
			return nil
		})}
	if resumed && rank == 0 {
		opts = append(opts, sdk.WithResume(ck.SDK))
	}
	ctx := context.Background()
	job, err = sdk.Register(ctx, opts...)
	if err != nil {
		return fail(exitFailed, err)
	}
	defer job.Close()
	k := int64(-1)
	for _, err := range sdk.Steps(ctx, job, sdk.SourceFunc[int](func(context.Context) (int, error) { return 0, nil })) {
		switch {
		case errors.Is(err, sdk.ErrRankLost):
			return fail(exitRankLost, err)
		case errors.Is(err, sdk.ErrPreempted):
			say("preempted %d", job.StepsDone())
			return exitOK
		case err != nil:
			return fail(exitFailed, err)
		}
		if k < 0 {
			k = job.StepsDone()
			say("start %d", k)
			if resumed && k != ck.SDK.StepsDone {
				return fail(exitFailed, fmt.Errorf("restarted at step %d, checkpoint of step %d", k, ck.SDK.StepsDone))
			}
		}
		// A periodic checkpoint, before the step: the weights of k steps
		// with the SDK's progress of k steps.
		if rank == 0 && k > 0 && k%50 == 0 {
			if err := save(); err != nil {
				return fail(exitFailed, err)
			}
		}
		s, err := red.allReduce(k, toyGrad(w, k, rank))
		if err != nil {
			return fail(exitFailed, err)
		}
		w -= 0.05 * s / float64(world)
		k++
		time.Sleep(sleep)
	}
	if job.StepsDone() != steps || k != steps {
		return fail(exitFailed, fmt.Errorf("ended at step %d (loop %d), want %d", job.StepsDone(), k, steps))
	}
	say("final %d", math.Float64bits(w))
	return exitOK
}

// reducer is a star all-reduce over TCP: the other ranks send (step,
// value) to rank 0, which checks that every rank is in its step, sums in
// rank order and sends the sum back. Every read and write has a deadline:
// a disagreement or a dead peer is an error, never a hang.
type reducer struct {
	rank  int
	conns []net.Conn // rank 0: by rank; others: [0] is rank 0
}

const reduceTimeout = 10 * time.Second

func dialReducer(rank, world int, addr string) (*reducer, error) {
	r := &reducer{rank: rank, conns: make([]net.Conn, world)}
	if rank > 0 {
		deadline := time.Now().Add(20 * time.Second)
		for {
			c, err := net.Dial("tcp", addr)
			if err == nil {
				r.conns[0] = c
				return r, binary.Write(c, binary.LittleEndian, int64(rank))
			}
			if time.Now().After(deadline) {
				return nil, err
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(20 * time.Second))
	for range world - 1 {
		c, err := ln.Accept()
		if err != nil {
			return nil, err
		}
		var who int64
		if err := binary.Read(c, binary.LittleEndian, &who); err != nil || who < 1 || who >= int64(world) || r.conns[who] != nil {
			return nil, fmt.Errorf("bad rank %d from %v: %v", who, c.RemoteAddr(), err)
		}
		r.conns[who] = c
	}
	return r, nil
}

func (r *reducer) allReduce(step int64, v float64) (float64, error) {
	type msg struct {
		Step int64
		V    float64
	}
	if r.rank > 0 {
		c := r.conns[0]
		_ = c.SetDeadline(time.Now().Add(reduceTimeout))
		if err := binary.Write(c, binary.LittleEndian, msg{step, v}); err != nil {
			return 0, fmt.Errorf("all-reduce of step %d: %w", step, err)
		}
		var sum float64
		if err := binary.Read(c, binary.LittleEndian, &sum); err != nil {
			return 0, fmt.Errorf("all-reduce of step %d: %w", step, err)
		}
		return sum, nil
	}
	sum := v
	for i := 1; i < len(r.conns); i++ {
		var m msg
		_ = r.conns[i].SetDeadline(time.Now().Add(reduceTimeout))
		if err := binary.Read(r.conns[i], binary.LittleEndian, &m); err != nil {
			return 0, fmt.Errorf("all-reduce of step %d: rank %d: %w", step, i, err)
		}
		if m.Step != step {
			return 0, fmt.Errorf("all-reduce: rank %d is in step %d, rank 0 in step %d", i, m.Step, step)
		}
		sum += m.V
	}
	for i := 1; i < len(r.conns); i++ {
		if err := binary.Write(r.conns[i], binary.LittleEndian, sum); err != nil {
			return 0, fmt.Errorf("all-reduce of step %d: rank %d: %w", step, i, err)
		}
	}
	return sum, nil
}

func (r *reducer) close() {
	for _, c := range r.conns {
		if c != nil {
			c.Close()
		}
	}
}

// rankProc is one rank process started by a test.
type rankProc struct {
	rank  int
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
	done  chan struct{}
	code  int
}

func (p *rankProc) output() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.lines)
}

func (p *rankProc) prefixed(prefix string) []string {
	var out []string
	for _, l := range p.output() {
		if rest, ok := strings.CutPrefix(l, prefix); ok {
			out = append(out, rest)
		}
	}
	return out
}

// startRanks starts world rank processes of job id.
func startRanks(t *testing.T, c *sdktest.Coordinator, id, dir string, world int, steps int64, sleep time.Duration, env ...string) []*rankProc {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	procs := make([]*rankProc, world)
	for r := range world {
		p := &rankProc{rank: r, done: make(chan struct{})}
		p.cmd = exec.Command(os.Args[0], "-test.run=XXX")
		p.cmd.Env = append(os.Environ(), "SDK_RANK_CHILD=1", "RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(world),
			"LOCAL_RANK="+strconv.Itoa(r), sdk.EnvURL+"="+c.URL(), sdk.EnvJob+"="+id, "RANKS_DIR="+dir,
			"RANKS_ADDR="+addr, "RANKS_STEPS="+strconv.FormatInt(steps, 10), "RANKS_SLEEP="+sleep.String())
		p.cmd.Env = append(p.cmd.Env, env...)
		stdout, err := p.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		p.cmd.Stderr = os.Stderr
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				p.mu.Lock()
				p.lines = append(p.lines, sc.Text())
				p.mu.Unlock()
			}
			err := p.cmd.Wait()
			p.code = p.cmd.ProcessState.ExitCode()
			if p.code < 0 && err != nil {
				p.code = -1
			}
			close(p.done)
		}()
		procs[r] = p
	}
	t.Cleanup(func() {
		for _, p := range procs {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return procs
}

// waitExit waits (bounded) for every process to exit.
func waitExit(t *testing.T, procs []*rankProc, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for _, p := range procs {
		select {
		case <-p.done:
		case <-deadline:
			t.Fatalf("rank %d did not exit within %v (a hang); its output: %v", p.rank, within, p.output())
		}
	}
}

// stepsOf is the number of stops a process reported.
func stopsOf(p *rankProc) int { return len(p.prefixed("stop ")) }

// TestRankProcesses_StopAndResumeAtTheSameStepAndMatchAnUninterruptedRun
// runs Go ranks as real processes (2 and 4 of them) that all-reduce over
// TCP every step, suspends and resumes the job at least 20 times at random
// moments, and checks that every rank stopped at the same steps, no rank
// hung, and the final weights are bit-identical to an uninterrupted run.
func TestRankProcesses_StopAndResumeAtTheSameStepAndMatchAnUninterruptedRun(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	for _, world := range []int{2, 4} {
		t.Run(fmt.Sprintf("world%d", world), func(t *testing.T) {
			const steps = 600
			c := sdktest.Start(t, sdktest.Config{GPUs: world, Round: time.Hour})
			id := fmt.Sprintf("proc%d", world)
			procs := startRanks(t, c, id, t.TempDir(), world, steps, time.Millisecond)
			l := newLeaser(t, c, id)
			workers := make([]int, world)
			for i := range workers {
				workers[i] = i
			}
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			cycles := 0
			for ; cycles < 24 && ctx.Err() == nil; cycles++ {
				// Until rank 0 registered, a lease finds no subscriber: grant
				// again until every rank trains (the coordinator re-grants
				// every round).
				resumed := func() bool { return allPrinted(procs, "start ", 1) && allPrinted(procs, "resume ", cycles) }
				if !grantUntil(ctx, l, workers, resumed) {
					break
				}
				time.Sleep(time.Duration(5+cycles%7*3) * time.Millisecond)
				l.suspend()
				if !waitFor(ctx, func() bool { return allStopped(procs, cycles+1) || anyExited(procs) }) || anyExited(procs) {
					break
				}
			}
			l.run(workers...)
			waitExit(t, procs, 60*time.Second)
			checkFinal(t, procs, toyReference(world, steps))
			for _, p := range procs[1:] {
				if got, want := p.prefixed("stop "), procs[0].prefixed("stop "); !slices.Equal(got, want) {
					t.Errorf("rank %d stopped at %v, rank 0 at %v", p.rank, got, want)
				}
			}
			if n := stopsOf(procs[0]); n < 20 {
				t.Errorf("only %d suspensions; rank 0 printed %v, rank 1 %v", n, procs[0].output(), procs[1].output())
			}
			t.Logf("world %d: %d suspensions at steps %v", world, stopsOf(procs[0]), procs[0].prefixed("stop "))
		})
	}
}

func allStopped(procs []*rankProc, n int) bool {
	for _, p := range procs {
		if stopsOf(p) < n {
			return false
		}
	}
	return true
}

func anyExited(procs []*rankProc) bool {
	for _, p := range procs {
		select {
		case <-p.done:
			return true
		default:
		}
	}
	return false
}

func checkFinal(t *testing.T, procs []*rankProc, want float64) {
	t.Helper()
	for _, p := range procs {
		fin := p.prefixed("final ")
		if p.code != 0 || len(fin) != 1 {
			t.Errorf("rank %d exited %d without one final weight; output %v", p.rank, p.code, p.output())
			continue
		}
		bits, _ := strconv.ParseUint(fin[0], 10, 64)
		if got := math.Float64frombits(bits); bits != math.Float64bits(want) {
			t.Errorf("rank %d: final weight %v, uninterrupted run %v", p.rank, got, want)
		}
	}
}

// TestRankProcesses_AKilledRankStopsTheOthersWhoRestartFromTheCheckpoint
// kills one of three rank processes (SIGKILL) twice: once while the job
// trains (the others fail in their all-reduce, as gloo would) and once
// while it is suspended (the others hear nothing more from it and end with
// ErrRankLost after the rank timeout). Every time the others exit non-zero
// within a bound; the job restarted as new processes resumes from rank 0's
// checkpoint and ends with the weights of an uninterrupted run.
func TestRankProcesses_AKilledRankStopsTheOthersWhoRestartFromTheCheckpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	const world, steps = 3, 400
	c := sdktest.Start(t, sdktest.Config{GPUs: world, Round: time.Hour})
	dir := t.TempDir()
	l := newLeaser(t, c, "killed")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// 1: killed while training.
	procs := startRanks(t, c, "killed", dir, world, steps, 2*time.Millisecond)
	grantUntil(ctx, l, []int{0, 1, 2}, func() bool { _, err := os.Stat(filepath.Join(dir, "ckpt.json")); return err == nil })
	time.Sleep(50 * time.Millisecond)
	_ = procs[2].cmd.Process.Signal(syscall.SIGKILL)
	waitExit(t, procs, 30*time.Second)
	for _, p := range procs[:2] {
		if p.code == 0 {
			t.Errorf("rank %d exited 0 after rank 2 was killed mid-step: %v", p.rank, p.output())
		}
		t.Logf("killed while training: rank %d exited %d: %v", p.rank, p.code, last(p.output()))
	}

	// 2: killed while suspended.
	procs = startRanks(t, c, "killed", dir, world, steps, 2*time.Millisecond)
	grantUntil(ctx, l, []int{0, 1, 2}, func() bool { return allPrinted(procs, "start ", 1) || anyExited(procs) })
	time.Sleep(30 * time.Millisecond)
	l.suspend()
	waitFor(ctx, func() bool { return allStopped(procs, 1) || anyExited(procs) })
	_ = procs[2].cmd.Process.Signal(syscall.SIGKILL)
	waitExit(t, procs, 30*time.Second)
	for _, p := range procs[:2] {
		if p.code != exitRankLost {
			t.Errorf("rank %d exited %d after rank 2 was killed while suspended, want %d (ErrRankLost): %v", p.rank, p.code, exitRankLost, p.output())
		}
	}

	// 3: restarted, the job finishes from rank 0's checkpoint.
	procs = startRanks(t, c, "killed", dir, world, steps, time.Millisecond)
	grantUntil(ctx, l, []int{0, 1, 2}, func() bool { return allPrinted(procs, "start ", 1) || anyExited(procs) })
	waitExit(t, procs, 60*time.Second)
	checkFinal(t, procs, toyReference(world, steps))
}

// grantUntil publishes RUN leases every 100 ms until cond holds.
func grantUntil(ctx context.Context, l *leaser, workers []int, cond func() bool) bool {
	for ctx.Err() == nil {
		l.run(workers...)
		deadline := time.Now().Add(100 * time.Millisecond)
		for time.Now().Before(deadline) {
			if cond() {
				return true
			}
			time.Sleep(time.Millisecond)
		}
	}
	return false
}

func allPrinted(procs []*rankProc, prefix string, n int) bool {
	for _, p := range procs {
		if len(p.prefixed(prefix)) < n {
			return false
		}
	}
	return true
}

func last(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	return lines[len(lines)-1]
}

// TestRankProcesses_InExitModeEveryRankExitsAtTheSameStepAndTheRestartResumes
// runs an EXIT-mode job of three rank processes (as the node agent runs
// them): at every SUSPEND every rank saves nothing but rank 0's checkpoint
// and exits 0 at the same step; the restarted processes resume from it,
// and after three preemptions the job ends with the weights of an
// uninterrupted run.
func TestRankProcesses_InExitModeEveryRankExitsAtTheSameStepAndTheRestartResumes(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	const world, steps = 3, 300
	c := sdktest.Start(t, sdktest.Config{GPUs: world, Round: time.Hour})
	dir := t.TempDir()
	l := newLeaser(t, c, "exit3")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var stops []string
	for i := range 3 {
		procs := startRanks(t, c, "exit3", dir, world, steps, 2*time.Millisecond, sdk.EnvExit+"=1")
		grantUntil(ctx, l, []int{0, 1, 2}, func() bool { return allPrinted(procs, "start ", 1) || anyExited(procs) })
		time.Sleep(time.Duration(60+40*i) * time.Millisecond)
		l.suspend()
		waitExit(t, procs, 30*time.Second)
		for _, p := range procs {
			pre := p.prefixed("preempted ")
			if p.code != 0 || len(pre) != 1 || pre[0] != procs[0].prefixed("preempted ")[0] {
				var all []string
				for _, q := range procs {
					all = append(all, fmt.Sprintf("rank %d (exit %d): %v", q.rank, q.code, q.output()))
				}
				t.Fatalf("preemption %d: rank %d exited %d after %v, rank 0 after %v:\n%s", i+1, p.rank, p.code,
					pre, procs[0].prefixed("preempted "), strings.Join(all, "\n"))
			}
		}
		stops = append(stops, procs[0].prefixed("preempted ")[0])
	}
	procs := startRanks(t, c, "exit3", dir, world, steps, time.Millisecond, sdk.EnvExit+"=1")
	grantUntil(ctx, l, []int{0, 1, 2}, func() bool { return allPrinted(procs, "start ", 1) || anyExited(procs) })
	waitExit(t, procs, 60*time.Second)
	checkFinal(t, procs, toyReference(world, steps))
	t.Logf("preempted at steps %v", stops)
}
