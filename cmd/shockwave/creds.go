package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/shockwave-sched/shockwave/coordinator"
	"github.com/shockwave-sched/shockwave/protocol"
)

func init() {
	commands["creds"] = command{summary: "issue or revoke per-job NATS credentials (creds issue JOB, creds revoke JOB)", run: runCreds}
}

const credsUsage = "usage: shockwave creds issue [flags] JOB | shockwave creds revoke [flags] JOB"

func runCreds(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "revoke" {
		return runRevoke(args[1:], stdout, stderr)
	}
	if len(args) == 0 || args[0] != "issue" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprintln(stderr, credsUsage)
			return nil
		}
		return badInput(credsUsage)
	}
	fs := newFlags("creds issue", stderr)
	dataDir := fs.String("data-dir", "./shockwave-data", "data directory of a coordinator run with --auth creds")
	prefix := fs.String("prefix", protocol.DefaultPrefix, "subject prefix of the coordinator")
	expires := fs.Duration("expires", 0, "validity of the credentials (default: no expiry)")
	admin := fs.Bool("admin", false, "issue operator credentials that may read status, submit and cancel, named NAME")
	agentNode := fs.Bool("agent", false, "issue the credentials of the node agent of node NAME")
	name, err := parseOneArg(fs, args[1:], "JOB (or NAME with --admin or --agent)")
	if err != nil {
		return err
	}
	if *expires < 0 {
		return badInput("--expires: %v is negative", *expires)
	}
	subj, err := protocol.NewSubjects(*prefix)
	if err != nil {
		return usageError{err}
	}
	dir := filepath.Join(*dataDir, "auth")
	if _, err := os.Stat(filepath.Join(dir, "jobs.nk")); err != nil {
		return badInput("no credentials authority in %s: start the coordinator once with --auth creds --data-dir %s", dir, *dataDir)
	}
	auth, err := coordinator.LoadAuthority(dir, false)
	if err != nil {
		return err
	}
	var creds []byte
	switch {
	case *admin && *agentNode:
		return badInput("--admin and --agent exclude each other")
	case *agentNode:
		creds, err = auth.IssueAgent(subj, name, *expires)
	case *admin:
		creds, err = auth.IssueAdmin(subj, name, *expires)
	default:
		creds, err = auth.IssueJob(subj, name, *expires)
	}
	if err != nil {
		return usageError{err}
	}
	_, err = stdout.Write(creds)
	return err
}

// runRevoke revokes every credential issued to a job; a running
// coordinator disconnects the job within a second.
func runRevoke(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("creds revoke", stderr)
	dataDir := fs.String("data-dir", "./shockwave-data", "data directory of a coordinator run with --auth creds")
	job, err := parseOneArg(fs, args, "JOB")
	if err != nil {
		return err
	}
	if err := protocol.ValidateJobID("creds revoke", job); err != nil {
		return usageError{err}
	}
	dir := filepath.Join(*dataDir, "auth")
	if _, err := os.Stat(filepath.Join(dir, "jobs.nk")); err != nil {
		return badInput("no credentials authority in %s: start the coordinator once with --auth creds --data-dir %s", dir, *dataDir)
	}
	auth, err := coordinator.LoadAuthority(dir, false)
	if err != nil {
		return err
	}
	n, err := auth.Revoke(job, time.Now())
	if err != nil {
		return usageError{err}
	}
	_, err = fmt.Fprintf(stdout, "revoked %d credential(s) of job %s; a running coordinator disconnects it within a second\n", n, job)
	return err
}
