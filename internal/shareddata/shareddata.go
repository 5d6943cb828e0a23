// Package shareddata locates the reference data of the original Shockwave
// (traces, throughput measurements, configs, released results) that sits in
// ../shared/data beside a checkout. Tests that need it skip, with a message
// that starts with SkipPrefix and says where it was looked for, when it is
// absent; `make test` counts those skips (internal/testsummary).
package shareddata

import (
	"os"
	"path/filepath"
	"testing"
)

// EnvVar overrides the location of the shared data directory.
const EnvVar = "SHOCKWAVE_SHARED_DATA"

// SkipPrefix starts the message of every skip for lack of shared data.
const SkipPrefix = "shared data absent: "

// Find returns the shared data directory, or "" when it cannot be found. It
// honours $SHOCKWAVE_SHARED_DATA, then walks up from the working directory to
// the module root (the directory holding go.mod) and looks at ../shared/data.
func Find() string {
	if d := os.Getenv(EnvVar); d != "" {
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			return d
		}
		return ""
	}
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			d := filepath.Join(filepath.Dir(dir), "shared", "data")
			if st, err := os.Stat(d); err == nil && st.IsDir() {
				return d
			}
			return ""
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// Dir returns the shared data directory or skips the test.
func Dir(tb testing.TB) string {
	tb.Helper()
	d := Find()
	if d == "" {
		tb.Skipf(SkipPrefix+"reference data not found: set $%s or place the shared/ folder beside the checkout (../shared/data)", EnvVar)
	}
	return d
}

// File returns the path of a file in the shared data directory or skips.
func File(tb testing.TB, name string) string {
	tb.Helper()
	p := filepath.Join(Dir(tb), name)
	if _, err := os.Stat(p); err != nil {
		tb.Skipf(SkipPrefix+"reference file %s not found: %v", name, err)
	}
	return p
}
