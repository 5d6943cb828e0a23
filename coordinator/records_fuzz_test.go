package coordinator

import (
	"testing"

	"github.com/shockwave-sched/shockwave/protocol"
)

// FuzzDecodeLeaderRecord and FuzzDecodeClusterRecord: no input panics, and
// an accepted record satisfies the decoder's own checks.
func FuzzDecodeLeaderRecord(f *testing.F) {
	for _, s := range []string{`{"v":1,"id":"a","epoch":1}`, `{"v":1,"id":"a","epoch":0}`, `{"v":1,"id":"a","epoch":1,"epoch":2}`,
		`{"V":1,"id":"a","epoch":1}`, `{}`, ``, `{"v":1,"id":"","epoch":18446744073709551615}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeLeaderRecord(data)
		if err != nil {
			return
		}
		if r.V != protocol.Version || r.Epoch == 0 || r.ID == "" {
			t.Fatalf("accepted %+v", r)
		}
	})
}

func FuzzDecodeClusterRecord(f *testing.F) {
	for _, s := range []string{`{"v":1,"nodes":[{"name":"a","gpus":2}]}`, `{"v":1,"nodes":[]}`,
		`{"v":1,"nodes":[{"name":"a","gpus":2},{"name":"a","gpus":2}]}`, `{"v":1,"nodes":[{"name":"a","gpus":-1}]}`,
		`{"v":1,"nodes":[{"name":"a b","gpus":1}]}`, `{"v":1,"nodes":[{"name":"a","gpus":1,"gpus":2}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeClusterRecord(data)
		if err != nil {
			return
		}
		names := map[string]bool{}
		for _, n := range r.Nodes {
			if checkNode(n) != nil || names[n.Name] {
				t.Fatalf("accepted %+v", r)
			}
			names[n.Name] = true
		}
		if len(r.Nodes) == 0 {
			t.Fatalf("accepted an empty cluster")
		}
	})
}
