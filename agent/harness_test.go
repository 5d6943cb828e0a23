package agent_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/agent"
	"github.com/shockwave-sched/shockwave/protocol"
)

// The tests run the real binaries: a coordinator (embedded NATS and
// JetStream), node agents with fake GPUs, and examples/go-train as the
// submitted job. TestMain builds them once.

var bin struct {
	shockwave, train string
}

func TestMain(m *testing.M) {
	if os.Getenv("AGENT_RELAY_CHILD") != "" {
		os.Exit(agent.RelayChild()) // relay_test.go
	}
	if os.Getenv("AGENT_UPLINK_CHILD") != "" {
		os.Exit(agent.UplinkChild()) // uplink_test.go
	}
	dir, err := os.MkdirTemp("", "shockwave-agent-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin.shockwave = filepath.Join(dir, "shockwave")
	bin.train = filepath.Join(dir, "go-train")
	for out, pkg := range map[string]string{bin.shockwave: "../cmd/shockwave", bin.train: "../examples/go-train"} {
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building", pkg, err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// cluster is a coordinator and its agents, all real processes.
type cluster struct {
	t       *testing.T
	dir     string // coordinator data, work dir, logs
	port    int
	coord   *exec.Cmd
	args    []string // extra coordinator flags
	agents  map[string]*exec.Cmd
	mu      sync.Mutex
	logs    []*os.File
	auth    []string // client flags of submit/cancel/status
	nc      *nats.Conn
	subj    protocol.Subjects
	natsOpt []nats.Option
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// newCluster starts a coordinator with 1 s rounds and extra flags.
func newCluster(t *testing.T, args ...string) *cluster {
	c := &cluster{t: t, dir: t.TempDir(), port: freePort(t), args: args, agents: map[string]*exec.Cmd{}}
	c.subj, _ = protocol.NewSubjects(protocol.DefaultPrefix)
	c.startCoordinator()
	t.Cleanup(c.stop)
	return c
}

func (c *cluster) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", c.port) }

func (c *cluster) logFile(name string) *os.File {
	f, err := os.OpenFile(filepath.Join(c.dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.logs = append(c.logs, f)
	c.mu.Unlock()
	return f
}

func (c *cluster) startCoordinator() {
	args := append([]string{"coordinator", "--listen", fmt.Sprintf("127.0.0.1:%d", c.port), "--data-dir", filepath.Join(c.dir, "data"),
		"--round", "1s", "--agent-timeout", "1500ms", "--log-format", "console"}, c.args...)
	cmd := exec.Command(bin.shockwave, args...)
	out := c.logFile("coordinator")
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.coord = cmd
	if c.creds() && c.auth == nil {
		c.issueAdmin()
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		nc, err := nats.Connect(c.url(), append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond)}, c.natsOpt...)...)
		if err == nil {
			if c.nc != nil {
				c.nc.Close()
			}
			c.nc = nc
			break
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("coordinator did not start: %v\n%s", err, c.read("coordinator"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	eventually(c.t, 20*time.Second, "the coordinator serves status", func() bool {
		_, err := c.status()
		return err == nil
	})
}

// killCoordinator sends SIGKILL to the coordinator and waits for it.
func (c *cluster) killCoordinator() {
	_ = c.coord.Process.Kill()
	_ = c.coord.Wait()
}

// startAgent starts a node agent with gpus fake GPUs.
func (c *cluster) startAgent(node string, gpus int, extra ...string) {
	args := append([]string{"agent", "--node", node, "--gpus", strconv.Itoa(gpus), "--nats-url", c.url(),
		"--work-dir", filepath.Join(c.dir, "work"), "--heartbeat", "200ms", "--expiry-grace", "500ms", "--kill-grace", "1s",
		"--addr", "127.0.0.1"}, extra...)
	cmd := exec.Command(bin.shockwave, args...)
	out := c.logFile("agent-" + node)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.agents[node] = cmd
	c.mu.Unlock()
	eventually(c.t, 10*time.Second, node+" joins", func() bool {
		return strings.Contains(c.read("agent-"+node), "joined")
	})
}

// killAgent sends SIGKILL to a node's agent.
func (c *cluster) killAgent(node string) {
	c.mu.Lock()
	cmd := c.agents[node]
	delete(c.agents, node)
	c.mu.Unlock()
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
}

func (c *cluster) stop() {
	c.mu.Lock()
	agents := c.agents
	c.agents = map[string]*exec.Cmd{}
	c.mu.Unlock()
	for _, cmd := range agents {
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, cmd := range agents {
		waitOrKill(cmd, 5*time.Second)
	}
	if c.coord != nil && c.coord.ProcessState == nil {
		_ = c.coord.Process.Signal(syscall.SIGTERM)
		waitOrKill(c.coord, 5*time.Second)
	}
	if c.nc != nil {
		c.nc.Close()
	}
	for _, f := range c.logs {
		f.Close()
	}
	if c.t.Failed() {
		names, _ := filepath.Glob(filepath.Join(c.dir, "*.log"))
		for _, path := range names {
			name := strings.TrimSuffix(filepath.Base(path), ".log")
			var keep []string
			for _, l := range strings.Split(c.read(name), "\n") {
				if !strings.Contains(l, "round=") || strings.Contains(l, "WRN") {
					keep = append(keep, l)
				}
			}
			c.t.Logf("%s log (tail, without rounds):\n%s", name, tail(strings.Join(keep, "\n"), 3000))
		}
	}
}

func waitOrKill(cmd *exec.Cmd, d time.Duration) {
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		_ = cmd.Process.Kill()
		<-done
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func (c *cluster) read(name string) string {
	data, _ := os.ReadFile(filepath.Join(c.dir, name+".log"))
	return string(data)
}

// output is a job's output log under the shared work dir.
func (c *cluster) output(job string) string {
	data, _ := os.ReadFile(filepath.Join(c.dir, "work", job, "output.log"))
	return string(data)
}

// finalOutput is job's output once its process printed its last line
// ("done:"), or after 10 s without it. A job counts as completed once it
// reports its last step, a moment before its process prints that line and
// saves its checkpoint, so the output read at once may lack it.
func (c *cluster) finalOutput(job string) string {
	deadline := time.Now().Add(10 * time.Second)
	for {
		out := c.output(job)
		if strings.Contains(out, "done:") || time.Now().After(deadline) {
			return out
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var startLine = regexp.MustCompile(`--- shockwave agent (\S+): attempt (\d+), grant of round (\d+)`)

// starts lists the nodes a job's processes were started on, in order.
func (c *cluster) starts(job string) []string {
	var nodes []string
	for _, m := range startLine.FindAllStringSubmatch(c.output(job), -1) {
		nodes = append(nodes, m[1])
	}
	return nodes
}

// shockwave runs the binary with args and returns stdout, stderr and the
// exit status.
func (c *cluster) shockwave(args ...string) (string, string, int) {
	cmd := exec.Command(bin.shockwave, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		c.t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// submit submits a command and returns the job id.
func (c *cluster) submit(flags []string, command ...string) string {
	args := append(append([]string{"submit", "--nats-url", c.url()}, c.auth...), flags...)
	out, errs, code := c.shockwave(append(append(args, "--"), command...)...)
	if code != 0 {
		c.t.Fatalf("submit %v: status %d: %s", command, code, errs)
	}
	return strings.TrimSpace(out)
}

// train is a go-train command line of epochs epochs.
func train(epochs int, step string) []string {
	return []string{bin.train, "--epochs", strconv.Itoa(epochs), "--samples", "1024", "--double-every", "2", "--step-time", step}
}

func (c *cluster) status() (*protocol.StatusReply, error) {
	m, err := c.nc.Request(c.subj.Status(), nil, 2*time.Second)
	if err != nil {
		return nil, err
	}
	rep, err := protocol.DecodeStatusReply(m.Data, 1<<30)
	if err == nil && rep.Error != nil {
		err = rep.Error
	}
	return rep, err
}

func (c *cluster) job(id string) protocol.JobInfo {
	rep, err := c.status()
	if err != nil {
		return protocol.JobInfo{}
	}
	for _, j := range rep.Jobs {
		if j.Job == id {
			return j
		}
	}
	return protocol.JobInfo{}
}

// waitState waits until job reaches state.
func (c *cluster) waitState(job, state string, d time.Duration) protocol.JobInfo {
	c.t.Helper()
	var last protocol.JobInfo
	eventually(c.t, d, job+" "+state, func() bool {
		last = c.job(job)
		return last.State == state
	})
	return last
}

// request sends v on subject and returns the raw reply.
func (c *cluster) request(subject string, v any) []byte {
	data, _ := json.Marshal(v)
	m, err := c.nc.Request(subject, data, 3*time.Second)
	if err != nil {
		c.t.Fatalf("request %s: %v", subject, err)
	}
	return m.Data
}

func eventually(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for: %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lines counts the lines of s that contain sub.
func lines(s, sub string) int {
	n := 0
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if strings.Contains(sc.Text(), sub) {
			n++
		}
	}
	return n
}

func (c *cluster) creds() bool {
	return strings.Contains(strings.Join(c.args, " "), "--auth creds")
}

// issue writes credentials from `shockwave creds issue ARGS` to file.
func (c *cluster) issue(file string, args ...string) string {
	path := filepath.Join(c.dir, file+".creds")
	eventually(c.t, 10*time.Second, "the credentials authority exists", func() bool {
		_, err := os.Stat(filepath.Join(c.dir, "data", "auth", "jobs.nk"))
		return err == nil
	})
	out, errs, code := c.shockwave(append([]string{"creds", "issue", "--data-dir", filepath.Join(c.dir, "data")}, args...)...)
	if code != 0 {
		c.t.Fatalf("creds issue %v: %s", args, errs)
	}
	if err := os.WriteFile(path, []byte(out), 0o600); err != nil {
		c.t.Fatal(err)
	}
	return path
}

func (c *cluster) issueAdmin() {
	f := c.issue("admin", "--admin", "admin")
	c.auth = []string{"--creds", f}
	c.natsOpt = []nats.Option{nats.UserCredentials(f)}
}

// connectWith connects with a .creds file and the inbox it allows.
func connectWith(t *testing.T, url, creds, inbox string) *nats.Conn {
	errs := make(chan error, 16)
	nc, err := nats.Connect(url, nats.UserCredentials(creds), nats.CustomInboxPrefix(inbox),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	denied[nc] = errs
	return nc
}

var denied = map[*nats.Conn]chan error{}

// assertDenied publishes v on subject and expects the server to refuse it
// with a permissions violation (and no answer to come).
func assertDenied(t *testing.T, nc *nats.Conn, subject string, v any) {
	t.Helper()
	data, _ := json.Marshal(v)
	errs := denied[nc]
	for len(errs) > 0 {
		<-errs
	}
	_, err := nc.Request(subject, data, time.Second)
	if err == nil {
		t.Errorf("publishing on %s was answered; want a permissions violation", subject)
		return
	}
	select {
	case perr := <-errs:
		if !strings.Contains(strings.ToLower(perr.Error()), "permissions violation") {
			t.Errorf("publishing on %s: %v", subject, perr)
		}
	case <-time.After(2 * time.Second):
		t.Errorf("publishing on %s: no permissions violation (request: %v)", subject, err)
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// children lists the pids whose parent is node's agent.
func (c *cluster) children(node string) []int {
	c.mu.Lock()
	cmd := c.agents[node]
	c.mu.Unlock()
	var pids []int
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range stats {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces, so cut at the last ')'
		s := string(data)
		rest := s[strings.LastIndexByte(s, ')')+2:]
		f := strings.Fields(rest)
		if len(f) > 1 && f[1] == strconv.Itoa(cmd.Process.Pid) {
			pid, _ := strconv.Atoi(strings.Fields(s)[0])
			pids = append(pids, pid)
		}
	}
	return pids
}
