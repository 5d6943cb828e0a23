// Package thrtable reads the isolated V100 throughputs out of the original
// Shockwave throughput files (spec §2.2) and renders them as Go source for
// the built-in tables of package workload. It is shared by the workload
// package (LoadThroughputs) and by its generator (internal/gen), so the two
// can never disagree on how a file is read.
package thrtable

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"go/format"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// WorkerType is the only worker type of the throughput files that the
// experiments use (spec §2.2).
const WorkerType = "v100"

// isolatedKey is the entry that holds a job's isolated throughput; every
// other entry under a job is a co-location pair, which is ignored.
const isolatedKey = "null"

// Entry is one isolated throughput: a job type on ScaleFactor GPUs runs at
// StepsPerSecond training iterations per second, all workers together.
type Entry struct {
	JobType        string
	ScaleFactor    int
	StepsPerSecond float64
}

// Parse reads a throughput file in the original JSON format and returns the
// isolated figures of the v100 worker type, sorted by Less. Entries without
// an isolated figure are skipped; anything malformed is an error that names
// the offending key.
func Parse(r io.Reader) ([]Entry, error) {
	var top map[string]json.RawMessage
	if err := json.NewDecoder(r).Decode(&top); err != nil {
		return nil, fmt.Errorf("not a throughput file (JSON object of worker types): %v", err)
	}
	raw, ok := top[WorkerType]
	if !ok {
		return nil, fmt.Errorf("no %q worker type", WorkerType)
	}
	var jobs map[string]map[string]json.RawMessage
	if err := json.Unmarshal(raw, &jobs); err != nil {
		return nil, fmt.Errorf("%s: not an object of jobs: %v", WorkerType, err)
	}
	out := make([]Entry, 0, len(jobs))
	for key, vals := range jobs {
		jt, sf, err := ParseKey(key)
		if err != nil {
			return nil, fmt.Errorf("%s: key %q: %v", WorkerType, key, err)
		}
		v, ok := vals[isolatedKey]
		if !ok {
			continue
		}
		var f float64
		if err := json.Unmarshal(v, &f); err != nil || bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			return nil, fmt.Errorf("%s: key %q: isolated throughput %s is not a number", WorkerType, key, v)
		}
		if f < 0 {
			return nil, fmt.Errorf("%s: key %q: isolated throughput %v is negative", WorkerType, key, f)
		}
		out = append(out, Entry{JobType: jt, ScaleFactor: sf, StepsPerSecond: f})
	}
	slices.SortFunc(out, Compare)
	for i := 1; i < len(out); i++ {
		if out[i-1].JobType == out[i].JobType && out[i-1].ScaleFactor == out[i].ScaleFactor {
			return nil, fmt.Errorf("%s: job type %q on %d GPUs appears twice", WorkerType, out[i].JobType, out[i].ScaleFactor)
		}
	}
	return out, nil
}

// ParseKey splits a Python tuple string such as
// "('ResNet-18 (batch size 64)', 2)" into its job type and scale factor.
func ParseKey(key string) (jobType string, sf int, err error) {
	s := strings.TrimSpace(key)
	if len(s) < 2 || s[0] != '(' || s[len(s)-1] != ')' {
		return "", 0, errors.New("not a (job_type, scale_factor) tuple")
	}
	s = s[1 : len(s)-1]
	comma := strings.LastIndexByte(s, ',')
	if comma < 0 {
		return "", 0, errors.New("not a (job_type, scale_factor) tuple")
	}
	quoted, num := strings.TrimSpace(s[:comma]), strings.TrimSpace(s[comma+1:])
	if len(quoted) < 2 || (quoted[0] != '\'' && quoted[0] != '"') || quoted[len(quoted)-1] != quoted[0] {
		return "", 0, errors.New("job type is not a quoted string")
	}
	jobType = quoted[1 : len(quoted)-1]
	if jobType == "" || strings.ContainsAny(jobType, "\\'\"") {
		return "", 0, fmt.Errorf("unsupported job type %s", quoted)
	}
	sf, err = strconv.Atoi(num)
	if err != nil || sf < 1 {
		return "", 0, fmt.Errorf("scale factor %q is not a positive integer", num)
	}
	return jobType, sf, nil
}

// Compare orders entries by model name, then numeric batch size, then
// scale factor, so that tables read naturally.
func Compare(a, b Entry) int {
	am, ab := splitJobType(a.JobType)
	bm, bb := splitJobType(b.JobType)
	return cmp.Or(cmp.Compare(am, bm), cmp.Compare(ab, bb), cmp.Compare(a.JobType, b.JobType),
		cmp.Compare(a.ScaleFactor, b.ScaleFactor))
}

// splitJobType returns the text before " (batch size" and the batch size,
// or the whole string and 0 when it has no batch size.
func splitJobType(jt string) (string, int) {
	i := strings.Index(jt, " (batch size ")
	if i < 0 || !strings.HasSuffix(jt, ")") {
		return jt, 0
	}
	bs, err := strconv.Atoi(jt[i+len(" (batch size ") : len(jt)-1])
	if err != nil {
		return jt, 0
	}
	return jt[:i], bs
}

// Set is one named table for Render.
type Set struct {
	Name    string // "tacc", "wisr"
	Source  string // file it was read from, for the comment
	Entries []Entry
}

// Header is the provenance comment of the generated table.
const Header = `Measured isolated throughputs (steps/s, V100) from the original Shockwave
artifact, uw-mad-dash/shockwave at commit 8a44f4a, files tacc_throughputs.json
and wisr_throughputs.json (MIT License, Copyright (c) 2022 Data and Systems Hub
at UW-Madison). Only the isolated ("null") figures of the v100 worker type
are kept; co-location pairs are dropped (spec §2.2). Values keep full float64
precision.`

// Render returns gofmt-ed Go source, in package pkg, that declares
//
//	var builtinThroughputs = map[string][]isolated{...}
//
// with one entry per set. The isolated type (jobType string, sf int,
// stepsPerSecond float64) is declared by package workload.
func Render(pkg string, sets []Set) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("// Code generated by go run ./internal/gen; DO NOT EDIT.\n\n")
	for _, line := range strings.Split(Header, "\n") {
		b.WriteString("// " + line + "\n")
	}
	fmt.Fprintf(&b, "\npackage %s\n\n", pkg)
	b.WriteString("var builtinThroughputs = map[string][]isolated{\n")
	for _, s := range sets {
		fmt.Fprintf(&b, "\t// %s\n", s.Source)
		fmt.Fprintf(&b, "\t%q: {\n", s.Name)
		for _, e := range s.Entries {
			fmt.Fprintf(&b, "\t\t{%q, %d, %s},\n", e.JobType, e.ScaleFactor,
				strconv.FormatFloat(e.StepsPerSecond, 'g', -1, 64))
		}
		b.WriteString("\t},\n")
	}
	b.WriteString("}\n")
	return format.Source(b.Bytes())
}

// Files names the built-in tables and the reference files they come from.
var Files = []struct{ Name, File string }{
	{"tacc", "tacc_throughputs.json"},
	{"wisr", "wisr_throughputs.json"},
}

// Generate reads the files of Files from dataDir and renders them (Render).
func Generate(dataDir, pkg string) ([]byte, error) {
	var sets []Set
	for _, s := range Files {
		f, err := os.Open(filepath.Join(dataDir, s.File))
		if err != nil {
			return nil, err
		}
		entries, err := Parse(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %v", s.File, err)
		}
		sets = append(sets, Set{Name: s.Name, Source: s.File, Entries: entries})
	}
	return Render(pkg, sets)
}
