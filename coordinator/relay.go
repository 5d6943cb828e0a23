package coordinator

import (
	"github.com/shockwave-sched/shockwave/protocol"
)

// Leases relayed by node agents (docs/agent.md, "Leases relayed by the
// agent").
//
// A round's cost at scale is one delivery per lease sent. A node agent that
// relays (AgentHello.Relay) finds each job's current RUN lease in its
// node's desired state (Assignment.Lease), which it receives every round
// anyway, and writes it to the processes it started through a pipe; when a
// job leaves its desired state it writes them a SUSPEND. For a submitted
// job whose registered process reads that pipe (Register.Relayed) and
// whose rank-0 node relays, the coordinator then publishes no RUN or
// SUSPEND lease of a round on the job's subject: one message per node
// replaces one per job. EXIT leases, the leases an event produces
// (re-suspensions, the end of a job) and the registration reply's lease
// still go over NATS. A relayed lease carries the leader's fencing epoch as
// a published one does.
//
// A submitted job no process of which has registered yet (the agent has
// not started it, or it is still starting) has nobody on its lease
// subject: when its process registers, the reply carries the job's
// current lease, and a relaying agent writes it into the pipe as well.
// Its rounds' RUN and SUSPEND leases are held, not published, whatever
// its node's agent: in the rounds that start jobs for the first time that
// is one message saved per job started. Once a process registered, its
// leases are published or relayed as above.
//
// What decides it is in the log: registrations, joins and the rounds'
// leases, so a replay relays the same leases. A snapshot does not carry the
// registrations' flag: after a restart from a snapshot, jobs get their
// leases over NATS as well until they register again, which costs
// messages, never a lease.

// relaysOn says whether node's agent relays leases.
func (f *fold) relaysOn(node string) bool {
	h, ok := f.run.nodes[node]
	return ok && h.Relay
}

// relayedBy says whether job's process takes its leases from the agent
// of the node its rank 0 runs on in grant: a submitted job whose
// registration said so, placed with its first node on a relaying agent;
// or a resident job that registered as relayed through its node's agent
// (the job socket), when that agent relays.
func (f *fold) relayedBy(job string, grant protocol.Lease) bool {
	if !f.relayedReg[job] {
		return false
	}
	if _, managed := f.core.Managed(job); !managed {
		_, ok := f.relayedResident(job)
		return ok
	}
	nodes := f.leaseNodes(grant)
	return len(nodes) > 0 && f.relaysOn(nodes[0].Node)
}

// markRelayed records which of a round's RUN and SUSPEND leases reach
// their jobs through agents: a RUN lease by its own grant, a SUSPEND by
// the grant it ends (prev: the RUN leases of the round before).
func (f *fold) markRelayed(round *Round, prev map[string]protocol.Lease) {
	clear(f.relayed)
	clear(f.unheard)
	for _, l := range round.Leases {
		if l.Action != protocol.Exit && f.core.Unheard(l.Job) {
			f.unheard[l.Job] = true
			continue
		}
		switch l.Action {
		case protocol.Run:
			if f.relayedBy(l.Job, l) {
				f.relayed[l.Job] = true
			}
		case protocol.Suspend:
			if p, ok := prev[l.Job]; ok && f.relayedBy(l.Job, p) {
				f.relayed[l.Job] = true
			}
		}
	}
}

// toPublish returns a round's leases to publish: all but those agents
// relay and those held (no process to go to), which it counts.
func (f *fold) toPublish(leases []protocol.Lease) (send []protocol.Lease, relayed, held int) {
	if len(f.relayed) == 0 && len(f.unheard) == 0 {
		return leases, 0, 0
	}
	send = make([]protocol.Lease, 0, len(leases))
	for _, l := range leases {
		switch {
		case l.Action == protocol.Exit:
			send = append(send, l)
		case f.relayed[l.Job]:
			relayed++
		case f.unheard[l.Job]:
			held++
		default:
			send = append(send, l)
		}
	}
	return send, relayed, held
}

// annotate marks in a status reply the nodes whose agents relay and the
// jobs whose leases of the most recent round were relayed or held.
func (f *fold) annotate(nodes []protocol.NodeInfo, jobs []protocol.JobInfo) {
	for i := range nodes {
		nodes[i].Relay = f.relaysOn(nodes[i].Name)
	}
	for i := range jobs {
		switch {
		case f.relayed[jobs[i].Job]:
			jobs[i].Leases = "relayed"
		case f.unheard[jobs[i].Job]:
			jobs[i].Leases = "held"
		}
	}
}

// relayedResident says whether job is a resident job whose leases its
// node's agent relays (into the job socket), and names the node. Only a
// registration an agent carried marks a job that nobody submitted as
// relayed (register), and an agent carries only its own node's residents
// (vouches).
func (f *fold) relayedResident(job string) (string, bool) {
	if !f.relayedReg[job] {
		return "", false
	}
	if _, ok := f.run.subs[job]; ok {
		return "", false
	}
	node := f.core.ResidentNode(job)
	return node, node != "" && f.relaysOn(node)
}
