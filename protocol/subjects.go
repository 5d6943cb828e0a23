package protocol

import (
	"fmt"
	"strings"
)

// DefaultPrefix is the subject prefix the coordinator and the SDK use unless
// configured otherwise.
const DefaultPrefix = "shockwave"

// MaxPrefixLen bounds the subject prefix.
const MaxPrefixLen = 128

// Subjects names the NATS subjects of one coordinator. Every subject lives
// under Prefix:
//
//	<prefix>.register         request/reply: Register → RegisterReply
//	<prefix>.job.<id>.events  job → coordinator: Batch (stored in JetStream)
//	<prefix>.job.<id>.lease   coordinator → job: Lease
//	<prefix>.status           request/reply: StatusRequest → StatusReply
//
// With per-job credentials a job may publish only to the register subject and
// its own events subject, and subscribe only to its own lease subject and its
// own inbox (Inbox), which it must pass to nats.CustomInboxPrefix.
type Subjects struct {
	Prefix string
}

// NewSubjects validates prefix and returns its subjects.
func NewSubjects(prefix string) (Subjects, error) {
	if err := ValidatePrefix(prefix); err != nil {
		return Subjects{}, err
	}
	return Subjects{Prefix: prefix}, nil
}

// ValidatePrefix checks that p is one or more dot-separated subject tokens of
// letters, digits, '-' and '_', with no wildcards and no reserved start.
func ValidatePrefix(p string) error {
	if p == "" || len(p) > MaxPrefixLen {
		return fmt.Errorf("protocol: subject prefix %q: length must be in [1, %d]", p, MaxPrefixLen)
	}
	if strings.HasPrefix(p, "$") || strings.HasPrefix(p, "_INBOX") {
		return fmt.Errorf("protocol: subject prefix %q: reserved by NATS", p)
	}
	for _, tok := range strings.Split(p, ".") {
		if !isToken(tok) {
			return fmt.Errorf("protocol: subject prefix %q: token %q may contain only letters, digits, '-' and '_'", p, tok)
		}
	}
	return nil
}

// Register is the registration request subject.
func (s Subjects) Register() string { return s.Prefix + ".register" }

// Status is the status request subject.
func (s Subjects) Status() string { return s.Prefix + ".status" }

// Events is the subject job publishes its event batches on.
func (s Subjects) Events(job string) string { return s.Prefix + ".job." + job + ".events" }

// Lease is the subject job receives its leases on.
func (s Subjects) Lease(job string) string { return s.Prefix + ".job." + job + ".lease" }

// AllEvents matches every job's events subject.
func (s Subjects) AllEvents() string { return s.Events("*") }

// AllLeases matches every job's lease subject.
func (s Subjects) AllLeases() string { return s.Lease("*") }

// Inbox is the reply-subject prefix reserved for job: an SDK running with
// per-job credentials connects with nats.CustomInboxPrefix(s.Inbox(job)),
// because its credentials allow no other inbox.
func (s Subjects) Inbox(job string) string { return "_INBOX." + s.Prefix + "." + job }

// EventsJob returns the job id of an events subject, and false when subject
// is not one.
func (s Subjects) EventsJob(subject string) (string, bool) {
	return s.jobOf(subject, ".events")
}

// LeaseJob returns the job id of a lease subject, and false when subject is
// not one.
func (s Subjects) LeaseJob(subject string) (string, bool) {
	return s.jobOf(subject, ".lease")
}

func (s Subjects) jobOf(subject, suffix string) (string, bool) {
	rest, ok := strings.CutPrefix(subject, s.Prefix+".job.")
	if !ok {
		return "", false
	}
	id, ok := strings.CutSuffix(rest, suffix)
	if !ok || ValidateJobID("subject", id) != nil {
		return "", false
	}
	return id, true
}
