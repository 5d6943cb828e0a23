package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/shockwave-sched/shockwave/internal/shareddata"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

type key struct{ pkg, test string }

// summary accumulates the stream.
type summary struct {
	out     io.Writer
	pending map[key][]string // output of a running test, kept until it ends
	skipped int              // tests skipped for lack of shared data
	names   []string
}

func newSummary(out io.Writer) *summary {
	return &summary{out: out, pending: map[key][]string{}}
}

// noise is the per-test chatter that only `go test -v` shows.
func noise(line string) bool {
	t := strings.TrimLeft(line, " ")
	for _, p := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME", "--- PASS", "--- SKIP"} {
		if strings.HasPrefix(t, p) {
			return true
		}
	}
	return false
}

func (s *summary) add(e event) {
	k := key{e.Package, e.Test}
	switch {
	case e.Action == "build-output":
		fmt.Fprint(s.out, e.Output)
	case e.Test == "" && e.Action == "output":
		// Package lines: "ok  \tpkg\t0.1s", "FAIL\tpkg", "?   \tpkg\t[no test files]",
		// and what a crashed test binary printed. A plain run omits "PASS".
		if e.Output != "PASS\n" && !noise(e.Output) {
			fmt.Fprint(s.out, e.Output)
		}
	case e.Action == "output":
		s.pending[k] = append(s.pending[k], e.Output)
	case e.Action == "fail":
		for _, l := range s.pending[k] {
			if !noise(l) {
				fmt.Fprint(s.out, l)
			}
		}
		delete(s.pending, k)
	case e.Action == "skip" && e.Test != "":
		if strings.Contains(strings.Join(s.pending[k], ""), shareddata.SkipPrefix) {
			s.skipped++
			s.names = append(s.names, e.Package+"."+e.Test)
		}
		delete(s.pending, k)
	case e.Action == "pass":
		delete(s.pending, k)
	}
}

// finish prints the count of tests skipped for lack of shared data.
func (s *summary) finish() {
	if s.skipped == 0 {
		fmt.Fprintln(s.out, "0 tests skipped for lack of ../shared data")
		return
	}
	noun := "tests"
	if s.skipped == 1 {
		noun = "test"
	}
	fmt.Fprintf(s.out, "%d %s skipped for lack of ../shared data (set $%s or place shared/ beside the checkout)\n",
		s.skipped, noun, shareddata.EnvVar)
}

func main() {
	s := newSummary(os.Stdout)
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fmt.Println(sc.Text()) // not an event: pass it through
			continue
		}
		s.add(e)
	}
	s.finish()
}
