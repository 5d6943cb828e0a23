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

func TestLease_DevicesMustMatchWorkersAndNameNodes(t *testing.T) {
	ok := Lease{V: Version, Job: "j", Action: Run, Workers: []int{4, 5}, Expiry: 1,
		Devices: []NodeDevices{{Node: "node-1", Devices: []int{0, 1}}}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := []Lease{ok, ok, ok}
	bad[0].Devices = []NodeDevices{{Node: "node-1", Devices: []int{0}}}
	bad[1].Devices = []NodeDevices{{Node: "a.b", Devices: []int{0, 1}}}
	bad[2].Devices = []NodeDevices{{Node: "n", Devices: []int{-1, 1}}}
	for i, l := range bad {
		if err := l.Validate(); err == nil {
			t.Errorf("case %d accepted: %+v", i, l)
		}
	}
}
