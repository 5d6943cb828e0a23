package coordinator

import (
	"testing"

	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
)

// FuzzDecodeSnapshot feeds the state snapshot decoder arbitrary bytes, and
// arbitrary payloads inside a valid envelope (sealed: the SHA-256 matches,
// so the payload decoder itself is exercised). Neither may panic; an
// accepted envelope must restore or fail with ErrSnapshotCorrupt, and a
// restored state must encode again. Seeds are real snapshots of several
// policies.
func FuzzDecodeSnapshot(f *testing.F) {
	for _, name := range []string{"shockwave", "gavel", "themis", "allox"} {
		h := newHistory(f, name, policy.Options{}, 4, 9)
		h.run(3, 4) // small seeds: the fuzzer mutates faster
		data, err := h.f.encodeState()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, false)
		f.Add(data[snapshotHeader:], true)
	}
	f.Add([]byte(snapshotMagic), false)
	f.Add([]byte{}, true)
	f.Fuzz(func(t *testing.T, data []byte, seal bool) {
		if seal {
			data = sealSnapshot(7, 2, data)
		}
		s, err := DecodeStateSnapshot(data)
		if err != nil {
			if seal {
				t.Fatalf("a sealed payload was refused: %v", err)
			}
			return
		}
		f, err := s.restore(protocol.Subjects{Prefix: protocol.DefaultPrefix}, protocol.DefaultMaxMessageBytes)
		if err != nil {
			return
		}
		if _, err := f.encodeState(); err != nil {
			t.Fatalf("a restored state does not encode: %v", err)
		}
	})
}
