package coordinator

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/protocol"
)

// A node agent tells an uplinked process whether to connect itself (the
// coordinator takes no registrations through agents) or to retry (no
// coordinator leads: a failover) by whether its heartbeat meets "no
// responders" too (agent/uplink.go). In none and token mode the agent's
// requests cross from the jobs' account through a service import; with no
// coordinator subscribed the server must still answer "no responders"
// there, at once, rather than let the request time out.
func TestLocalAuth_WithNoCoordinatorAnAgentsRequestsMeetNoResponders(t *testing.T) {
	for _, mode := range []string{"none", "token"} {
		t.Run(mode, func(t *testing.T) {
			cfg := EmbeddedConfig{DataDir: t.TempDir(), DontListen: true}
			var opts []nats.Option
			if mode == "token" {
				cfg.Auth, cfg.Token, cfg.DontListen, cfg.Listen = AuthToken, "job-token", false, "127.0.0.1:-1"
				opts = append(opts, nats.Token("job-token"))
			}
			emb, err := StartEmbedded(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(emb.Shutdown)
			nc, err := nats.Connect("", append([]nats.Option{nats.InProcessServer(emb.Server)}, opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(nc.Close)
			subj := protocol.Subjects{Prefix: protocol.DefaultPrefix}
			for _, subject := range []string{subj.AgentRegister("n0"), subj.AgentHeartbeat("n0")} {
				if _, err := nc.Request(subject, []byte("{}"), 5*time.Second); !errors.Is(err, nats.ErrNoResponders) {
					t.Errorf("request on %s with no coordinator: %v, want no responders", subject, err)
				}
			}
		})
	}
}
