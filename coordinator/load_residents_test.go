package coordinator

import (
	"fmt"
	"maps"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/protocol"
)

// The load test's resident jobs through their node's agent
// (SHOCKWAVE_LOAD_AGENTS=resident): the issue's own load, 10,000 jobs each
// with a process that sends one batch a second whether it holds GPUs or
// not, but every process resident on a node of 8 GPUs and reaching the
// coordinator through that node's agent (its job socket, docs/agent.md),
// so that the NATS server holds one connection a node instead of one a
// job. The child processes act as the agents, as in the agents scenario
// (load_agents_test.go), and nobody submits anything: each agent, once
// joined, registers its node's residents on its node's subject (job j
// lives on node j mod nodes), subscribes to each one's leases on its own
// connection and forwards them (a function call here, a socket line under
// `shockwave agent`), and publishes each one's batches on its node's
// events subject. The service runs with AgentsCarryResidents, as
// `shockwave coordinator` does in none and token mode.

// loadResidentsMode says whether the agents carry resident jobs rather
// than run submitted ones.
func loadResidentsMode() bool { return os.Getenv("SHOCKWAVE_LOAD_AGENTS") == "resident" }

// runResidents runs the residents of node index i of nodes: the jobs j < jobs
// with j mod nodes = i. Their processes start once the history phase, if
// any, has ended (waitLoadGate); the agent goes on meanwhile.
func (a *loadAgent) runResidents(i, nodes, jobs int) {
	a.residents = map[string]*residentRun{}
	for j := i; j < jobs; j += nodes {
		a.residents[fmt.Sprintf("job-%04d", j)] = &residentRun{}
	}
	runs := maps.Clone(a.residents)
	go func() {
		waitLoadGate()
		for j := i; j < jobs; j += nodes {
			id := fmt.Sprintf("job-%04d", j)
			go a.residentJob(id, 1+j%2, time.Duration(j)*time.Second/time.Duration(jobs), runs[id])
		}
	}()
}

// residentRun is what a resident's process knows of its lease: whether it
// runs, set from the leases its agent relays (the desired state's
// residents, a line in its socket under `shockwave agent`) or, when not
// relayed, from its lease subject; relayed is the agent loop's own.
type residentRun struct {
	running atomic.Bool
	relayed bool
}

// relayResidents follows a desired state's residents as the agent's job
// socket does: a listed job runs; a job whose RUN was relayed and that is
// no longer listed gets a SUSPEND (it stops making progress).
func (a *loadAgent) relayResidents(d *protocol.NodeDesired) {
	if a.residents == nil {
		return
	}
	listed := make(map[string]bool, len(d.Residents))
	for _, l := range d.Residents {
		listed[l.Job] = true
	}
	for id, r := range a.residents {
		switch {
		case listed[id]:
			r.running.Store(true)
			r.relayed = true
		case r.relayed:
			r.running.Store(false)
			r.relayed = false
		}
	}
}

// residentJob is a resident job's process as its agent carries it:
// registered through the agent as relayed, its RUN leases taken from the
// node's desired states and the others (EXIT) from the agent's
// subscription to its lease subject, one batch a second (progress while its lease is RUN) on
// the node's events subject, confirmed every 30th by a round trip of the
// agent's connection as the agent answers the SDK's flush.
func (a *loadAgent) residentJob(id string, workers int, phase time.Duration, st *residentRun) {
	running := &st.running
	stop := make(chan struct{})
	var once sync.Once
	if _, err := a.nc.Subscribe(a.subj.Lease(id), func(m *nats.Msg) {
		l, err := protocol.DecodeLease(m.Data, 0)
		if err != nil || l.Job != id {
			return
		}
		switch l.Action {
		case protocol.Run:
			running.Store(true)
		case protocol.Suspend:
			running.Store(false)
		case protocol.Exit:
			once.Do(func() { close(stop) })
		}
	}); err != nil {
		fmt.Fprintf(os.Stderr, "job %s: %v\n", id, err)
		return
	}
	r := newJob(id, workers)
	r.Node, r.Relayed = a.node, true // the agent marks what it relays
	rep := a.registerVia(r)
	if rep == nil {
		return
	}
	if rep.Lease != nil && rep.Lease.Action == protocol.Run {
		running.Store(true)
	}
	seq, done := rep.LastSeq, rep.StepsDone
	select {
	case <-time.After(phase):
	case <-stop:
		return
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		seq++
		var m *nats.Msg
		m, done = loadBatch(a.subj.AgentEvents(a.node), id, seq, done, r.TotalSteps, running.Load())
		m.Header.Set(protocol.HdrJob, id)
		if err := a.nc.PublishMsg(m); err != nil {
			return
		}
		if seq%30 == 0 {
			_ = a.nc.FlushTimeout(10 * time.Second)
		}
	}
}
