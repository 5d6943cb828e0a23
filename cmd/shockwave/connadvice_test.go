package main

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// metricValue reads one unlabelled series from a coordinator's /metrics
// (-1 where absent or unreachable).
func metricValue(addr, series string) float64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if name, value, ok := strings.Cut(sc.Text(), " "); ok && name == series {
			if v, err := strconv.ParseFloat(value, 64); err == nil {
				return v
			}
		}
	}
	return -1
}

const adviceMsg = "holds more connections than it was measured to serve"

// TestCoordinator_TheEmbeddedServerAdvisesAnotherDeploymentPastItsConnections:
// a `shockwave coordinator` process counts its embedded server's
// connections on /metrics and, with --connections-advice 12, logs the
// advice once when clients take it past 12, not again while it stays there,
// and once more after the count fell under nine tenths and passed again.
func TestCoordinator_TheEmbeddedServerAdvisesAnotherDeploymentPastItsConnections(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a coordinator process for about 10 s")
	}
	listen, web := freePort(t), freePort(t)
	_, out, _ := coordProcess(t, "--listen", listen, "--data-dir", t.TempDir(), "--gpus", "2", "--round", "1s",
		"--http", web, "--log-level", "warn", "--connections-advice", "12")
	waitFor(t, 30*time.Second, "the coordinator serves", func() bool { c, _ := healthz(web); return c == 200 })
	base := metricValue(web, "shockwave_nats_connections")
	if base < 1 || base > 8 {
		t.Fatalf("shockwave_nats_connections reads %v before any client (the coordinator's own: 1 to 8 expected)\n%s", base, out.String())
	}
	connect := func(n int) []*nats.Conn {
		var cs []*nats.Conn
		for range n {
			nc, err := nats.Connect("nats://" + listen)
			if err != nil {
				t.Fatal(err)
			}
			cs = append(cs, nc)
		}
		return cs
	}
	closeAll := func(cs []*nats.Conn) {
		for _, c := range cs {
			c.Close()
		}
	}
	advised := func() int { return strings.Count(out.String(), adviceMsg) }

	few := connect(2) // base + 2 ≤ 10, under the level and its nine tenths: no advice
	waitFor(t, 10*time.Second, "the two clients counted", func() bool { return metricValue(web, "shockwave_nats_connections") == base+2 })
	time.Sleep(1500 * time.Millisecond) // more than one reading
	if n := advised(); n != 0 {
		t.Fatalf("advised %d times at %v connections, under the level of 12\n%s", n, base+2, out.String())
	}
	many := connect(8)
	waitFor(t, 10*time.Second, "the advice", func() bool { return advised() >= 1 })
	if v := metricValue(web, "shockwave_nats_connections"); v != base+10 {
		t.Fatalf("shockwave_nats_connections reads %v with ten clients, want %v", v, base+10)
	}
	time.Sleep(2500 * time.Millisecond) // readings past the level: no second advice
	if n := advised(); n != 1 {
		t.Fatalf("advised %d times while the count stayed past the level, want once\n%s", n, out.String())
	}
	if !strings.Contains(out.String(), "node agents") || !strings.Contains(out.String(), "--nats-url") {
		t.Fatalf("the advice does not name the deployments that carry more:\n%s", out.String())
	}
	closeAll(many)
	waitFor(t, 10*time.Second, "the count under nine tenths of the level", func() bool {
		return metricValue(web, "shockwave_nats_connections") == base+2
	})
	time.Sleep(1500 * time.Millisecond) // a reading under the rearm share
	many = connect(8)
	defer closeAll(many)
	defer closeAll(few)
	waitFor(t, 10*time.Second, "the advice again", func() bool { return advised() == 2 })
}
