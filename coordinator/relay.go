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
// registration said so, placed with its first node on a relaying agent.
func (f *fold) relayedBy(job string, grant protocol.Lease) bool {
	if !f.relayedReg[job] {
		return false
	}
	if _, managed := f.core.Managed(job); !managed {
		return false
	}
	nodes := f.leaseNodes(grant)
	return len(nodes) > 0 && f.relaysOn(nodes[0].Node)
}

// markRelayed records which of a round's RUN and SUSPEND leases reach
// their jobs through agents: a RUN lease by its own grant, a SUSPEND by
// the grant it ends (prev: the RUN leases of the round before).
func (f *fold) markRelayed(round *Round, prev map[string]protocol.Lease) {
	clear(f.relayed)
	for _, l := range round.Leases {
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

// withoutRelayed drops from a round's leases to send those agents relay.
func (f *fold) withoutRelayed(leases []protocol.Lease) []protocol.Lease {
	if len(f.relayed) == 0 {
		return leases
	}
	out := make([]protocol.Lease, 0, len(leases))
	for _, l := range leases {
		if l.Action == protocol.Exit || !f.relayed[l.Job] {
			out = append(out, l)
		}
	}
	return out
}
