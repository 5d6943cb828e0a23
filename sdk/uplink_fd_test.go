package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shockwave-sched/shockwave/internal/syncbuf"
	"github.com/shockwave-sched/shockwave/sdk"
	"github.com/shockwave-sched/shockwave/sdk/sdktest"
)

// Which descriptors the SDK takes for its uplink, and when it keeps NATS
// (in the test process: the SDK owns the raw descriptors it takes).

// rawUplink makes an uplink whose process end is a raw descriptor that
// the SDK owns and closes, as in a job process, names it in
// $SHOCKWAVE_UPLINK_FD (inode + inodeDelta), and returns the agent's end
// and the descriptor (to close when the SDK does not take it).
func rawUplink(t testing.TB, inodeDelta uint64) (*net.UnixConn, int) {
	t.Helper()
	f, ino, conn := uplinkPair(t)
	fd, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	syscall.CloseOnExec(fd)
	t.Setenv(sdk.EnvUplinkFD, fmt.Sprintf("%d:%d", fd, ino+inodeDelta))
	t.Cleanup(func() { conn.Close() })
	return conn, fd
}

// logBuffer collects an SDK's log.
type logBuffer = syncbuf.Buffer

func TestUplink_ADescriptorThatIsNotTheAgentsSocketIsNotUsed(t *testing.T) {
	c := sdktest.Start(t, sdktest.Config{Round: time.Hour})
	cases := []struct {
		name, want string
		setup      func(t *testing.T) (check func() error)
	}{
		{"a socket with another inode", "is a socket with inode", func(t *testing.T) func() error {
			conn, fd := rawUplink(t, 1)
			t.Cleanup(func() { syscall.Close(fd) }) // never the SDK's
			// The socket is untouched: the agent's end still writes.
			return func() error {
				_, err := conn.Write([]byte("x\n"))
				return err
			}
		}},
		{"a pipe", "is not a socket", func(t *testing.T) func() error {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { r.Close(); w.Close() })
			fi, _ := r.Stat()
			t.Setenv(sdk.EnvUplinkFD, fmt.Sprintf("%d:%d", r.Fd(), fi.Sys().(*syscall.Stat_t).Ino))
			return func() error {
				_, err := w.Write([]byte("x\n"))
				return err
			}
		}},
		{"a closed descriptor", "bad file descriptor", func(t *testing.T) func() error {
			t.Setenv(sdk.EnvUplinkFD, "1000:77")
			return func() error { return nil }
		}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := rawLeasePipe(t)
			defer w.Close()
			check := tc.setup(t)
			var log logBuffer
			id := "misfit-" + strconv.Itoa(i)
			j, err := sdk.Register(context.Background(), append(baseOptions(c, id), sdk.WithEpochs(10),
				sdk.WithLogger(slog.New(slog.NewTextHandler(&log, nil))))...)
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			if j.Uplinked() || j.Conn() == nil {
				t.Fatalf("uplinked=%t conn=%v: want the job on its own NATS connection", j.Uplinked(), j.Conn())
			}
			if _, ok := c.Job(id); !ok {
				t.Error("the job did not register over NATS")
			}
			if s := log.String(); !strings.Contains(s, sdk.EnvUplinkFD) || !strings.Contains(s, tc.want) {
				t.Errorf("the log says %q; want a warning naming %s and saying %q", s, sdk.EnvUplinkFD, tc.want)
			}
			if err := check(); err != nil {
				t.Errorf("the SDK touched a descriptor that is not its uplink: %v", err)
			}
		})
	}
}

func TestUplink_AMalformedVariableIsAnErrorNamingIt(t *testing.T) {
	c := malformedFDVariable(t, sdk.EnvUplinkFD, "4", "x:5", "4:", "2:5", "4:0", "4:5:6")
	// WithoutUplink does not read it.
	j, err := sdk.Register(context.Background(), append(baseOptions(c, "refusing"), sdk.WithEpochs(10), sdk.WithoutUplink())...)
	if err != nil {
		t.Fatalf("WithoutUplink and a malformed %s: %v", sdk.EnvUplinkFD, err)
	}
	j.Close()
}

func TestUplink_WithoutUplinkAndMultiProcessJobsKeepNATS(t *testing.T) {
	c := sdktest.Start(t, sdktest.Config{GPUs: 2, Round: time.Hour})
	for _, tc := range []struct {
		name   string
		opts   []sdk.Option
		uplink bool
	}{
		{"by default", nil, true}, // the setup offers a working uplink
		{"WithoutUplink", []sdk.Option{sdk.WithoutUplink()}, false},
		{"rank 0 of 2", []sdk.Option{sdk.WithRank(0, 2)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := rawLeasePipe(t)
			defer w.Close()
			conn, fd := rawUplink(t, 0)
			if tc.uplink {
				newTestAgent(t, c, conn)
			} else {
				defer syscall.Close(fd) // not taken: the SDK does not close it
			}
			id := "keeps-" + strings.ReplaceAll(tc.name, " ", "-")
			j, err := sdk.Register(context.Background(), append(append(baseOptions(c, id), sdk.WithEpochs(10)), tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			if j.Uplinked() != tc.uplink || (j.Conn() == nil) != tc.uplink {
				t.Fatalf("uplinked=%t conn=%v, want uplinked=%t", j.Uplinked(), j.Conn(), tc.uplink)
			}
			if _, ok := c.Job(id); !ok {
				t.Error("the job did not register")
			}
			if tc.uplink {
				return
			}
			_ = conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			if n, err := conn.Read(make([]byte, 1)); n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("the agent's end read %d bytes (%v); the job should not write to an uplink it does not use", n, err)
			}
		})
	}
}
