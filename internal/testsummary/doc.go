// Command testsummary reads `go test -json` on stdin, prints what a plain
// `go test` prints (a line per package, and the output of failing tests),
// and ends with a line counting the tests skipped for lack of the shared
// reference data (skips whose message starts with shareddata.SkipPrefix).
// `make test` runs the Go suite through it:
//
//	go test -json ./... | go run ./internal/testsummary
//
// Its exit status is 0; the Makefile keeps go test's own.
package main
