package coordinator

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// With SHOCKWAVE_LOAD_NATS=process and SHOCKWAVE_LOAD_SERVER_GCTRACE=1 the
// load test reads the server process's gctrace lines and places its
// collections on the test's clock, so that the busiest tenths of a second
// for late batches can be matched to the marks that overlapped them
// (docs/scale.md, session 15: the resident scenario's tail with the
// server apart is its collections).

// gcMark is one collection of the server's process: the wall time its
// cycle began, how long its phases took on the wall clock (the two
// stop-the-world pauses and the concurrent mark between them), the CPU its
// mutators spent assisting, and the live heap after it.
type gcMark struct {
	start           time.Time
	wall, assist    time.Duration
	heapAfterMB, id int
}

func (m gcMark) end() time.Time { return m.start.Add(m.wall) }

// gcLog collects the marks of a gctrace stream; started is when the
// process began (gctrace's @ offsets count from there).
type gcLog struct {
	started time.Time
	mu      sync.Mutex
	marks   []gcMark
}

// gctraceLine is the runtime's line: "gc N @S s P%: A+B+C ms clock,
// D+E/F/G+H ms cpu, X->Y->Z MB, ...": E is the assist time.
var gctraceLine = regexp.MustCompile(`^gc (\d+) @([0-9.]+)s \d+%: ([0-9.]+)\+([0-9.]+)\+([0-9.]+) ms clock, [0-9.]+\+([0-9.]+)/[0-9.]+/[0-9.]+\+[0-9.]+ ms cpu, \d+->\d+->(\d+) MB`)

// read parses r until it ends, passing every line on to w.
func (g *gcLog) read(r io.Reader, w io.Writer) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(w, line)
		if m, ok := parseGCTrace(line, g.started); ok {
			g.mu.Lock()
			g.marks = append(g.marks, m)
			g.mu.Unlock()
		}
	}
}

func parseGCTrace(line string, started time.Time) (gcMark, bool) {
	f := gctraceLine.FindStringSubmatch(line)
	if f == nil {
		return gcMark{}, false
	}
	num := func(i int) float64 { v, _ := strconv.ParseFloat(f[i], 64); return v }
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	return gcMark{id: int(num(1)), start: started.Add(time.Duration(num(2) * float64(time.Second))),
		wall: ms(num(3) + num(4) + num(5)), assist: ms(num(6)), heapAfterMB: int(num(7))}, true
}

// overlapping returns the marks that overlap [from, to).
func (g *gcLog) overlapping(from, to time.Time) []gcMark {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []gcMark
	for _, m := range g.marks {
		if m.start.Before(to) && m.end().After(from) {
			out = append(out, m)
		}
	}
	return out
}

// describe says which of the server's marks overlapped a tenth of a second.
func (g *gcLog) describe(tenth time.Time) string {
	ms := g.overlapping(tenth, tenth.Add(100*time.Millisecond))
	if len(ms) == 0 {
		return ""
	}
	m := slices.MaxFunc(ms, func(a, b gcMark) int { return int(a.assist - b.assist) })
	return fmt.Sprintf(" (server mark %v, assist %v)", m.wall.Round(time.Millisecond), m.assist.Round(time.Millisecond))
}

// summary describes the server's collections between from and to.
func (g *gcLog) summary(from, to time.Time) string {
	ms := g.overlapping(from, to)
	if len(ms) == 0 {
		return "no collections of the server's process since the first tick"
	}
	walls := make([]time.Duration, len(ms))
	assists := make([]time.Duration, len(ms))
	live := 0
	for i, m := range ms {
		walls[i], assists[i] = m.wall, m.assist
		live = max(live, m.heapAfterMB)
	}
	slices.Sort(walls)
	slices.Sort(assists)
	return fmt.Sprintf("%d collections of the server's process since the first tick: mark p50 %v, max %v; assist p50 %v, max %v; up to %d MB live after one",
		len(ms), walls[len(walls)/2].Round(time.Millisecond), walls[len(walls)-1].Round(time.Millisecond),
		assists[len(assists)/2].Round(time.Millisecond), assists[len(assists)-1].Round(time.Millisecond), live)
}

func TestGCTrace_ALineBecomesAMarkOnTheTestsClock(t *testing.T) {
	started := time.Date(2026, 1, 1, 8, 0, 0, 0, time.UTC)
	m, ok := parseGCTrace("gc 21 @36.366s 3%: 0.20+455+0.056 ms clock, 0.41+416/234/0+0.11 ms cpu, 546->584->330 MB, 617 MB goal, 15 MB stacks, 0 MB globals, 2 P", started)
	if !ok {
		t.Fatal("a gctrace line was not parsed")
	}
	want := gcMark{id: 21, start: started.Add(36366 * time.Millisecond), wall: 455256 * time.Microsecond, assist: 416 * time.Millisecond, heapAfterMB: 330}
	if m != want {
		t.Fatalf("parsed %+v, want %+v", m, want)
	}
	if _, ok := parseGCTrace("gc 1 @0.022s 1%: garbled", started); ok {
		t.Error("a garbled line was parsed")
	}
	g := &gcLog{started: started, marks: []gcMark{m}}
	if d := g.describe(started.Add(36500 * time.Millisecond)); d != " (server mark 455ms, assist 416ms)" {
		t.Errorf("a tenth inside the mark: %q", d)
	}
	if d := g.describe(started.Add(37 * time.Second)); d != "" {
		t.Errorf("a tenth after the mark: %q", d)
	}
}
