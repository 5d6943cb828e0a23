package bayes

import (
	"strings"
	"testing"

	"github.com/shockwave-sched/shockwave/internal/wire"
)

// TestState_UnknownVersionIsRefusedByName: a forecaster state of a version
// this code does not write or read fails with an error naming the version.
// (Version 2 states load: policy's TestShockwaveState_Version1StateLoads…
// restores a Shockwave state whose forecaster was saved at version 2.)
func TestState_UnknownVersionIsRefusedByName(t *testing.T) {
	var e wire.Encoder
	e.Int(7)
	err := NewForecaster(DefaultForecastConfig()).UnmarshalState(e.Bytes())
	if err == nil || !strings.Contains(err.Error(), "state version 7") {
		t.Fatalf("a state of version 7 gave %v", err)
	}
}
