package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/protocol"
	"github.com/shockwave-sched/shockwave/sdk"
)

// The deployment of docs/scale.md with real processes: `shockwave nats`
// serves, a `shockwave coordinator` on --nats-url with the server's
// coordinator secret schedules through it, a job with the job token
// registers and runs, cannot reach the log or the JetStream API, and the
// server killed and started again on its data directory loses nothing:
// the coordinator reconnects and the job is still in its table.
func TestNATS_ACoordinatorOnTheServerProcessServesJobsAndSurvivesTheServersRestart(t *testing.T) {
	dir := t.TempDir()
	addr := freePort(t)
	url := "nats://" + addr
	t.Setenv("SHOCKWAVE_TOKEN", "")
	startServer := func() (*exec.Cmd, chan int) {
		cmd, _, exited := cliProcess(t, "nats", "--listen", addr, "--data-dir", dir, "--auth", "token", "--token", "job-token", "--log-level", "warn")
		waitFor(t, 20*time.Second, "the NATS server's process", func() bool {
			nc, err := nats.Connect(url, nats.Token("job-token"))
			if err == nil {
				nc.Close()
			}
			return err == nil
		})
		return cmd, exited
	}
	server, exited := startServer()
	_, coordLog, coordExit := cliProcess(t, "coordinator", "--nats-url", url, "--token-file", filepath.Join(dir, "auth", "coordinator.secret"),
		"--gpus", "2", "--round", "1s", "--log-level", "warn")
	admin := filepath.Join(dir, "auth", "admin.secret")
	statusEventually(t, "--nats-url", url, "--token-file", admin)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	job, err := sdk.Register(ctx, sdk.WithURL(url), sdk.WithToken("job-token"), sdk.WithJobID("apart-1"),
		sdk.WithModel("ResNet-18"), sdk.WithBatchSize(32), sdk.WithDatasetSize(1000), sdk.WithTotalSteps(1_000_000))
	if err != nil {
		t.Fatalf("register through the server's process: %v\n%s", err, coordLog.String())
	}
	defer job.Close()
	waitFor(t, 20*time.Second, "a RUN lease", func() bool { return job.LeaseState() == sdk.Running })

	// A job's connection reaches neither the log nor the JetStream API.
	var mu sync.Mutex
	var refused []string
	nc, err := nats.Connect(url, nats.Token("job-token"), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		mu.Lock()
		defer mu.Unlock()
		refused = append(refused, err.Error())
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	subj := protocol.Subjects{Prefix: protocol.DefaultPrefix}
	for _, s := range []string{subj.Prefix + ".log.tick", "$JS.API.STREAM.DELETE.SHOCKWAVE_LOG", subj.Lease("apart-1")} {
		if err := nc.Publish(s, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "a permission violation for "+s, func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, r := range refused {
				if strings.Contains(strings.ToLower(r), strings.ToLower(`publish to "`+s+`"`)) {
					return true
				}
			}
			return false
		})
	}

	// The server dies; started again on its directory it has the log, the
	// coordinator reconnects and goes on with the job.
	if err := server.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the killed server did not exit")
	}
	startServer()
	out := statusEventually(t, "--nats-url", url, "--token-file", admin)
	if !strings.Contains(out, "apart-1") {
		t.Errorf("after the server's restart the job table lacks apart-1:\n%s", out)
	}
	round := func() string {
		out := statusEventually(t, "--nats-url", url, "--token-file", admin)
		return out[:strings.Index(out, "\n")]
	}
	first := round()
	waitFor(t, 10*time.Second, "rounds after the restart", func() bool { return round() != first })
	select {
	case code := <-coordExit:
		t.Fatalf("the coordinator exited %d:\n%s", code, coordLog.String())
	default:
	}
}

func TestNATS_BadFlagsAreOneLineAndExitCode2(t *testing.T) {
	t.Setenv("SHOCKWAVE_TOKEN", "")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--auth", "token"}, "--auth token needs"},
		{[]string{"--auth", "kerberos"}, "kerberos"},
		{[]string{"--flood-limit", "5"}, "--flood-limit"},
		{[]string{"--tls-key", "k.pem"}, "go together"},
		{[]string{"--tls-ca", "ca.pem"}, "--tls-ca needs --tls-cert"},
		{[]string{"--prefix", "a..b"}, "prefix"},
		{[]string{"--log-format", "xml"}, "--log-format"},
		{[]string{"--token-file", "/nonexistent/token"}, "--token-file"},
	} {
		code, _, errOut := runCLI(append([]string{"nats", "--data-dir", t.TempDir()}, c.args...)...)
		if code != 2 || !strings.Contains(errOut, c.want) || len(strings.Split(strings.TrimSpace(errOut), "\n")) != 1 {
			t.Errorf("%v: exit %d, %q; want exit 2 and one line naming %q", c.args, code, errOut, c.want)
		}
	}
}

// A second server, or an embedded coordinator, on the server's data
// directory fails with a clear error and leaves it serving.
func TestNATS_ASecondServerOrCoordinatorOnItsDataDirFails(t *testing.T) {
	dir := t.TempDir()
	addr := freePort(t)
	cliProcess(t, "nats", "--listen", addr, "--data-dir", dir, "--log-level", "warn")
	waitFor(t, 20*time.Second, "the NATS server's process", func() bool {
		nc, err := nats.Connect("nats://" + addr)
		if err == nil {
			nc.Close()
		}
		return err == nil
	})
	for _, args := range [][]string{
		{"nats", "--listen", "127.0.0.1:0", "--data-dir", dir, "--log-level", "warn"},
		{"coordinator", "--gpus", "2", "--listen", "127.0.0.1:0", "--data-dir", dir, "--log-level", "warn"},
	} {
		if code, _, errOut := runCLI(args...); code != 1 || !strings.Contains(errOut, "in use by another") {
			t.Errorf("%s on the same data dir: exit %d %s", args[0], code, errOut)
		}
	}
	nc, err := nats.Connect("nats://" + addr)
	if err != nil {
		t.Fatalf("the first server stopped serving: %v", err)
	}
	nc.Close()
}

// Creds mode with the server apart: the server keeps the authority and
// applies its revocations; the coordinator connects with --authority, a
// job with the credentials `shockwave creds issue` gave it registers and
// runs, and once `shockwave creds revoke` revoked them they no longer
// connect.
func TestNATS_CredsModeServerApartIssuesServesAndRevokes(t *testing.T) {
	dir := t.TempDir()
	addr := freePort(t)
	url := "nats://" + addr
	cliProcess(t, "nats", "--listen", addr, "--data-dir", dir, "--auth", "creds", "--log-level", "warn")
	authDir := filepath.Join(dir, "auth")
	var creds string
	waitFor(t, 20*time.Second, "the server's authority and a job's credentials", func() bool {
		code, out, _ := runCLI("creds", "issue", "--data-dir", dir, "job-c")
		creds = out
		return code == 0
	})
	path := filepath.Join(t.TempDir(), "job-c.creds")
	if err := os.WriteFile(path, []byte(creds), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the server's process", func() bool {
		nc, err := nats.Connect(url, nats.UserCredentials(path))
		if err == nil {
			nc.Close()
		}
		return err == nil
	})
	_, coordLog, _ := cliProcess(t, "coordinator", "--nats-url", url, "--authority", authDir, "--gpus", "2", "--round", "1s", "--log-level", "warn")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	job, err := sdk.Register(ctx, sdk.WithURL(url), sdk.WithCredentials(path), sdk.WithJobID("job-c"),
		sdk.WithModel("ResNet-18"), sdk.WithBatchSize(32), sdk.WithDatasetSize(1000), sdk.WithTotalSteps(1_000_000))
	if err != nil {
		t.Fatalf("register with issued credentials through the server's process: %v\n%s", err, coordLog.String())
	}
	defer job.Close()
	waitFor(t, 20*time.Second, "a RUN lease", func() bool { return job.LeaseState() == sdk.Running })
	if code, out, errOut := runCLI("creds", "revoke", "--data-dir", dir, "job-c"); code != 0 || !strings.Contains(out, "revoked 1") {
		t.Fatalf("creds revoke: exit %d %s %s", code, out, errOut)
	}
	waitFor(t, 10*time.Second, "the revoked credentials refused", func() bool {
		nc, err := nats.Connect(url, nats.UserCredentials(path), nats.NoReconnect())
		if err == nil {
			nc.Close()
		}
		return err != nil
	})
}
