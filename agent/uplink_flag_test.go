package agent_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/protocol"
)

// TestUplink_TheAgentCommandsFlag runs `shockwave agent` against a stub
// coordinator that places one single-process job on it: by default the
// process gets its uplink, and a flush written into it is answered;
// with --uplink=false it gets none.
func TestUplink_TheAgentCommandsFlag(t *testing.T) {
	for _, tc := range []struct {
		flags []string
		want  []string // the process's output, as patterns
	}{
		{nil, []string{"fd4=socket env=inode", regexp.QuoteMeta(`{"v":1,"op":"reply","id":1}`)}},
		{[]string{"--uplink=false"}, []string{"fd4=(closed|other) env=false"}}, // not the uplink, whatever the child's runtime opened
	} {
		t.Run(strings.Join(append([]string{"agent"}, tc.flags...), " "), func(t *testing.T) {
			srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
			if err != nil {
				t.Fatal(err)
			}
			srv.Start()
			defer srv.Shutdown()
			if !srv.ReadyForConnections(10 * time.Second) {
				t.Fatal("the NATS server did not start")
			}
			nc, err := nats.Connect(srv.ClientURL())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			dir := t.TempDir()
			script := filepath.Join(dir, "send")
			if err := os.WriteFile(script, []byte(`{"v":1,"op":"flush","id":1}`+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			desired := protocol.NodeDesired{V: protocol.Version, Node: "n0", Round: 1, Now: 1000, Epoch: 1, Jobs: []protocol.Assignment{{
				Job: "j", Command: []string{os.Args[0], "-test.run=XXX"},
				Env:     []string{"AGENT_UPLINK_CHILD=1", "AGENT_UPLINK_SEND=" + script, "AGENT_UPLINK_ANSWERS=1"},
				Devices: []int{0}, Procs: 1, WorldSize: 1, Expiry: 1e6}}}
			join, _ := json.Marshal(protocol.AgentReply{V: protocol.Version, Desired: &desired})
			ok, _ := json.Marshal(protocol.AgentReply{V: protocol.Version})
			subj := protocol.Subjects{Prefix: protocol.DefaultPrefix}
			for subject, reply := range map[string][]byte{subj.AgentJoin("n0"): join, subj.AgentHeartbeat("n0"): ok, subj.AgentReport("n0"): ok} {
				if _, err := nc.Subscribe(subject, func(m *nats.Msg) { _ = m.Respond(reply) }); err != nil {
					t.Fatal(err)
				}
			}
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			args := append([]string{"agent", "--node", "n0", "--gpus", "1", "--nats-url", srv.ClientURL(),
				"--work-dir", filepath.Join(dir, "work"), "--heartbeat", "200ms", "--kill-grace", "1s"}, tc.flags...)
			cmd := exec.Command(bin.shockwave, args...)
			logs, err := os.Create(filepath.Join(dir, "agent.log"))
			if err != nil {
				t.Fatal(err)
			}
			defer logs.Close()
			cmd.Stdout, cmd.Stderr = logs, logs
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				_ = cmd.Process.Signal(syscall.SIGTERM)
				waitOrKill(cmd, 5*time.Second)
				if t.Failed() {
					data, _ := os.ReadFile(filepath.Join(dir, "agent.log"))
					t.Logf("agent log:\n%s", tail(string(data), 3000))
				}
			}()
			var out []string
			eventually(t, 20*time.Second, "the process's output", func() bool {
				data, _ := os.ReadFile(filepath.Join(dir, "work", "j", "output.log"))
				out = out[:0]
				for _, l := range strings.Split(string(data), "\n") {
					if l != "" && !strings.HasPrefix(l, "--- shockwave agent") {
						out = append(out, l)
					}
				}
				return len(out) >= len(tc.want)
			})
			if !regexp.MustCompile("^" + strings.Join(tc.want, "\n") + "$").MatchString(strings.Join(out, "\n")) {
				t.Fatalf("the process printed %q, want %q", out, tc.want)
			}
		})
	}
}
