package coordinator

import (
	"time"

	"github.com/nats-io/jwt/v2"

	"github.com/shockwave-sched/shockwave/protocol"
)

// Agent credentials (AuthCreds). A node agent is a COORD-account user
// whose permissions cover its own node only: it may publish its join,
// heartbeats, reports and credential requests on <prefix>.agent.<node>.*,
// and subscribe to its node's desired state and its own inbox. It may not
// publish job events or registrations (it cannot act as a job), nor the
// log, the JetStream API, leases or another node's subjects (it cannot act
// as the coordinator or another agent). The coordinator gives it the
// credentials of a job only while that job is placed on its node.

// AgentPermissions are the permissions of node's agent credentials.
func AgentPermissions(s protocol.Subjects, node string) *jwt.Permissions {
	p := &jwt.Permissions{}
	p.Pub.Allow.Add(s.AgentAll(node))
	p.Sub.Allow.Add(s.Desired(node), s.AgentInbox(node)+".>")
	return p
}

// IssueAgent returns a .creds file for node's agent. ttl 0 means no
// expiry. The agent must connect with nats.CustomInboxPrefix(
// s.AgentInbox(node)), as its credentials allow no other inbox.
func (a *Authority) IssueAgent(s protocol.Subjects, node string, ttl time.Duration) ([]byte, error) {
	if err := protocol.ValidateNodeName("credentials", "node", node); err != nil {
		return nil, err
	}
	tok, seed, err := user(a.coord, "agent-"+node, AgentPermissions(s, node), ttl)
	if err != nil {
		return nil, err
	}
	return jwt.FormatUserConfig(tok, seed)
}
