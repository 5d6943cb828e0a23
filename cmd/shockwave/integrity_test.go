package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shockwave-sched/shockwave/coordinator"
	"github.com/shockwave-sched/shockwave/internal/syncbuf"
	"github.com/shockwave-sched/shockwave/protocol"
)

// The integrity claim with real processes: `shockwave coordinator` on a
// data directory whose log block was truncated or garbled on disk exits
// non-zero with an error that names the damage and the recovery flag;
// with --recover-from-snapshot it serves from the last good snapshot,
// /healthz says what was lost, and the jobs are still there.

const cliArgsEnv = "SHOCKWAVE_TEST_CLI_ARGS"

// TestCLIProcess is the coordinator process of the integrity test: this
// test binary running the CLI with the arguments in the environment.
func TestCLIProcess(t *testing.T) {
	args := os.Getenv(cliArgsEnv)
	if args == "" {
		t.Skip("started by TestIntegrity_TheCoordinatorBinaryRefusesADamagedLogAndRecoversOnRequest")
	}
	go func() { // exit with the parent, which holds our stdin
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(3)
	}()
	os.Exit(run(strings.Split(args, "\x1f"), os.Stdout, os.Stderr))
}

type syncBuffer = syncbuf.Buffer

// coordProcess starts `shockwave coordinator args...` as a process.
func coordProcess(t *testing.T, args ...string) (*exec.Cmd, *syncBuffer, chan int) {
	t.Helper()
	return cliProcess(t, append([]string{"coordinator"}, args...)...)
}

// cliProcess starts `shockwave args...` as a process, killed when the
// test ends; exited receives its exit code.
func cliProcess(t *testing.T, args ...string) (cmd *exec.Cmd, out *syncBuffer, exited chan int) {
	t.Helper()
	cmd = exec.Command(os.Args[0], "-test.run=^TestCLIProcess$")
	cmd.Env = append(os.Environ(), cliArgsEnv+"="+strings.Join(args, "\x1f"))
	out = &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stdin.Close() })
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited = make(chan int, 1)
	go func() {
		err := cmd.Wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
			exited <- 0
		case errors.As(err, &ee):
			exited <- ee.ExitCode()
		default:
			exited <- -1
		}
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd, out, exited
}

func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func healthz(addr string) (int, string) {
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestIntegrity_TheCoordinatorBinaryRefusesADamagedLogAndRecoversOnRequest(t *testing.T) {
	if testing.Short() {
		t.Skip("runs coordinator processes for about 20 s")
	}
	for _, how := range []string{"truncate", "garble"} {
		t.Run(how, func(t *testing.T) {
			dir, listen, web := t.TempDir(), freePort(t), freePort(t)
			args := []string{"--listen", listen, "--data-dir", dir, "--gpus", "2", "--round", "1s",
				"--policy", "gavel", "--snapshot-rounds", "3", "--http", web}
			cmd, out, exited := coordProcess(t, args...)
			waitFor(t, 30*time.Second, "the coordinator serves", func() bool { c, _ := healthz(web); return c == 200 })
			nc, err := nats.Connect("nats://" + listen)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			subj := protocol.Subjects{Prefix: protocol.DefaultPrefix}
			jobs := []string{"alpha", "beta", "gamma"}
			for _, id := range jobs {
				data, _ := json.Marshal(protocol.Register{V: protocol.Version, Job: id, Model: "ResNet-18", Workers: 1,
					BatchSize: 32, DatasetSize: 50000, TotalSteps: 1_000_000, Throughput: 10})
				if _, err := nc.Request(subj.Register(), data, 5*time.Second); err != nil {
					t.Fatal(err)
				}
			}
			seq := uint64(0)
			for range 40 { // 4 s of progress reports
				seq++
				for _, id := range jobs {
					data, _ := json.Marshal(protocol.Batch{V: protocol.Version, Job: id, Events: []protocol.Event{{V: protocol.Version,
						Type: protocol.EventProgress, Job: id, Seq: seq, Steps: 10, Elapsed: 0.1, StepsDone: int64(seq) * 10,
						TotalSteps: 1_000_000, BatchSize: 32, Throughput: 100}}})
					_ = nc.Publish(subj.Events(id), data)
				}
				time.Sleep(100 * time.Millisecond)
			}
			quietLog(t, coordinatorConn(t, listen, dir)) // JetStream: the coordinator's rights
			_ = cmd.Process.Signal(syscall.SIGTERM)
			if code := <-exited; code != 0 {
				t.Fatalf("graceful stop: exit %d\n%s", code, out)
			}
			damageBlock(t, dir, how)

			_, out2, exited2 := coordProcess(t, args...)
			select {
			case code := <-exited2:
				if code == 0 || !strings.Contains(out2.String(), "damaged") || !strings.Contains(out2.String(), "--recover-from-snapshot") {
					t.Fatalf("a damaged log: exit %d, want non-zero and an error naming the damage and the flag:\n%s", code, out2)
				}
				t.Logf("refused with exit %d", code)
			case <-time.After(30 * time.Second):
				t.Fatalf("the coordinator did not refuse a damaged log:\n%s", out2)
			}

			cmd3, out3, exited3 := coordProcess(t, append(args, "--recover-from-snapshot")...)
			var body string
			waitFor(t, 30*time.Second, "the recovered coordinator serves", func() bool {
				var c int
				c, body = healthz(web)
				return c == 200
			})
			if !strings.Contains(body, "log records lost") || !strings.Contains(body, "rounds rolled back") {
				t.Errorf("/healthz after a recovery does not say what was lost: %s", body)
			}
			if !strings.Contains(out3.String(), "recovered from the snapshot") {
				t.Errorf("the recovery is not logged:\n%s", out3)
			}
			t.Logf("recovered: %s", body)
			st := statusEventually(t, "--nats-url", "nats://"+listen)
			for _, id := range jobs {
				if !strings.Contains(st, id) {
					t.Errorf("job %s missing after the recovery:\n%s", id, st)
				}
			}
			_ = cmd3.Process.Signal(syscall.SIGTERM)
			if code := <-exited3; code != 0 {
				t.Errorf("recovered coordinator: exit %d\n%s", code, out3)
			}
		})
	}
}

// quietLog waits until the log's last record is a round tick whose round
// summary was stored, so that damage to the log's tail is visible against
// the summary.
func quietLog(t *testing.T, nc *nats.Conn) {
	t.Helper()
	js, _ := jetstream.New(nc)
	waitFor(t, 20*time.Second, "a quiet round with its summary stored", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		st, err := js.Stream(ctx, "SHOCKWAVE_LOG")
		if err != nil {
			return false
		}
		info, err := st.Info(ctx)
		if err != nil {
			return false
		}
		sum, err := coordinator.ReadSnapshot(ctx, js, protocol.DefaultPrefix)
		return err == nil && sum.Seq == info.State.LastSeq && strings.HasSuffix(lastSubject(ctx, st, sum.Seq), ".log.plan") // the record that closes a round
	})
}

func lastSubject(ctx context.Context, st jetstream.Stream, seq uint64) string {
	m, err := st.GetMsg(ctx, seq)
	if err != nil {
		return ""
	}
	return m.Subject
}

// damageBlock truncates or garbles the end of the log's newest message
// block in a stopped coordinator's data directory.
func damageBlock(t *testing.T, dir, how string) {
	t.Helper()
	blks, _ := filepath.Glob(filepath.Join(dir, "jetstream", "*", "streams", "SHOCKWAVE_LOG", "msgs", "*.blk"))
	if len(blks) == 0 {
		t.Fatalf("no message block under %s", dir)
	}
	slices.SortFunc(blks, func(a, b string) int { return cmp.Or(cmp.Compare(len(a), len(b)), strings.Compare(a, b)) })
	blk := blks[len(blks)-1]
	b, err := os.ReadFile(blk)
	if err != nil || len(b) < 400 {
		t.Fatalf("block %s: %d bytes, %v", blk, len(b), err)
	}
	switch how {
	case "truncate":
		b = b[:len(b)-40]
	case "garble":
		for i := len(b) - 300; i < len(b)-280; i++ {
			b[i] ^= 0xa5
		}
	}
	if err := os.WriteFile(blk, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestCoordinator_BadDurabilityFlagsAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"--snapshot-rounds", "0"}, {"--snapshot-rounds", "-3"}, {"--log-max-bytes", "-1"}} {
		code, _, errOut := runCLI(append([]string{"coordinator", "--gpus", "2", "--data-dir", t.TempDir()}, args...)...)
		if code != 2 || !strings.Contains(errOut, args[0]) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line naming the flag", args, code, errOut)
		}
	}
}
