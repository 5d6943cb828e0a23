package coordinator

import (
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/shockwave-sched/shockwave/protocol"
)

// jobProtected are the subjects no job may publish on in none and token
// mode: the JetStream, key-value, object-store and system APIs, the log's
// subjects, and what only the coordinator sends (leases, the nodes'
// desired states).
func jobProtected(subj protocol.Subjects) []string {
	return []string{"$JS.>", "$KV.>", "$O.>", "$SYS.>", subj.Prefix + ".log.>", subj.AllLeases(), subj.Desired("*")}
}

// The jobs' permissions have no deny list (it cost every connection
// 3.4 KB): what keeps a job off the protected subjects is that no subject
// it may publish on can also match one of them, for any prefix shape and
// either mode. The runtime refusals are testForgeriesAreRefused's.
func TestPermissions_NothingAJobMayPublishReachesAProtectedSubject(t *testing.T) {
	for _, prefix := range []string{protocol.DefaultPrefix, "sw", "team.sched", "log", "job"} {
		subj := protocol.Subjects{Prefix: prefix}
		for _, none := range []bool{true, false} {
			perms := localJobPermissions(subj, none)
			if perms.Publish == nil || len(perms.Publish.Allow) == 0 {
				t.Fatalf("prefix %q, none %v: no publish allow list (everything would be allowed)", prefix, none)
			}
			for _, allowed := range perms.Publish.Allow {
				for _, protected := range jobProtected(subj) {
					if server.SubjectsCollide(allowed, protected) {
						t.Errorf("prefix %q, none %v: a job may publish on %q, which reaches protected %q", prefix, none, allowed, protected)
					}
				}
			}
		}
	}
}

// The check above can fail: a list that allowed the whole prefix would
// reach the log.
func TestPermissions_TheProtectionCheckSeesAWildcardAllow(t *testing.T) {
	subj := protocol.Subjects{Prefix: protocol.DefaultPrefix}
	hit := 0
	for _, protected := range jobProtected(subj) {
		if server.SubjectsCollide(subj.Prefix+".>", protected) {
			hit++
		}
	}
	if hit != 3 { // the log, the leases, the desired states
		t.Fatalf("%s.> reaches %d protected subjects, want 3", subj.Prefix, hit)
	}
}
