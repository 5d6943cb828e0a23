// Package headless drives a real headless Chromium for tests: it starts the
// browser with --remote-debugging-pipe and speaks the Chrome DevTools
// Protocol over that pipe (JSON messages separated by NUL bytes on file
// descriptors 3 and 4), so no WebSocket client is needed. It covers what the
// web view's tests use: open a page, evaluate JavaScript, take a screenshot.
package headless
