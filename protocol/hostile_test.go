package protocol

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// TestDecodeBatch_HostileInputsAreRefusedInMemoryLinearInTheirSize feeds
// the one-pass decoder messages at the default size limit built to cost it
// most: deep nesting, one huge number, one huge string, many keys, many
// events. None panics, each is refused with the error naming the problem,
// and the bytes allocated stay within a fixed multiple of the input.
func TestDecodeBatch_HostileInputsAreRefusedInMemoryLinearInTheirSize(t *testing.T) {
	const n = DefaultMaxMessageBytes
	fill := func(prefix, unit, suffix string) string {
		return prefix + strings.Repeat(unit, (n-len(prefix)-len(suffix))/len(unit)) + suffix
	}
	deep := `{"v":1,"x":` + strings.Repeat("[", maxDepth-1) + strings.Repeat("]", maxDepth-1) + `}`
	cases := []struct{ name, in, reason, mention string }{
		{"nesting at encoding/json's limit", deep, "malformed", `unknown field "x"`},
		{"nesting beyond it", fill(`{"v":1,"job":`, "[", ""), "malformed", "exceeded max depth"},
		{"a number of 256 KiB", fill(`{"v":1,"job":"j","events":[{"v":1,"seq":`, "7", `}]}`), "malformed", `"events.seq": number 777`},
		{"a float of 256 KiB", fill(`{"v":1,"job":"j","events":[{"v":1,"elapsed":1`, "0", `}]}`), "malformed", `"events.elapsed": number 1000`},
		{"a string of 256 KiB", fill(`{"v":1,"job":"`, "x", `","events":[]}`), "invalid", "job id longer than 128 bytes"},
		{"an escaped string of 256 KiB", fill(`{"v":1,"job":"`, `\u00e9`, `","events":[]}`), "invalid", "job id longer than 128 bytes"},
		{"many repeated keys", fill(`{"v":1,"job":{`, `"k":0,`, `"k":0}}`), "malformed", `duplicate field "job.k"`},
		{"many distinct keys", distinctKeys(`{"v":1,"job":{`, n), "malformed", `field "job": object is not a string`},
		{"many keys of an unknown field", fill(`{"v":1,"x":{"`, "a", `":0}}`), "malformed", `unknown field "x"`},
		{"many empty events", fill(`{"v":1,"job":"j","events":[`, "{},", "{}]}"), "invalid", `"events[0].job"`},
		{"many null events", fill(`{"v":1,"job":"j","events":[`, "null,", "null]}"), "invalid", `"events[0].job"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if len(c.in) > n {
				t.Fatalf("input of %d bytes is over the limit", len(c.in))
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, err := decodeBatch([]byte(c.in), 0)
			runtime.ReadMemStats(&after)
			if err == nil || Reason(err) != c.reason || !strings.Contains(err.Error(), c.mention) {
				t.Fatalf("error %.200v; want a %s error mentioning %q", err, c.reason, c.mention)
			}
			// The worst is events: 104 bytes each for 3 bytes of "{},",
			// in a slice that doubles (at most 4× the bytes it keeps).
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 128*uint64(len(c.in)) {
				t.Errorf("allocated %d bytes for a %d-byte input", alloc, len(c.in))
			}
			if d := diffBatchDecoders([]byte(c.in), 0); d != "" {
				t.Errorf("differs from the old decoder: %.300s", d)
			}
		})
	}
}

// distinctKeys is prefix and an object of distinct keys, n bytes in all.
func distinctKeys(prefix string, n int) string {
	var b strings.Builder
	b.WriteString(prefix)
	for i := 0; b.Len() < n-32; i++ {
		fmt.Fprintf(&b, `"k%d":0,`, i)
	}
	b.WriteString(`"end":0}}`)
	return b.String()
}
