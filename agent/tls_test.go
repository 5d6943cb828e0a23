package agent_test

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/shockwave-sched/shockwave/coordinator"
	"github.com/shockwave-sched/shockwave/internal/testpki"
	"github.com/shockwave-sched/shockwave/protocol"
)

// A coordinator with mutual TLS admits only clients holding a certificate
// of its CA: the agent, the submitter and the jobs the agent starts (with
// the job certificate the agent passes on) all present one; an agent or a
// submitter without one is refused.
func TestMutualTLS_AgentSubmitAndJobsConnectWithClientCertificatesAndOthersAreRefused(t *testing.T) {
	pki := t.TempDir()
	ca := testpki.NewCA(t, pki, "ca")
	srvCert, srvKey := ca.Issue(t, pki, "server")
	agentCert, agentKey := ca.Issue(t, pki, "agent")
	jobCert, jobKey := ca.Issue(t, pki, "job")
	adminCert, adminKey := ca.Issue(t, pki, "admin")
	c := &cluster{t: t, dir: t.TempDir(), port: freePort(t), agents: map[string]*exec.Cmd{},
		args:    []string{"--gpus", "1", "--tls-cert", srvCert, "--tls-key", srvKey, "--tls-ca", ca.File},
		natsOpt: coordinator.ClientTLSOptions(ca.File, adminCert, adminKey),
		auth:    []string{"--tls-ca", ca.File, "--tls-cert", adminCert, "--tls-key", adminKey}}
	c.subj, _ = protocol.NewSubjects(protocol.DefaultPrefix)
	c.startCoordinator()
	t.Cleanup(c.stop)

	c.startAgent("node-0", 1, "--tls-ca", ca.File, "--tls-cert", agentCert, "--tls-key", agentKey,
		"--job-tls-cert", jobCert, "--job-tls-key", jobKey)
	id := c.submit(nil, train(2, "2ms")...)
	defer func() {
		if t.Failed() {
			t.Logf("job output:\n%s", tail(c.output(id), 20))
		}
	}()
	c.waitState(id, "completed", 60*time.Second)

	_, errs, code := c.shockwave("agent", "--node", "n2", "--gpus", "1", "--nats-url", c.url(),
		"--tls-ca", ca.File, "--timeout", "2s", "--work-dir", t.TempDir())
	if code == 0 || !strings.Contains(errs, "connecting") {
		t.Errorf("an agent without a client certificate: status %d, %s", code, tail(errs, 5))
	}
	_, errs, code = c.shockwave("submit", "--nats-url", c.url(), "--tls-ca", ca.File, "--timeout", "2s", "--", "true")
	if code == 0 || !strings.Contains(errs, "connecting") {
		t.Errorf("a submitter without a client certificate: status %d, %s", code, tail(errs, 5))
	}
	_, errs, code = c.shockwave("agent", "--node", "n3", "--nats-url", c.url(), "--tls-ca", ca.File,
		"--job-tls-cert", jobCert, "--work-dir", t.TempDir())
	if code != 2 || !strings.Contains(errs, "--job-tls-key") {
		t.Errorf("--job-tls-cert without --job-tls-key: status %d, %s; want 2 naming the flag", code, tail(errs, 5))
	}
	if rep, err := c.status(); err != nil || len(rep.Nodes) != 1 {
		t.Errorf("after the refusals: %v, nodes %+v; want node-0 alone", err, rep)
	}
}
