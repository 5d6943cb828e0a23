package headless

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestStart_ABrowserThatExitsAtOnceIsAnErrorNotAHang(t *testing.T) {
	exe, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true(1)")
	}
	t.Setenv("SHOCKWAVE_CHROMIUM", exe)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	b, err := Start(ctx, 100, 100)
	if err == nil {
		b.Close()
		t.Fatal("Start succeeded with a program that is no browser")
	}
	if errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("Start waited for the deadline: %v", err)
	}
	if !strings.Contains(err.Error(), "closed the pipe") {
		t.Errorf("error %q does not say the browser went away", err)
	}
}

func TestFind_HonoursTheEnvironment(t *testing.T) {
	t.Setenv("SHOCKWAVE_CHROMIUM", "/opt/some/chromium")
	if p, err := Find(); err != nil || p != "/opt/some/chromium" {
		t.Errorf("Find() = %q, %v", p, err)
	}
}
