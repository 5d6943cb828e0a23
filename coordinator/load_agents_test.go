package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/protocol"
)

// The load test with node agents (SHOCKWAVE_LOAD_AGENTS=1): the jobs are
// submitted, and child processes act as the node agents of 8-GPU nodes
// that relay leases (AgentHello.Relay). Each agent joins, sends a heartbeat
// every 2 s and follows its node's desired state as `shockwave agent`
// does, except that a job's process is a goroutine of the child: it
// registers as relayed and sends one batch a second while it runs through
// its agent's connection, on the node's subjects (the uplink; the socket of
// a real agent is a function call here), takes its leases from the agent
// (the pipe is a channel here); a SUSPEND from its agent ends it, as in
// EXIT mode. With SHOCKWAVE_LOAD_UPLINK=0 each process opens its own NATS
// connection instead and registers and publishes as a job, as before the
// uplink.
// So only the jobs granted GPUs have a process and send events, as with
// `shockwave agent`; the coordinator publishes one desired state per node
// a round instead of the relayed jobs' leases.

// loadAgentsMode says whether the load test runs with agents.
func loadAgentsMode() bool { return os.Getenv("SHOCKWAVE_LOAD_AGENTS") != "" }

// loadUplink says whether the agents' processes send through their agent
// (the uplink, as under `shockwave agent`) rather than over connections of
// their own (SHOCKWAVE_LOAD_UPLINK=0, as before the uplink).
func loadUplink() bool { return os.Getenv("SHOCKWAVE_LOAD_UPLINK") != "0" }

// loadNodeGPUs is the GPUs of a node of the agents' load test.
const loadNodeGPUs = 8

// startLoadAgents submits jobs jobs and starts child processes that run
// the agents of gpus/8 nodes between them.
// history runs once the agents' processes started, before any job is
// submitted or any resident registers (the history phase,
// load_history_test.go).
func startLoadAgents(t *testing.T, nc *nats.Conn, url string, jobs, gpus, procs int, history func()) (children []*exec.Cmd, exited <-chan error) {
	nodes := gpus / loadNodeGPUs
	gate := filepath.Join(t.TempDir(), "history-done")
	procs = max(1, min(procs, nodes))
	ended := make(chan error, procs)
	for p := range procs {
		lo, hi := p*nodes/procs, (p+1)*nodes/procs
		c := loadClusterChild(t, "TestLoad_AgentsChild")
		c.Env = append(os.Environ(), "SHOCKWAVE_LOAD_AGENT_CHILD="+url, fmt.Sprintf("SHOCKWAVE_LOAD_RANGE=%d-%d", lo, hi),
			fmt.Sprintf("SHOCKWAVE_LOAD_NODES=%d", nodes), fmt.Sprintf("SHOCKWAVE_LOAD_JOBS=%d", jobs), "SHOCKWAVE_LOAD_GATE="+gate)
		c.Stdout, c.Stderr = os.Stderr, os.Stderr
		holdStdin(t, c)
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { ended <- fmt.Errorf("agents process %d: %v", c.Process.Pid, c.Wait()) }()
		children = append(children, c)
	}
	history()
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if loadResidentsMode() {
		return children, ended // the agents register their residents (load_residents_test.go)
	}
	subj := protocol.Subjects{Prefix: protocol.DefaultPrefix}
	ids := make(chan int)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := range ids {
				s := protocol.Submit{V: protocol.Version, Job: fmt.Sprintf("job-%04d", i), Command: []string{"train"}, Workers: 1 + i%2}
				data, _ := json.Marshal(s)
				for try := 0; ; try++ {
					m, err := nc.Request(subj.Submit(), data, 10*time.Second)
					if err == nil {
						if rep, err := protocol.DecodeSubmitReply(m.Data, 1<<20); err == nil && rep.Error == nil {
							break
						}
					}
					if try == 5 {
						t.Errorf("cannot submit %s: %v", s.Job, err)
						break
					}
				}
			}
		})
	}
	for i := range jobs {
		ids <- i
	}
	close(ids)
	wg.Wait()
	return children, ended
}

// TestLoad_AgentsChild is an agents' process of the load test.
func TestLoad_AgentsChild(t *testing.T) {
	url := os.Getenv("SHOCKWAVE_LOAD_AGENT_CHILD")
	if url == "" {
		t.Skip("started by TestLoad_ManyJobsOneEventPerSecond with SHOCKWAVE_LOAD_AGENTS=1")
	}
	exitWithParent()
	var lo, hi int
	if _, err := fmt.Sscanf(os.Getenv("SHOCKWAVE_LOAD_RANGE"), "%d-%d", &lo, &hi); err != nil || lo < 0 || lo >= hi {
		t.Fatalf("SHOCKWAVE_LOAD_RANGE=%q: want LO-HI", os.Getenv("SHOCKWAVE_LOAD_RANGE"))
	}
	subj := protocol.Subjects{Prefix: protocol.DefaultPrefix}
	var wg sync.WaitGroup
	for i := lo; i < hi; i++ {
		nc, err := nats.Connect(url, nats.MaxReconnects(-1))
		if err != nil {
			t.Fatal(err)
		}
		a := &loadAgent{t: t, url: url, subj: subj, nc: nc, node: fmt.Sprintf("node-%d", i), runs: map[string]*loadRun{}}
		if loadResidentsMode() {
			a.joined = func() { a.runResidents(i, envInt("SHOCKWAVE_LOAD_NODES", 0), envInt("SHOCKWAVE_LOAD_JOBS", 0)) }
		}
		wg.Go(a.run)
	}
	wg.Wait()
}

// loadAgent is one node's agent in the load test.
type loadAgent struct {
	t    *testing.T
	url  string
	subj protocol.Subjects
	nc   *nats.Conn
	node string
	last *protocol.NodeDesired
	runs map[string]*loadRun // by job/attempt/since
	// joined, when set, runs once the agent has joined (the residents).
	joined func()
	// residents are the node's resident jobs (load_residents_test.go).
	residents map[string]*residentRun
}

// loadRun is a job's process started by a load test agent: the latest
// lease its agent relayed (a one-slot mailbox, like the agent's pipe
// writer) and whether a SUSPEND was sent.
type loadRun struct {
	job       string
	leases    chan protocol.Lease
	suspended bool
}

func (a *loadAgent) run() {
	// Only the latest desired state matters (apply skips older ones), so
	// a full mailbox drops its oldest: a blocking send here once deadlocked
	// an agent whose join reply came while its mailbox was full.
	desired := make(chan *protocol.NodeDesired, 16)
	offer := func(d *protocol.NodeDesired) {
		for {
			select {
			case desired <- d:
				return
			default:
				select {
				case <-desired:
				default:
				}
			}
		}
	}
	if _, err := a.nc.Subscribe(a.subj.Desired(a.node), func(m *nats.Msg) {
		if d, err := protocol.DecodeNodeDesired(m.Data, 64<<20); err == nil {
			offer(d)
		}
	}); err != nil {
		a.t.Error(err)
		return
	}
	hello, _ := json.Marshal(protocol.AgentHello{V: protocol.Version, Node: a.node, GPUs: loadNodeGPUs, Relay: true})
	ask := func(subject string) {
		m, err := a.nc.Request(subject, hello, 10*time.Second)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %s: %v\n", a.node, subject, err)
			return
		}
		rep, err := protocol.DecodeAgentReply(m.Data, 64<<20)
		switch {
		case err != nil:
			fmt.Fprintf(os.Stderr, "%s: %s: %v\n", a.node, subject, err)
		case rep.Error != nil && rep.Error.Code == protocol.CodeUnknownNode: // timed out: join again, as the agent does
			fmt.Fprintf(os.Stderr, "%s: %v; joining again\n", a.node, rep.Error)
			if m, err := a.nc.Request(a.subj.AgentJoin(a.node), hello, 10*time.Second); err == nil {
				if rep, err := protocol.DecodeAgentReply(m.Data, 64<<20); err == nil && rep.Desired != nil {
					offer(rep.Desired)
				}
			}
		case rep.Error != nil:
			fmt.Fprintf(os.Stderr, "%s: %s: %v\n", a.node, subject, rep.Error)
		case rep.Desired != nil:
			offer(rep.Desired)
		}
	}
	for a.last == nil {
		ask(a.subj.AgentJoin(a.node))
		select {
		case d := <-desired:
			a.apply(d)
		case <-time.After(time.Second):
		}
	}
	if a.joined != nil {
		a.joined()
	}
	beat := time.NewTicker(2 * time.Second)
	for {
		select {
		case <-beat.C:
			go ask(a.subj.AgentHeartbeat(a.node))
		case d := <-desired:
			if d.Epoch > a.last.Epoch || (d.Epoch == a.last.Epoch && d.Now >= a.last.Now) {
				a.apply(d)
			}
		}
	}
}

// apply follows a desired state as the agent does: new assignments start
// a process, wanted ones get their lease, the others a SUSPEND.
func (a *loadAgent) apply(d *protocol.NodeDesired) {
	a.last = d
	a.relayResidents(d)
	want := map[string]bool{}
	for _, as := range d.Jobs {
		key := fmt.Sprintf("%s/%d/%d", as.Job, as.Attempt, as.Since)
		want[key] = true
		r := a.runs[key]
		if r == nil {
			r = &loadRun{job: as.Job, leases: make(chan protocol.Lease, 1)}
			a.runs[key] = r
			if loadUplink() {
				go a.uplinkJob(as.Job, len(as.Devices), r.leases)
			} else {
				go loadRelayedJob(a.url, a.subj, as.Job, len(as.Devices), r.leases)
			}
		}
		if as.Lease != nil {
			relay(r.leases, *as.Lease)
		}
	}
	for key, r := range a.runs {
		if want[key] {
			continue
		}
		if !r.suspended {
			relay(r.leases, protocol.Lease{V: protocol.Version, Job: r.job, Round: d.Round, Action: protocol.Suspend,
				Epoch: d.Epoch, Start: d.Now, Expiry: d.Now, Reason: "not granted on " + a.node})
			r.suspended = true
		}
		delete(a.runs, key)
	}
}

// relay puts l into a one-slot mailbox, replacing what the process has
// not taken yet.
func relay(box chan protocol.Lease, l protocol.Lease) {
	for {
		select {
		case box <- l:
			return
		default:
			select {
			case <-box:
			default:
			}
		}
	}
}

// loadRelayedJob is a job's process under a relaying agent: it connects,
// registers as relayed, and sends one batch a second (progress while its
// relayed lease is RUN) until its agent relays a SUSPEND.
func loadRelayedJob(url string, subj protocol.Subjects, id string, workers int, leases <-chan protocol.Lease) {
	nc, err := nats.Connect(url, nats.MaxReconnects(-1))
	if err != nil {
		fmt.Fprintf(os.Stderr, "job %s: %v\n", id, err)
		return
	}
	defer nc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// EXIT leases still come on the job's subject, as to the SDK.
	if _, err := nc.Subscribe(subj.Lease(id), func(m *nats.Msg) {
		if l, err := protocol.DecodeLease(m.Data, 0); err == nil && l.Action == protocol.Exit {
			cancel()
		}
	}); err != nil {
		return
	}
	r := newJob(id, workers)
	r.Relayed = true
	data, _ := json.Marshal(r)
	var rep *protocol.RegisterReply
	for rep == nil {
		m, err := nc.Request(subj.Register(), data, 10*time.Second)
		if err != nil {
			continue
		}
		if rep, err = protocol.DecodeRegisterReply(m.Data, 1<<20); err != nil || rep.Error != nil {
			fmt.Fprintf(os.Stderr, "job %s: registration: %v %+v\n", id, err, rep)
			return
		}
	}
	loadSend(id, r.TotalSteps, rep, leases, func(m *nats.Msg, confirm bool) error {
		m.Subject = subj.Events(id)
		if err := nc.PublishMsg(m); err != nil {
			return err
		}
		if confirm {
			_ = nc.FlushTimeout(10 * time.Second)
		}
		return nil
	}, ctx.Done())
}

// loadSend sends a relayed job's batches, one a second, through send
// (confirm: every 30th, as the SDK confirms), until a relayed SUSPEND, or
// until stop (an EXIT lease) is closed.
func loadSend(id string, total int64, rep *protocol.RegisterReply, leases <-chan protocol.Lease,
	send func(m *nats.Msg, confirm bool) error, stop <-chan struct{}) {
	running := rep.Lease != nil && rep.Lease.Action == protocol.Run
	seq, done := rep.LastSeq, rep.StepsDone
	// A batch a second from a phase of the job's own, as the resident jobs'
	// (loadJob): the jobs a round starts would otherwise all send within the
	// same millisecond every second, in step with the rounds, which real
	// training loops are not.
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	select {
	case <-time.After(time.Duration(h.Sum32()%1000) * time.Millisecond):
	case <-stop:
		return
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case l := <-leases:
			if l.Action != protocol.Run {
				return // EXIT mode: checkpoint and exit
			}
			running = true
		case <-tick.C:
			seq++
			var m *nats.Msg
			m, done = loadBatch("", id, seq, done, total, running) // send names the subject
			if send(m, seq%30 == 0) != nil {
				return
			}
		}
	}
}

// uplinkJob is a job's process under an agent that carries its traffic
// (the uplink): it registers and sends its batches through its agent's
// connection, on the node's subjects, and opens none of its own. The
// agent confirms every 30th batch with a round trip, as it answers the
// SDK's flush.
func (a *loadAgent) uplinkJob(id string, workers int, leases <-chan protocol.Lease) {
	r := newJob(id, workers)
	r.Relayed = true
	rep := a.registerVia(r)
	if rep == nil {
		return
	}
	loadSend(id, r.TotalSteps, rep, leases, func(m *nats.Msg, confirm bool) error {
		m.Subject = a.subj.AgentEvents(a.node)
		m.Header.Set(protocol.HdrJob, id)
		if err := a.nc.PublishMsg(m); err != nil {
			return err
		}
		if confirm {
			_ = a.nc.FlushTimeout(10 * time.Second)
		}
		return nil
	}, nil)
}

// registerVia registers r through the agent (its node's register subject),
// retrying until the coordinator answers; nil when it refuses.
func (a *loadAgent) registerVia(r protocol.Register) *protocol.RegisterReply {
	data, _ := json.Marshal(r)
	for {
		m, err := a.nc.Request(a.subj.AgentRegister(a.node), data, 10*time.Second)
		if err != nil {
			continue
		}
		rep, err := protocol.DecodeRegisterReply(m.Data, 1<<20)
		if err != nil || rep.Error != nil {
			fmt.Fprintf(os.Stderr, "job %s: registration via %s: %v %+v\n", r.Job, a.node, err, rep)
			return nil
		}
		return rep
	}
}
