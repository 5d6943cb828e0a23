// Command shockwave is the one binary of the Shockwave scheduler: the
// coordinator service, the trace-driven simulator, and the tools around them.
//
//	shockwave coordinator [flags]  run the coordinator service (embedded NATS by default)
//	shockwave status [flags]       print a running coordinator's job table and last plan
//	shockwave creds issue JOB      print per-job NATS credentials
//	shockwave simulate [flags]     compare Shockwave with the baselines on a trace
//	shockwave demo [flags]         synthetic jobs on an embedded coordinator, a line per round
//	shockwave version              print the version
//
// Run "shockwave <command> -h" for a command's flags.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

// usageError marks bad input: the command exits with status 2.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

func badInput(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	name := args[0]
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "shockwave: unknown command %q\n", name)
		usage(stderr)
		return 2
	}
	err := cmd.run(args[1:], stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, new(usageError)):
		fmt.Fprintf(stderr, "shockwave %s: %v\n", name, err)
		return 2
	default:
		fmt.Fprintf(stderr, "shockwave %s: %v\n", name, err)
		return 1
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: shockwave <command> [flags]")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-12s %s\n", n, commands[n].summary)
	}
}

// newFlags returns a flag set that reports errors instead of exiting.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("shockwave "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses args and turns flag errors into usage errors.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := parseFlagsAndArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return badInput("unexpected argument %q", strings.Join(fs.Args(), " "))
	}
	return nil
}

// parseFlagsAndArgs parses flags and leaves the positional arguments in
// fs.Args(); a bad flag is a usage error.
func parseFlagsAndArgs(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	return nil
}

// parseOneArg parses flags followed by exactly one positional argument,
// which it returns; what names it in the error (e.g. "JOB").
func parseOneArg(fs *flag.FlagSet, args []string, what string) (string, error) {
	if err := parseFlagsAndArgs(fs, args); err != nil {
		return "", err
	}
	if fs.NArg() != 1 {
		return "", badInput("%s: want exactly one %s, got %d arguments", fs.Name(), what, fs.NArg())
	}
	return fs.Arg(0), nil
}

func init() {
	commands["version"] = command{summary: "print the version", run: func(_ []string, stdout, _ io.Writer) error {
		fmt.Fprintln(stdout, "shockwave", version)
		return nil
	}}
}
