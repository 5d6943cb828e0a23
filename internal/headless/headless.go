package headless

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"time"
)

// ErrNoBrowser means no Chromium was found; tests skip on it outside CI.
var ErrNoBrowser = errors.New("headless: no chromium (Debian: apt-get install chromium; or set $SHOCKWAVE_CHROMIUM)")

// Find returns the Chromium executable: $SHOCKWAVE_CHROMIUM, else chromium
// or chromium-browser on PATH.
func Find() (string, error) {
	if p := os.Getenv("SHOCKWAVE_CHROMIUM"); p != "" {
		return p, nil
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", ErrNoBrowser
}

// Browser is a running headless Chromium with one page.
type Browser struct {
	cmd     *exec.Cmd
	out     *os.File // we write commands here (the browser's fd 3)
	in      *os.File // the browser's replies (its fd 4)
	dir     string
	session string
	stderr  syncBuffer

	mu      sync.Mutex
	next    int
	waiting map[int]chan reply
	readErr error
	done    chan struct{}
}

type reply struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// Start launches the browser with a fresh profile and a page of
// width x height CSS pixels.
func Start(ctx context.Context, width, height int) (*Browser, error) {
	exe, err := Find()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "shockwave-chromium-")
	if err != nil {
		return nil, err
	}
	cmdR, cmdW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	b := &Browser{out: cmdW, in: repR, dir: dir, waiting: map[int]chan reply{}, done: make(chan struct{})}
	b.cmd = exec.Command(exe, "--headless", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
		"--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check", "--hide-scrollbars",
		"--user-data-dir="+dir, fmt.Sprintf("--window-size=%d,%d", width, height), "about:blank")
	b.cmd.ExtraFiles = []*os.File{cmdR, repW}
	b.cmd.Stderr = &b.stderr
	if err := b.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("headless: starting %s: %w", exe, err)
	}
	cmdR.Close()
	repW.Close()
	go b.read()
	if err := b.openPage(ctx, width, height); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

func (b *Browser) openPage(ctx context.Context, width, height int) error {
	var target struct {
		TargetID string `json:"targetId"`
	}
	if err := b.call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"}, &target); err != nil {
		return err
	}
	var att struct {
		SessionID string `json:"sessionId"`
	}
	if err := b.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &att); err != nil {
		return err
	}
	b.session = att.SessionID
	return b.call(ctx, b.session, "Emulation.setDeviceMetricsOverride",
		map[string]any{"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}, nil)
}

// read dispatches the browser's replies to the calls waiting for them;
// events (messages without an id) are dropped.
func (b *Browser) read() {
	r := bufio.NewReader(b.in)
	var err error
	for {
		var msg []byte
		msg, err = r.ReadBytes(0)
		if err != nil {
			break
		}
		var m struct {
			ID int `json:"id"`
			reply
		}
		if json.Unmarshal(msg[:len(msg)-1], &m) != nil || m.ID == 0 {
			continue
		}
		b.mu.Lock()
		ch := b.waiting[m.ID]
		delete(b.waiting, m.ID)
		b.mu.Unlock()
		if ch != nil {
			ch <- m.reply
		}
	}
	b.mu.Lock()
	b.readErr = err
	b.mu.Unlock()
	close(b.done)
}

// call sends one DevTools command and decodes its result into out.
func (b *Browser) call(ctx context.Context, session, method string, params any, out any) error {
	b.mu.Lock()
	b.next++
	id := b.next
	ch := make(chan reply, 1)
	b.waiting[id] = ch
	b.mu.Unlock()
	msg := map[string]any{"id": id, "method": method, "params": params}
	if session != "" {
		msg["sessionId"] = session
	}
	data, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	if _, err := b.out.Write(append(data, 0)); err != nil {
		return fmt.Errorf("headless: %s: browser closed the pipe (%w; its stderr: %q)", method, err, b.stderr.String())
	}
	select {
	case r := <-ch:
		if r.Error != nil {
			return fmt.Errorf("headless: %s: %s", method, r.Error.Message)
		}
		if out != nil {
			return json.Unmarshal(r.Result, out)
		}
		return nil
	case <-b.done:
		return fmt.Errorf("headless: %s: browser closed the pipe (%v; its stderr: %q)", method, b.readErr, b.stderr.String())
	case <-ctx.Done():
		return fmt.Errorf("headless: %s: %w", method, ctx.Err())
	}
}

// Navigate opens url in the page.
func (b *Browser) Navigate(ctx context.Context, url string) error {
	var res struct {
		ErrorText string `json:"errorText"`
	}
	if err := b.call(ctx, b.session, "Page.navigate", map[string]any{"url": url}, &res); err != nil {
		return err
	}
	if res.ErrorText != "" {
		return fmt.Errorf("headless: navigating to %s: %s", url, res.ErrorText)
	}
	return nil
}

// Eval evaluates a JavaScript expression in the page and decodes its value
// (JSON-serializable values only) into out.
func (b *Browser) Eval(ctx context.Context, expr string, out any) error {
	var res struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		Exception *struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	if err := b.call(ctx, b.session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}, &res); err != nil {
		return err
	}
	if res.Exception != nil {
		return fmt.Errorf("headless: evaluating %q: %s", expr, res.Exception.Text)
	}
	if out == nil || len(res.Result.Value) == 0 {
		return nil
	}
	return json.Unmarshal(res.Result.Value, out)
}

// WaitFor evaluates a boolean expression until it is true or ctx ends.
func (b *Browser) WaitFor(ctx context.Context, expr string) error {
	for {
		var ok bool
		if err := b.Eval(ctx, expr, &ok); err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("headless: waiting for %s: %w", expr, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Screenshot returns a PNG of the page's viewport.
func (b *Browser) Screenshot(ctx context.Context) ([]byte, error) {
	var res struct {
		Data string `json:"data"`
	}
	if err := b.call(ctx, b.session, "Page.captureScreenshot", map[string]any{"format": "png"}, &res); err != nil {
		return nil, err
	}
	return base64.StdEncoding.DecodeString(res.Data)
}

// Close ends the browser and removes its profile.
func (b *Browser) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = b.call(ctx, "", "Browser.close", map[string]any{}, nil)
	b.out.Close()
	waited := make(chan error, 1)
	go func() { waited <- b.cmd.Wait() }()
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		_ = b.cmd.Process.Kill()
		<-waited
	}
	b.in.Close()
	return os.RemoveAll(b.dir)
}

// syncBuffer is the browser's stderr, written by exec's copier while a
// failing call reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}
