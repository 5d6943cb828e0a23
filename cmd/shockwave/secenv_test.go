package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

// coordinatorConn connects to the embedded server of a coordinator on
// data directory dir with the coordinator's rights (none and token mode):
// jobs may not use the JetStream API.
func coordinatorConn(t *testing.T, listen, dir string) *nats.Conn {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "auth", "coordinator.secret"))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect("nats://"+listen, nats.Token(strings.TrimSpace(string(raw))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}
