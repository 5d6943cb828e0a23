package coordinator

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/protocol"
)

// violations collects the permission errors the server reports to a client.
type violations struct {
	mu   sync.Mutex
	errs []string
}

func (v *violations) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.errs = append(v.errs, err.Error())
}

func (v *violations) has(substr string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, e := range v.errs {
		if strings.Contains(e, substr) {
			return true
		}
	}
	return false
}

// jobClient connects with the credentials `shockwave creds issue` prints.
func jobClient(t *testing.T, e *env, job string) (*nats.Conn, *violations) {
	t.Helper()
	path := jobCredsFile(t, e, job)
	v := &violations{}
	nc := e.client(nats.UserCredentials(path), nats.CustomInboxPrefix(e.subj.Inbox(job)), nats.ErrorHandler(v.handler))
	return nc, v
}

// jobCredsFile issues job's credentials and writes them into a file.
func jobCredsFile(t *testing.T, e *env, job string) string {
	t.Helper()
	creds, err := e.emb.Authority().IssueJob(e.subj, job, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), job+".creds")
	if err := os.WriteFile(path, creds, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func credsEnv(t *testing.T) *env {
	return newEnv(t, 2, func(ec *EmbeddedConfig, sc *ServiceConfig) {
		ec.Auth = AuthCreds
		sc.Policy = "shockwave"
	})
}

func TestCreds_AJobRegistersAndReceivesItsOwnLeases(t *testing.T) {
	e := credsEnv(t)
	a, v := jobClient(t, e, "A")
	leases := watchLeases(t, a, e.subj.Lease("A"))
	if rep := register(t, a, e.subj, newJob("A", 1)); rep.Error != nil {
		t.Fatalf("A registers itself: %v", rep.Error)
	}
	publishBatch(t, a, e.subj, "A", heartbeat(1, 0))
	eventually(t, 10*time.Second, "A gets a lease", func() bool { return len(leases.all()) > 0 })
	eventually(t, 5*time.Second, "A's event is applied", func() bool {
		return counterValue(t, e.reg, "shockwave_events_accepted_total", "", "") == 1
	})
	if len(v.errs) > 0 {
		t.Errorf("permission errors in a job's own flow: %v", v.errs)
	}
}

func TestCreds_AJobCannotRegisterAnotherJob(t *testing.T) {
	e := credsEnv(t)
	a, _ := jobClient(t, e, "A")
	rep := register(t, a, e.subj, newJob("B", 1))
	if rep.Error == nil || rep.Error.Code != protocol.CodeForbidden {
		t.Fatalf("A registering B: %+v", rep)
	}
	if st := status(t, e.client(mustCoordinatorAuth(t, e)...), e.subj); len(st.Jobs) != 0 {
		t.Errorf("a forbidden registration created jobs: %+v", st.Jobs)
	}
}

func TestCreds_AJobCannotPublishEventsAsAnotherJob(t *testing.T) {
	e := credsEnv(t)
	a, va := jobClient(t, e, "A")
	b, _ := jobClient(t, e, "B")
	register(t, a, e.subj, newJob("A", 1))
	register(t, b, e.subj, newJob("B", 1))
	// On B's subject: the server refuses the publication.
	publishBatch(t, a, e.subj, "B", progress(1, 1000, 1000, 1))
	eventually(t, 5*time.Second, "a permission violation", func() bool {
		return va.has("Permissions Violation for Publish to \"shockwave.job.B.events\"")
	})
	// On A's own subject with B's id inside: the coordinator refuses it.
	data, _ := json.Marshal(protocol.Batch{V: 1, Job: "B", Events: []protocol.Event{{V: 1, Type: protocol.EventDone, Job: "B", Seq: 1}}})
	if err := a.Publish(e.subj.Events("A"), data); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the mismatch is counted", func() bool {
		return counterValue(t, e.reg, "shockwave_events_rejected_total", "reason", "subject_mismatch") == 1
	})
	row, _ := jobRow(status(t, e.client(mustCoordinatorAuth(t, e)...), e.subj), "B")
	if row.LastSeq != 0 || row.StepsDone != 0 || row.State == "completed" {
		t.Errorf("B changed by A: %+v", row)
	}
}

func TestCreds_AJobCannotReadAnotherJobsLeases(t *testing.T) {
	e := credsEnv(t)
	a, va := jobClient(t, e, "A")
	b, _ := jobClient(t, e, "B")
	stolen := watchLeasesQuiet(a, e.subj.Lease("B"))
	wild := watchLeasesQuiet(a, e.subj.AllLeases())
	eventually(t, 5*time.Second, "permission violations", func() bool {
		return va.has("Permissions Violation for Subscription to \"shockwave.job.B.lease\"") &&
			va.has("Permissions Violation for Subscription to \"shockwave.job.*.lease\"")
	})
	own := watchLeases(t, b, e.subj.Lease("B"))
	register(t, b, e.subj, newJob("B", 1))
	eventually(t, 10*time.Second, "B gets a lease", func() bool { return len(own.all()) > 0 })
	time.Sleep(50 * time.Millisecond)
	if n := stolen.count() + wild.count(); n > 0 {
		t.Errorf("A read %d of B's leases", n)
	}
}

func TestCreds_AJobCannotPublishALeaseOrALogRecord(t *testing.T) {
	e := credsEnv(t)
	a, va := jobClient(t, e, "A")
	b, _ := jobClient(t, e, "B")
	own := watchLeasesQuiet(b, e.subj.Lease("B"))
	fake, _ := json.Marshal(protocol.Lease{V: 1, Job: "B", Action: protocol.Exit, Start: 1, Expiry: 2})
	stream, bucket := streamNames(e.subj.Prefix)
	for _, subject := range []string{e.subj.Lease("B"), e.subj.Lease("A"), e.subj.Prefix + ".log.tick", e.subj.Status(),
		e.subj.Prefix + ".log.leader", "$JS.API.STREAM.PURGE." + stream, "$JS.API.STREAM.DELETE.KV_" + bucket} {
		if err := a.Publish(subject, fake); err != nil {
			t.Fatal(err)
		}
		eventually(t, 5*time.Second, "a violation for "+subject, func() bool {
			return va.has("Permissions Violation for Publish to \"" + subject + "\"")
		})
	}
	time.Sleep(50 * time.Millisecond)
	if own.count() > 0 {
		t.Errorf("B received a lease A published")
	}
}

func TestCreds_AdminCredentialsReadStatusOnly(t *testing.T) {
	e := credsEnv(t)
	creds, err := e.emb.Authority().IssueAdmin(e.subj, "ops", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ops.creds")
	if err := os.WriteFile(path, creds, 0o600); err != nil {
		t.Fatal(err)
	}
	v := &violations{}
	ops := e.client(nats.UserCredentials(path), nats.ErrorHandler(v.handler))
	if st := status(t, ops, e.subj); st.Error != nil || st.GPUs != 2 {
		t.Errorf("admin status: %+v", st)
	}
	publishBatch(t, ops, e.subj, "A", heartbeat(1, 0))
	eventually(t, 5*time.Second, "a violation", func() bool { return v.has("Permissions Violation for Publish") })
}

func TestToken_ClientsWithoutTheTokenAreRefused(t *testing.T) {
	e := newEnv(t, 1, func(ec *EmbeddedConfig, _ *ServiceConfig) {
		ec.Auth, ec.Token, ec.DontListen, ec.Listen = AuthToken, "s3cret", false, "127.0.0.1:-1"
	})
	url := e.emb.ClientURL()
	if nc, err := nats.Connect(url); err == nil {
		nc.Close()
		t.Fatal("a client without the token connected")
	}
	if nc, err := nats.Connect(url, nats.Token("wrong")); err == nil {
		nc.Close()
		t.Fatal("a client with a wrong token connected")
	} else if !strings.Contains(err.Error(), "Authorization Violation") {
		t.Errorf("refusal: %v", err)
	}
	nc := e.client(nats.Token("s3cret"))
	if rep := register(t, nc, e.subj, newJob("t", 1)); rep.Error != nil {
		t.Fatal(rep.Error)
	}
}

func TestIsLoopback_RecognizesLoopbackListenAddresses(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:4222": true, "localhost:4222": true, "[::1]:4222": true,
		"0.0.0.0:4222": false, ":4222": false, "10.1.2.3:4222": false} {
		if IsLoopback(addr) != want {
			t.Errorf("IsLoopback(%q) = %v", addr, !want)
		}
	}
}

// mustCoordinatorAuth returns the options of an unrestricted client in the
// coordinator's account, to read status in creds mode.
func mustCoordinatorAuth(t *testing.T, e *env) []nats.Option {
	t.Helper()
	o, err := e.emb.Authority().CoordinatorOption()
	if err != nil {
		t.Fatal(err)
	}
	return []nats.Option{o}
}

type counter struct {
	mu sync.Mutex
	n  int
}

func (c *counter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// watchLeasesQuiet subscribes without failing on a refused subscription.
func watchLeasesQuiet(nc *nats.Conn, subject string) *counter {
	c := &counter{}
	_, _ = nc.Subscribe(subject, func(*nats.Msg) {
		c.mu.Lock()
		c.n++
		c.mu.Unlock()
	})
	_ = nc.Flush()
	return c
}

func TestCreds_ARevokedJobIsDisconnectedAndCannotConnectAgain(t *testing.T) {
	e := newEnv(t, 2, func(ec *EmbeddedConfig, _ *ServiceConfig) {
		ec.Auth, ec.DontListen, ec.Listen = AuthCreds, false, "127.0.0.1:-1"
	})
	path := jobCredsFile(t, e, "R")
	closed := make(chan struct{})
	r := e.client(nats.UserCredentials(path), nats.CustomInboxPrefix(e.subj.Inbox("R")), nats.NoReconnect(),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if rep := register(t, r, e.subj, newJob("R", 1)); rep.Error != nil {
		t.Fatal(rep.Error)
	}
	other, _ := jobClient(t, e, "K")
	n, err := e.emb.Authority().Revoke("R", time.Now())
	if err != nil || n != 1 {
		t.Fatalf("revoke: %d keys, %v", n, err)
	}
	start := time.Now()
	select {
	case <-closed:
		t.Logf("the revoked job was disconnected after %v", time.Since(start))
	case <-time.After(10 * time.Second):
		t.Fatal("the revoked job's connection is still open")
	}
	if nc, err := nats.Connect(e.emb.ClientURL(), nats.UserCredentials(path)); err == nil {
		nc.Close()
		t.Fatal("a revoked credential connected")
	} else if !strings.Contains(err.Error(), "Authorization Violation") {
		t.Errorf("refusal: %v", err)
	}
	if rep := register(t, other, e.subj, newJob("K", 1)); rep.Error != nil {
		t.Errorf("another job after the revocation: %v", rep.Error)
	}
	if _, err := e.emb.Authority().Revoke("never-issued", time.Now()); err == nil {
		t.Error("revoking a job without credentials succeeded")
	}
}
