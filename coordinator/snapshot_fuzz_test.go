package coordinator

import (
	"bytes"
	"encoding/binary"
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/shockwave-sched/shockwave/policy"
	"github.com/shockwave-sched/shockwave/protocol"
)

// FuzzDecodeSnapshot feeds the state snapshot decoder arbitrary bytes, and
// arbitrary payloads inside a valid envelope (sealed: the SHA-256 matches,
// so the payload decoder itself is exercised), compressed and plain; and
// arbitrary bytes as the compressed body of a valid envelope (the
// inflating). Neither may panic; a sealed payload must come back as it
// was, an accepted envelope must restore or fail with ErrSnapshotCorrupt,
// and a restored state must encode again. Seeds are real snapshots of
// several policies.
func FuzzDecodeSnapshot(f *testing.F) {
	for _, name := range []string{"shockwave", "gavel", "themis", "allox"} {
		h := newHistory(f, name, policy.Options{}, 4, 9)
		h.run(3, 4) // small seeds: the fuzzer mutates faster
		payload, err := h.f.encodePayload()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(sealSnapshot(h.f.seq, h.f.core.NextRound(), payload), false)
		f.Add(sealPlain(h.f.seq, h.f.core.NextRound(), payload), false)
		f.Add(payload, true)
	}
	f.Add([]byte(snapshotMagic), false)
	f.Add([]byte{}, true)
	f.Fuzz(func(t *testing.T, data []byte, seal bool) {
		if seal {
			body := append(make([]byte, snapshotHeader), data...)
			if _, err := DecodeStateSnapshot(sealBody(7, 2, snapshotDeflate, body)); err != nil && !errors.Is(err, ErrSnapshotCorrupt) {
				t.Fatalf("arbitrary compressed body: %v", err)
			}
			for _, sealed := range [][]byte{sealPlain(7, 2, data), sealSnapshot(7, 2, data)} {
				s, err := DecodeStateSnapshot(sealed)
				if err != nil || !bytes.Equal(s.payload, data) {
					t.Fatalf("a sealed payload did not come back (flags %d): %v", sealed[12], err)
				}
			}
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

// TestSnapshot_TheReadBackCheckRefusesWhatDecodingRefuses: the writer's
// read-back check (verifySealed, which does not keep the payload) accepts
// a good snapshot, compressed or plain, and refuses what
// DecodeStateSnapshot refuses.
func TestSnapshot_TheReadBackCheckRefusesWhatDecodingRefuses(t *testing.T) {
	payload := slices.Concat([]byte("head"), bytes.Repeat([]byte{7}, 100_000), []byte("tail"))
	for _, want := range [][]byte{sealSnapshot(9, 3, payload[:4], payload[4:100_004], nil, payload[100_004:]), sealPlain(9, 3, payload)} {
		if seq, err := verifySealed(bytes.NewReader(want)); err != nil || seq != 9 {
			t.Fatalf("verifySealed of a good snapshot (flags %d): %d, %v", want[12], seq, err)
		}
		if s, err := DecodeStateSnapshot(want); err != nil || !bytes.Equal(s.payload, payload) {
			t.Fatalf("decoding a good snapshot (flags %d): %v", want[12], err)
		}
		testReadBackDamage(t, want)
	}
}

func testReadBackDamage(t *testing.T, want []byte) {
	t.Helper()
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

// A compressed body inside a valid envelope (the digest matches) must
// inflate to exactly the length it declares, with nothing after its
// stream; anything else is refused by name, by both checks.
func TestSnapshot_ACompressedBodyThatDoesNotInflateToItsLengthIsRefused(t *testing.T) {
	payload := bytes.Repeat([]byte("shockwave state "), 4096)
	good := sealSnapshot(5, 1, payload)[snapshotHeader:]
	stream := good[8:]
	withLength := func(n uint64, stream []byte) []byte {
		return append(binary.LittleEndian.AppendUint64(nil, n), stream...)
	}
	n := uint64(len(payload))
	for _, c := range []struct {
		name string
		body []byte
		want string
	}{
		{"no length", good[:4], "has no payload length"},
		{"over the limit", withLength(MaxSnapshotBytes+1, stream), "exceeds the limit"},
		{"declares more", withLength(n+1, stream), "inflates to"},
		{"declares less", withLength(n-1, stream), "inflates past"},
		{"bytes after the stream", append(slices.Clone(good), 0), "after the compressed payload"},
		{"not DEFLATE", withLength(n, bytes.Repeat([]byte{0xff}, 64)), "inflating the payload"},
		{"stream cut short", good[:len(good)-5], "inflating the payload"},
	} {
		data := sealBody(5, 1, snapshotDeflate, append(make([]byte, snapshotHeader), c.body...))
		_, errDecode := DecodeStateSnapshot(data)
		_, errStream := verifySealed(bytes.NewReader(data))
		for _, err := range []error{errDecode, errStream} {
			if !errors.Is(err, ErrSnapshotCorrupt) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: got %v, want an ErrSnapshotCorrupt naming %q", c.name, err, c.want)
			}
		}
	}
	if s, err := DecodeStateSnapshot(sealBody(5, 1, snapshotDeflate, append(make([]byte, snapshotHeader), good...))); err != nil || !bytes.Equal(s.payload, payload) {
		t.Fatalf("the intact body: %v", err)
	}
}

// A body that declares the largest payload but holds a few bytes of
// stream reserves what those bytes can inflate to, not what they declare.
func TestSnapshot_ADeclaredPayloadLengthAloneAllocatesNothing(t *testing.T) {
	body := sealSnapshot(5, 1, []byte("x"))[snapshotHeader:]
	binary.LittleEndian.PutUint64(body, MaxSnapshotBytes)
	data := sealBody(5, 1, snapshotDeflate, append(make([]byte, snapshotHeader), body...))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := DecodeStateSnapshot(data)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrSnapshotCorrupt) {
		t.Fatalf("got %v, want ErrSnapshotCorrupt", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Fatalf("decoding a %d-byte snapshot that declares %d bytes allocated %d bytes", len(data), uint64(MaxSnapshotBytes), got)
	}
}
