package main

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCoordinator_BadFlagsAreOneLineAndExitCode2(t *testing.T) {
	badJSON := writeFile(t, "cfg.json", "{nope")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no GPUs", []string{}, "--gpus"},
		{"round under 1s", []string{"--gpus", "2", "--round", "500ms"}, "--round"},
		{"unknown policy", []string{"--gpus", "2", "--policy", "fifo9"}, "fifo9"},
		{"unknown auth", []string{"--gpus", "2", "--auth", "kerberos"}, "kerberos"},
		{"token mode without a token", []string{"--gpus", "2", "--auth", "token"}, "--token"},
		{"bad prefix", []string{"--gpus", "2", "--prefix", "a.*"}, "prefix"},
		{"job timeout under a round", []string{"--gpus", "2", "--job-timeout", "1s", "--round", "10s"}, "--job-timeout"},
		{"tiny message limit", []string{"--gpus", "2", "--max-message", "10"}, "--max-message"},
		{"bad log format", []string{"--gpus", "2", "--log-format", "xml"}, "--log-format"},
		{"bad policy config", []string{"--gpus", "2", "--config", badJSON}, "--config"},
		{"auth with an external cluster", []string{"--gpus", "2", "--nats-url", "nats://x:1", "--auth", "creds"}, "--auth"},
		{"authority without an external server", []string{"--gpus", "2", "--authority", "/tmp"}, "--authority goes with --nats-url"},
		{"authority and a token", []string{"--gpus", "2", "--nats-url", "nats://x:1", "--authority", "/tmp", "--token", "t"}, "--authority is the coordinator's credential"},
		{"authority that is no authority", []string{"--gpus", "2", "--nats-url", "nats://127.0.0.1:1", "--authority", "/nonexistent/auth"}, "--authority: "},
		{"stray argument", []string{"--gpus", "2", "extra"}, "extra"},
		{"gpus and nodes", []string{"--gpus", "2", "--nodes", "2x2"}, "--gpus"},
		{"nodes and cluster", []string{"--nodes", "2x2", "--cluster", badJSON}, "--nodes and --cluster"},
		{"bad nodes", []string{"--nodes", "2y2"}, "--nodes"},
		{"zero nodes", []string{"--nodes", "0x8"}, "--nodes"},
		{"bad cluster file", []string{"--cluster", badJSON}, "--cluster"},
		{"missing cluster file", []string{"--cluster", "/nonexistent/c.json"}, "--cluster"},
		{"tls cert without key", []string{"--gpus", "2", "--tls-cert", badJSON}, "--tls-key"},
		{"tls ca alone", []string{"--gpus", "2", "--tls-ca", badJSON}, "--tls-ca"},
		{"missing tls cert", []string{"--gpus", "2", "--tls-cert", "/nonexistent/s.crt", "--tls-key", badJSON}, "--tls-cert"},
		{"tls cert with an external cluster", []string{"--gpus", "2", "--nats-url", "nats://x:1", "--tls-cert", badJSON, "--tls-key", badJSON}, "--tls-cert"},
		{"zero job cap", []string{"--gpus", "2", "--max-jobs", "0"}, "--max-jobs"},
		{"flood limit below any honest rate", []string{"--gpus", "2", "--flood-limit", "10"}, "--flood-limit"},
		{"negative flood limit", []string{"--gpus", "2", "--flood-limit", "-1"}, "--flood-limit"},
		{"keep ended below -1", []string{"--gpus", "2", "--keep-ended", "-2"}, "--keep-ended"},
		{"negative connections advice", []string{"--gpus", "2", "--connections-advice", "-1"}, "--connections-advice"},
		{"tiny leader ttl", []string{"--gpus", "2", "--leader-ttl", "1ms"}, "--leader-ttl"},
		{"lease rounds out of range", []string{"--gpus", "2", "--lease-rounds", "17"}, "--lease-rounds"},
		{"negative lease rounds", []string{"--gpus", "2", "--lease-rounds", "-1"}, "--lease-rounds"},
		{"duplicate node names", []string{"--cluster", writeFile(t, "dup.json", `{"nodes":[{"name":"a","gpus":2},{"name":"a","gpus":2}]}`)}, "used twice"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("SHOCKWAVE_TOKEN", "")
			code, out, errOut := runCLI(append([]string{"coordinator"}, c.args...)...)
			if code != 2 || out != "" {
				t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
			}
			if lines := strings.Split(strings.TrimSpace(errOut), "\n"); len(lines) != 1 || !strings.Contains(lines[0], c.want) {
				t.Errorf("stderr %q, want one line mentioning %q", errOut, c.want)
			}
		})
	}
}

// startCoordinator runs `shockwave coordinator` in-process until the test
// ends, as SIGINT would stop it.
func startCoordinator(t *testing.T, args ...string) (url string) {
	t.Helper()
	return startCoordinatorLogging(t, &syncBuffer{}, args...)
}

// startCoordinatorLogging is startCoordinator with the coordinator's log
// (stderr) written into logs.
func startCoordinatorLogging(t *testing.T, logs *syncBuffer, args ...string) (url string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	saved := signalContext
	signalContext = func() (context.Context, context.CancelFunc) { return ctx, cancel }
	done := make(chan int, 1)
	go func() {
		done <- run(append([]string{"coordinator", "--listen", addr, "--round", "1s"}, args...), io.Discard, logs)
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("coordinator exit %d:\n%s", code, logs.String())
		}
		signalContext = saved
	})
	return "nats://" + addr
}

func statusEventually(t *testing.T, args ...string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, out, errOut := runCLI(append([]string{"status", "--timeout", "500ms"}, args...)...)
		if code == 0 && strings.Contains(out, "plan of round") {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("status: exit %d, %s%s", code, out, errOut)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestCoordinator_StatusPrintsTheJobTableAndPlanOfARunningCoordinator(t *testing.T) {
	url := startCoordinator(t, "--gpus", "4", "--data-dir", t.TempDir(), "--policy", "gavel", "--log-level", "warn")
	out := statusEventually(t, "--nats-url", url)
	for _, want := range []string{"policy gavel", "4 GPUs", "1s rounds", "JOB", "plan of round"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
	code, out, _ := runCLI("status", "--nats-url", url, "--format", "json")
	if code != 0 || !strings.Contains(out, `"policy": "gavel"`) {
		t.Errorf("json status: exit %d\n%s", code, out)
	}
}

func TestCreds_IssuedCredentialsReachTheCoordinator(t *testing.T) {
	dir := t.TempDir()
	url := startCoordinator(t, "--gpus", "2", "--data-dir", dir, "--auth", "creds", "--log-level", "warn")
	code, creds, errOut := runCLI("creds", "issue", "--data-dir", dir, "--admin", "ops")
	for code != 0 && strings.Contains(errOut, "no credentials authority") {
		time.Sleep(20 * time.Millisecond) // the coordinator creates it at start
		code, creds, errOut = runCLI("creds", "issue", "--data-dir", dir, "--admin", "ops")
	}
	if code != 0 || !strings.Contains(creds, "BEGIN NATS USER JWT") || !strings.Contains(creds, "BEGIN USER NKEY SEED") {
		t.Fatalf("creds issue: exit %d %s", code, errOut)
	}
	path := filepath.Join(t.TempDir(), "ops.creds")
	if err := os.WriteFile(path, []byte(creds), 0o600); err != nil {
		t.Fatal(err)
	}
	statusEventually(t, "--nats-url", url, "--creds", path)
	if code, _, errOut := runCLI("status", "--nats-url", url, "--timeout", "1s"); code != 1 || !strings.Contains(errOut, "Authorization Violation") {
		t.Errorf("status without credentials: exit %d %s", code, errOut)
	}
	if code, out, _ := runCLI("creds", "issue", "--data-dir", dir, "job-7"); code != 0 || !strings.Contains(out, "NATS USER JWT") {
		t.Errorf("job credentials: exit %d", code)
	}
	if code, out, errOut := runCLI("creds", "revoke", "--data-dir", dir, "job-7"); code != 0 || !strings.Contains(out, "revoked 1 credential(s) of job job-7") {
		t.Errorf("creds revoke: exit %d %s %s", code, out, errOut)
	}
	for _, args := range [][]string{{"creds", "revoke", "--data-dir", dir, "never-issued"}, {"creds", "revoke", "--data-dir", dir, "bad.id"}, {"creds", "issue", "--data-dir", dir, "bad.id"}, {"creds", "issue", "--data-dir", t.TempDir(), "j"}, {"creds", "mint", "j"}} {
		if code, _, errOut := runCLI(args...); code != 2 || len(strings.Split(strings.TrimSpace(errOut), "\n")) != 1 {
			t.Errorf("%v: exit %d %q", args, code, errOut)
		}
	}
}

func TestCoordinator_ASecondOnOneDataDirOrPortFailsWithAClearError(t *testing.T) {
	dir := t.TempDir()
	url := startCoordinator(t, "--gpus", "2", "--data-dir", dir, "--log-level", "warn")
	statusEventually(t, "--nats-url", url)
	code, _, errOut := runCLI("coordinator", "--gpus", "2", "--data-dir", dir, "--listen", "127.0.0.1:0", "--log-level", "warn")
	if code != 1 || !strings.Contains(errOut, "in use by another coordinator") {
		t.Errorf("same data dir: exit %d %s", code, errOut)
	}
	code, _, errOut = runCLI("coordinator", "--gpus", "2", "--data-dir", t.TempDir(), "--listen", strings.TrimPrefix(url, "nats://"), "--log-level", "warn")
	if code != 1 || !strings.Contains(errOut, "already in use") {
		t.Errorf("same port: exit %d %s", code, errOut)
	}
}

func TestCoordinator_TokenModeStatusNeedsTheAdminSecret(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("SHOCKWAVE_TOKEN", "")
	url := startCoordinator(t, "--gpus", "2", "--data-dir", dir, "--auth", "token", "--token", "job-secret", "--log-level", "warn")
	statusEventually(t, "--nats-url", url, "--token-file", filepath.Join(dir, "auth", "admin.secret"))
	if code, _, errOut := runCLI("status", "--nats-url", url, "--token", "job-secret", "--timeout", "500ms"); code != 1 {
		t.Errorf("status with the job token: exit %d %s", code, errOut)
	}
}
