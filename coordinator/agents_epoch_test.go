package coordinator

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/shockwave-sched/shockwave/protocol"
)

// TestAgents_DesiredStatesCarryTheLeadersEpoch: the answers to a join and to
// a heartbeat carry the leader's fencing epoch, so that agents can ignore a
// deposed leader (agent.TestAgent_StatesOfADeposedLeaderAreIgnored).
func TestAgents_DesiredStatesCarryTheLeadersEpoch(t *testing.T) {
	e := newEnv(t, 0, func(_ *EmbeddedConfig, s *ServiceConfig) { s.Core.Dynamic = true })
	nc := e.client()
	hello, _ := json.Marshal(protocol.AgentHello{V: protocol.Version, Node: "n0", GPUs: 2})
	ask := func(subject string) *protocol.NodeDesired {
		t.Helper()
		m, err := nc.Request(subject, hello, 5*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", subject, err)
		}
		rep, err := protocol.DecodeAgentReply(m.Data, 1<<20)
		if err != nil || rep.Error != nil || rep.Desired == nil {
			t.Fatalf("%s: %v %+v", subject, err, rep)
		}
		return rep.Desired
	}
	epoch := e.svc.Health().Epoch
	if epoch == 0 {
		t.Fatal("the leader has no epoch")
	}
	if d := ask(e.subj.AgentJoin("n0")); d.Epoch != epoch {
		t.Errorf("join answer: epoch %d, want the leader's %d", d.Epoch, epoch)
	}
	if d := ask(e.subj.AgentHeartbeat("n0")); d.Epoch != epoch {
		t.Errorf("heartbeat answer: epoch %d, want the leader's %d", d.Epoch, epoch)
	}
}
