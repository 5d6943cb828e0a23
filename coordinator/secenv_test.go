package coordinator

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// coordinatorToken is the option of a client with the coordinator's rights
// on the embedded server of data directory dir (none and token mode).
func coordinatorToken(t testing.TB, dir string) nats.Option {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "auth", coordinatorSecretFile))
	if err != nil {
		t.Fatal(err)
	}
	return nats.Token(strings.TrimSpace(string(raw)))
}

// coordClient connects in-process with the coordinator's rights.
func (e *env) coordClient() *nats.Conn {
	e.t.Helper()
	if e.emb.Authority() != nil {
		return e.client(mustCoordinatorAuth(e.t, e)...)
	}
	return e.client(coordinatorToken(e.t, e.dir))
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
