package protocol

import (
	"strings"
	"testing"
)

// TestRegister_RejectsAbsurdEpochCounts: a registration whose steps imply
// more than MaxJobEpochs epochs is refused, naming total_steps.
func TestRegister_RejectsAbsurdEpochCounts(t *testing.T) {
	r := Register{V: Version, Job: "a", Model: "m", Workers: 1, BatchSize: 32, DatasetSize: 50000, TotalSteps: 1e9}
	err := r.Validate()
	if err == nil || !strings.Contains(err.Error(), "total_steps") {
		t.Fatalf("got %v, want an error naming total_steps", err)
	}
	r.TotalSteps = 1563 * 800 // 800 epochs of ceil(50000/32) steps
	if err := r.Validate(); err != nil {
		t.Fatalf("a long but sane job was refused: %v", err)
	}
}
