package pollux

import (
	"os/exec"
	"testing"
)

func goRun(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not found")
	}
	return exec.Command(goBin, append([]string{"run"}, args...)...)
}
