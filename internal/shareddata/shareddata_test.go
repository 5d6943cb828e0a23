package shareddata

import (
	"path/filepath"
	"testing"
)

// TestDir_SkipsWithTheSharedDataPrefixWhenAbsent is skipped on purpose when
// $SHOCKWAVE_SHARED_DATA names a missing directory; internal/testsummary's
// test runs it that way and counts the skip.
func TestDir_SkipsWithTheSharedDataPrefixWhenAbsent(t *testing.T) {
	if Find() != "" {
		t.Skip("shared data present")
	}
	Dir(t)
	t.Fatal("Dir returned without skipping although the data is absent")
}

func TestFind_AnEnvironmentPathThatIsNoDirectoryFindsNothing(t *testing.T) {
	t.Setenv(EnvVar, filepath.Join(t.TempDir(), "missing"))
	if d := Find(); d != "" {
		t.Errorf("Find() = %q", d)
	}
}
