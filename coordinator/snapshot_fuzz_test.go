package coordinator

import (
	"bytes"
	"errors"
	"io"
	"slices"
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

// TestSnapshot_TheStreamedSealIsTheSealAndItsCheckCatchesDamage: the
// writer's streamed snapshot is byte for byte sealSnapshot's, and the
// streamed read-back check refuses what DecodeStateSnapshot refuses.
func TestSnapshot_TheStreamedSealIsTheSealAndItsCheckCatchesDamage(t *testing.T) {
	parts := [][]byte{[]byte("head"), {}, bytes.Repeat([]byte{7}, 100_000), []byte("tail")}
	want := sealSnapshot(9, 3, parts...)
	got, err := io.ReadAll(sealedReader(9, 3, parts...))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("streamed seal differs from sealSnapshot (err %v)", err)
	}
	if seq, err := verifySealed(bytes.NewReader(want)); err != nil || seq != 9 {
		t.Fatalf("verifySealed of a good snapshot: %d, %v", seq, err)
	}
	for _, damage := range []func([]byte) []byte{
		func(b []byte) []byte { b[len(b)/2] ^= 1; return b },
		func(b []byte) []byte { return b[:len(b)-1] },
		func(b []byte) []byte { return append(b, 0) },
		func(b []byte) []byte { b[3] = 'x'; return b },
		func(b []byte) []byte { return b[:40] },
	} {
		bad := damage(slices.Clone(want))
		_, errStream := verifySealed(bytes.NewReader(bad))
		_, errDecode := DecodeStateSnapshot(bad)
		if !errors.Is(errStream, ErrSnapshotCorrupt) || !errors.Is(errDecode, ErrSnapshotCorrupt) {
			t.Errorf("damaged snapshot: streamed check %v, decode %v", errStream, errDecode)
		}
	}
}
