package coordinator

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/shockwave-sched/shockwave/protocol"
)

// In none and token mode the embedded server still keeps jobs away from
// the log: the coordinator's own account (the global one, which holds the
// JetStream log and buckets) exports the register, events and lease subjects
// to a JOBS account without JetStream, and every client that does not present
// the coordinator's or the administrator's secret lands in JOBS with
// permissions for those subjects only. A job can therefore never publish a
// log control record (<prefix>.log.*), call the JetStream API (purge or
// delete the log, the snapshot or the leader bucket) or publish a lease.
//
// The coordinator's and the administrator's secrets are generated once per
// data directory (auth/coordinator.secret and auth/admin.secret, mode 0600);
// clients present them as a NATS token. The shared job token of token mode is
// for jobs only.

// Files of the per-data-directory secrets.
const (
	coordinatorSecretFile = "coordinator.secret"
	adminSecretFile       = "admin.secret"
)

// localJobsAccount is the account of jobs in none and token mode.
const localJobsAccount = "JOBS"

// localAuth authenticates the clients of the embedded server in none and
// token mode.
type localAuth struct {
	mode        AuthMode
	token       []byte // the jobs' shared token (token mode)
	coordSecret []byte
	adminSecret []byte
	jobs        *server.Account
	jobPerms    *server.Permissions
	adminPerms  *server.Permissions
	// linked is closed once the JOBS account's imports exist: until then
	// a job's publications would reach no one (an SDK reconnecting right
	// after a restart would lose its buffered events), so Check waits.
	linked   chan struct{}
	linkOnce sync.Once
	linkOK   bool // written before linked is closed
	// guard refuses job connections from an address in a flood cooldown
	// (set before the server starts; nil: none).
	guard *floodGuard
}

// remoteHost is the address a client connects from, as the server's
// connection list shows it ("" for an in-process connection).
func remoteHost(c server.ClientAuthentication) string {
	switch a := c.RemoteAddress().(type) {
	case nil:
		return ""
	case *net.TCPAddr:
		return a.IP.String()
	default:
		host, _, err := net.SplitHostPort(a.String())
		if err != nil {
			return ""
		}
		return host
	}
}

// loadSecret reads a secret from dir/name, creating it when missing.
func loadSecret(dir, name string) ([]byte, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("coordinator: secrets: %w", err)
	}
	path := filepath.Join(dir, name)
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		buf := make([]byte, 32)
		if _, err := rand.Read(buf); err != nil {
			return nil, err
		}
		raw = []byte(hex.EncodeToString(buf) + "\n")
		if err := os.WriteFile(path, raw, 0o600); err != nil {
			return nil, fmt.Errorf("coordinator: secrets: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("coordinator: secrets: %w", err)
	}
	s := strings.TrimSpace(string(raw))
	if len(s) < 32 {
		return nil, fmt.Errorf("coordinator: secret %s is too short (%d characters, want at least 32)", path, len(s))
	}
	return []byte(s), nil
}

// setupLocalAuth configures opts for none or token mode.
func setupLocalAuth(opts *server.Options, cfg EmbeddedConfig, subj protocol.Subjects) (*localAuth, error) {
	dir := filepath.Join(cfg.DataDir, "auth")
	a := &localAuth{mode: cfg.Auth, linked: make(chan struct{})}
	if a.mode == "" {
		a.mode = AuthNone
	}
	var err error
	if a.coordSecret, err = loadSecret(dir, coordinatorSecretFile); err != nil {
		return nil, err
	}
	if a.adminSecret, err = loadSecret(dir, adminSecretFile); err != nil {
		return nil, err
	}
	if a.mode == AuthToken {
		a.token = []byte(cfg.Token)
		if subtle.ConstantTimeCompare(a.token, a.coordSecret) == 1 || subtle.ConstantTimeCompare(a.token, a.adminSecret) == 1 {
			return nil, errors.New("coordinator: the job token must differ from the coordinator's and the administrator's secrets")
		}
	}
	a.jobs = server.NewAccount(localJobsAccount)
	opts.Accounts = []*server.Account{a.jobs}
	opts.CustomClientAuthentication = a
	a.jobPerms = localJobPermissions(subj, a.mode == AuthNone)
	a.adminPerms = &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: []string{subj.Status(), subj.Submit(), subj.Cancel()}},
		Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
	}
	return a, nil
}

// localJobPermissions are the permissions of a job in none and token mode:
// publish registrations, events and (none mode) status requests; subscribe
// to leases and inboxes. Everything else, the log, the JetStream API and the
// lease subjects included, is denied by not being allowed. There is no deny
// list: the server builds every list into subject trees for each
// connection (a deny list of four subjects was 3.4 KB of each job's
// connection, 34 MB at 10,000 jobs; docs/scale.md), and no subject these
// allow can reach the protected ones, which
// TestPermissions_NothingAJobMayPublishReachesAProtectedSubject checks.
//
// The ranks of a multi-process job talk on <prefix>.job.<id>.ranks, inside
// the JOBS account. Node agents authenticate like jobs (in token mode with the shared token),
// so the same permissions cover the agent subjects: requests on
// <prefix>.agent.*.* and the nodes' desired states. In none mode anyone may
// also submit and cancel jobs; in token mode that takes the admin secret.
func localJobPermissions(subj protocol.Subjects, none bool) *server.Permissions {
	pub := []string{subj.Register(), subj.AllEvents(), subj.AgentAll("*"), subj.Ranks("*")}
	if none {
		pub = append(pub, subj.Status(), subj.Submit(), subj.Cancel())
	}
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: pub},
		Subscribe: &server.SubjectPermission{Allow: []string{subj.AllLeases(), subj.Desired("*"), subj.Ranks("*"), "_INBOX.>"}},
	}
}

// Check implements server.Authentication.
func (a *localAuth) Check(c server.ClientAuthentication) bool {
	select {
	case <-a.linked:
	case <-time.After(10 * time.Second):
		return false
	}
	if !a.linkOK {
		return false
	}
	tok := []byte(c.GetOpts().Token)
	switch {
	case subtle.ConstantTimeCompare(tok, a.coordSecret) == 1:
		c.RegisterUser(&server.User{Username: "coordinator"})
		return true
	case subtle.ConstantTimeCompare(tok, a.adminSecret) == 1:
		c.RegisterUser(&server.User{Username: "admin", Permissions: a.adminPerms})
		return true
	case a.mode == AuthToken && subtle.ConstantTimeCompare(tok, a.token) != 1:
		return false
	case a.guard.refused(remoteHost(c), time.Now()):
		return false // a flood came from this address: its cooldown (flood.go)
	}
	c.RegisterUser(&server.User{Username: "job", Account: a.jobs, Permissions: a.jobPerms})
	return true
}

// release lets waiting clients through (after link, or when it failed:
// the server then shuts down).
func (a *localAuth) release() { a.linkOnce.Do(func() { close(a.linked) }) }

// link exports the coordinator's subjects to the JOBS account once the
// server runs, and enables JetStream for the coordinator's account only.
func (a *localAuth) link(s *server.Server, subj protocol.Subjects) error {
	defer a.release()
	g := s.GlobalAccount()
	if !g.JetStreamEnabled() {
		if err := g.EnableJetStream(nil, nil); err != nil {
			return fmt.Errorf("coordinator: JetStream for the coordinator's account: %w", err)
		}
	}
	jobs, err := s.LookupAccount(localJobsAccount)
	if err != nil {
		return err
	}
	// Events stay a service import although the server then builds every
	// batch's sender identity into a header (which JetStream strips): a
	// stream import would carry a job's reply subject into this account
	// unchanged, and JetStream answers a captured message on its reply
	// subject, so a job could make the server publish into any subject here,
	// the log's and the JetStream API's included (docs/scale.md, session 7;
	// the probe that showed it is described there).
	services := []string{subj.Register(), subj.AllEvents()}
	for _, verb := range agentRequests {
		services = append(services, subj.Prefix+".agent.*."+verb)
	}
	if a.mode == AuthNone {
		services = append(services, subj.Status(), subj.Submit(), subj.Cancel())
	}
	for _, sub := range services {
		if err := g.AddServiceExport(sub, []*server.Account{jobs}); err != nil {
			return fmt.Errorf("coordinator: export %s: %w", sub, err)
		}
		if err := jobs.AddServiceImport(g, sub, sub); err != nil {
			return fmt.Errorf("coordinator: import %s: %w", sub, err)
		}
	}
	// The registration handler reads the server-stamped requester identity
	// (per-client caps).
	if err := jobs.SetServiceImportSharing(g, subj.Register(), true); err != nil {
		return fmt.Errorf("coordinator: share %s: %w", subj.Register(), err)
	}
	for _, sub := range []string{subj.AllLeases(), subj.Desired("*")} {
		if err := g.AddStreamExport(sub, []*server.Account{jobs}); err != nil {
			return fmt.Errorf("coordinator: export %s: %w", sub, err)
		}
		if err := jobs.AddStreamImport(g, sub, ""); err != nil {
			return fmt.Errorf("coordinator: import %s: %w", sub, err)
		}
	}
	// The agents' event batches (the uplink) come into this account as a
	// stream: no sender identity is built for each (the service import's
	// cost per message), and the reply subject a publisher chose reaches
	// only the coordinator's events handler, which never answers and
	// writes the batch into the log as a new message without it; the log
	// does not capture the agent subjects. The request verbs above stay
	// services.
	if err := jobs.AddStreamExport(subj.AgentEvents("*"), []*server.Account{g}); err != nil {
		return fmt.Errorf("coordinator: export %s: %w", subj.AgentEvents("*"), err)
	}
	if err := g.AddStreamImport(jobs, subj.AgentEvents("*"), ""); err != nil {
		return fmt.Errorf("coordinator: import %s: %w", subj.AgentEvents("*"), err)
	}
	a.jobs, a.linkOK = jobs, true
	return nil
}

// agentRequests are the agent verbs that are requests (agents.go); the
// uplink's events are published.
var agentRequests = []string{"join", "heartbeat", "report", "creds", "register"}
