package coordinator

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/shockwave-sched/shockwave/protocol"
)

// AuthMode selects how the embedded NATS server authenticates clients.
type AuthMode string

// Authentication modes.
const (
	// AuthNone accepts every client: for development on a loopback
	// address (the command warns when the listen address is not one).
	AuthNone AuthMode = "none"
	// AuthToken requires one shared token of every client. It keeps
	// strangers out; it does not keep jobs apart.
	AuthToken AuthMode = "token"
	// AuthCreds gives every job its own credentials (a NATS user JWT signed
	// by the coordinator's JOBS account key, in a standard .creds file)
	// whose permissions cover only that job's subjects: publish on the
	// register subject and its own events subject, subscribe to its own
	// lease subject and its own inbox, and both on its own ranks subject
	// (where the processes of a multi-rank job agree on their stop step). Jobs live in the JOBS account, which
	// imports the coordinator's subjects from the COORD account; the server
	// stamps every registration with the requester's identity, and the
	// coordinator refuses a registration of another job's id.
	AuthCreds AuthMode = "creds"
)

// ParseAuthMode checks a mode name.
func ParseAuthMode(s string) (AuthMode, error) {
	switch m := AuthMode(s); m {
	case AuthNone, AuthToken, AuthCreds:
		return m, nil
	}
	return "", fmt.Errorf("coordinator: unknown auth mode %q (want none, token or creds)", s)
}

// IsLoopback reports whether a listen address (host:port) binds only the
// loopback interface.
func IsLoopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		host = listen
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Authority holds the keys of per-job credentials: an operator, a system
// account, the COORD account (the coordinator, its log and admins) and the
// JOBS account (one user per job). The seeds live in files under a
// directory readable by the coordinator's user only.
type Authority struct {
	operator, system, coord, jobs nkeys.KeyPair
	dir                           string
	revokeMu                      sync.Mutex // one revocation write at a time in this process
}

var authorityFiles = []string{"operator.nk", "system.nk", "coord.nk", "jobs.nk"}

// LoadAuthority reads the keys from dir; with create, it generates the ones
// that are missing.
func LoadAuthority(dir string, create bool) (*Authority, error) {
	if create {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
	}
	kps := make([]nkeys.KeyPair, len(authorityFiles))
	for i, name := range authorityFiles {
		path := filepath.Join(dir, name)
		seed, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) && create {
			seed, err = newSeed(i == 0)
			if err == nil {
				err = os.WriteFile(path, seed, 0o600)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("coordinator: credentials authority: %w", err)
		}
		if kps[i], err = nkeys.FromSeed(seed); err != nil {
			return nil, fmt.Errorf("coordinator: credentials authority %s: %w", path, err)
		}
	}
	return &Authority{operator: kps[0], system: kps[1], coord: kps[2], jobs: kps[3], dir: dir}, nil
}

func newSeed(operator bool) ([]byte, error) {
	create := nkeys.CreateAccount
	if operator {
		create = nkeys.CreateOperator
	}
	kp, err := create()
	if err != nil {
		return nil, err
	}
	return kp.Seed()
}

func pub(kp nkeys.KeyPair) string {
	p, _ := kp.PublicKey()
	return p
}

// trust returns the operator claims and the account JWTs the server needs
// for subjects s.
func (a *Authority) trust(s protocol.Subjects) (*jwt.OperatorClaims, map[string]string, error) {
	op := jwt.NewOperatorClaims(pub(a.operator))
	op.Name = "shockwave"
	op.SystemAccount = pub(a.system)
	opJWT, err := op.Encode(a.operator)
	if err != nil {
		return nil, nil, err
	}
	if op, err = jwt.DecodeOperatorClaims(opJWT); err != nil {
		return nil, nil, err
	}
	sys := jwt.NewAccountClaims(pub(a.system))
	sys.Name = "SYS"
	coord := jwt.NewAccountClaims(pub(a.coord))
	coord.Name = "COORD"
	coord.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	coord.Exports.Add(
		&jwt.Export{Name: "register", Subject: jwt.Subject(s.Register()), Type: jwt.Service},
		&jwt.Export{Name: "events", Subject: jwt.Subject(s.AllEvents()), Type: jwt.Service},
		&jwt.Export{Name: "leases", Subject: jwt.Subject(s.AllLeases()), Type: jwt.Stream},
	)
	jobs := jwt.NewAccountClaims(pub(a.jobs))
	jobs.Name = "JOBS"
	revs, err := a.revocations()
	if err != nil {
		return nil, nil, err
	}
	for key, at := range revs {
		jobs.RevokeAt(key, time.Unix(at, 0))
	}
	jobs.Imports.Add(
		&jwt.Import{Name: "register", Subject: jwt.Subject(s.Register()), Account: pub(a.coord), Type: jwt.Service, Share: true},
		&jwt.Import{Name: "events", Subject: jwt.Subject(s.AllEvents()), Account: pub(a.coord), Type: jwt.Service},
		&jwt.Import{Name: "leases", Subject: jwt.Subject(s.AllLeases()), Account: pub(a.coord), Type: jwt.Stream},
	)
	accounts := map[string]string{}
	for _, c := range []*jwt.AccountClaims{sys, coord, jobs} {
		tok, err := c.Encode(a.operator)
		if err != nil {
			return nil, nil, err
		}
		accounts[c.Subject] = tok
	}
	return op, accounts, nil
}

// user signs a user JWT in account acct and returns it with the user's seed.
func user(acct nkeys.KeyPair, name string, perms *jwt.Permissions, ttl time.Duration) (string, []byte, error) {
	tok, seed, _, err := userKey(acct, name, perms, ttl)
	return tok, seed, err
}

// userKey is user, also returning the user's public key.
func userKey(acct nkeys.KeyPair, name string, perms *jwt.Permissions, ttl time.Duration) (string, []byte, string, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return "", nil, "", err
	}
	seed, _ := kp.Seed()
	uc := jwt.NewUserClaims(pub(kp))
	uc.Name = name
	uc.IssuerAccount = ""
	if perms != nil {
		uc.Permissions = *perms
	}
	if ttl > 0 {
		uc.Expires = time.Now().Add(ttl).Unix()
	}
	tok, err := uc.Encode(acct)
	return tok, seed, pub(kp), err
}

// JobPermissions are the permissions of job's credentials.
func JobPermissions(s protocol.Subjects, job string) *jwt.Permissions {
	p := &jwt.Permissions{}
	p.Pub.Allow.Add(s.Register(), s.Events(job), s.Ranks(job))
	p.Sub.Allow.Add(s.Lease(job), s.Ranks(job), s.Inbox(job)+".>")
	return p
}

// IssueJob returns a .creds file for job: a JOBS-account user named after
// the job, allowed only that job's subjects. ttl 0 means no expiry.
func (a *Authority) IssueJob(s protocol.Subjects, job string, ttl time.Duration) ([]byte, error) {
	if err := protocol.ValidateJobID("credentials", job); err != nil {
		return nil, err
	}
	tok, seed, key, err := userKey(a.jobs, job, JobPermissions(s, job), ttl)
	if err != nil {
		return nil, err
	}
	if err := a.recordIssued(job, key); err != nil {
		return nil, fmt.Errorf("coordinator: recording the credentials of %s (needed to revoke them): %w", job, err)
	}
	return jwt.FormatUserConfig(tok, seed)
}

// IssueAdmin returns a .creds file for an operator: a COORD-account user
// that may request the status, submit and cancel subjects and nothing else.
func (a *Authority) IssueAdmin(s protocol.Subjects, name string, ttl time.Duration) ([]byte, error) {
	p := &jwt.Permissions{}
	p.Pub.Allow.Add(s.Status(), s.Submit(), s.Cancel()) // submit, cancel: agents.go
	p.Sub.Allow.Add("_INBOX.>")
	tok, seed, err := user(a.coord, name, p, ttl)
	if err != nil {
		return nil, err
	}
	return jwt.FormatUserConfig(tok, seed)
}

// CoordinatorOption is the connection option of the coordinator itself, on
// its embedded server or on a server of this authority that it does not
// embed (shockwave nats --auth creds): an unrestricted COORD-account user.
// Keep it as secret as the authority.
func (a *Authority) CoordinatorOption() (nats.Option, error) {
	tok, seed, err := user(a.coord, "coordinator", nil, 0)
	if err != nil {
		return nil, err
	}
	return nats.UserJWTAndSeed(tok, string(seed)), nil
}

// requestInfo is the part of the server's Nats-Request-Info header the
// coordinator reads: the account, the user JWT name and the connection of the
// requester.
type requestInfo struct {
	Account string `json:"acc"`
	NameTag string `json:"name_tag"`
	Server  string `json:"server"`
	Client  uint64 `json:"id"`
	Host    string `json:"host"`
}

// requester decodes the server-stamped identity of a request that crossed
// into the coordinator's account through a service import; nil when the
// request came from inside the coordinator's account.
func requester(h nats.Header) (*requestInfo, error) {
	raw := h.Get("Nats-Request-Info")
	if raw == "" {
		return nil, nil
	}
	var ri requestInfo
	if err := json.Unmarshal([]byte(raw), &ri); err != nil {
		return nil, fmt.Errorf("coordinator: unreadable requester identity: %w", err)
	}
	return &ri, nil
}

// clientKey names the client a request came from, for per-client caps: the
// user in creds mode (one user per job), else the connection.
func (ri *requestInfo) clientKey() string {
	if ri == nil {
		return ""
	}
	if ri.NameTag != "" {
		return "user:" + ri.NameTag
	}
	return fmt.Sprintf("conn:%s/%d", ri.Server, ri.Client)
}

// authorize checks that a registration of job came from job's credentials.
// A request that crossed into the coordinator's account through a service
// import carries a Nats-Request-Info header that the server sets (a client
// cannot forge it). In creds mode (a JWT account) its user name must be the
// job id; in none and token mode (the local JOBS account) jobs share one
// identity and any may register any id. A request without the header came
// from inside the coordinator's account and is allowed.
func authorize(ri *requestInfo, job string) error {
	if ri == nil || ri.Account == localJobsAccount {
		return nil
	}
	if ri.NameTag != job {
		return fmt.Errorf("coordinator: the credentials of %q may not register job %q", ri.NameTag, job)
	}
	return nil
}

// authorizeHeader is authorize on a request's headers.
func authorizeHeader(h nats.Header, job string) error {
	ri, err := requester(h)
	if err != nil {
		return err
	}
	return authorize(ri, job)
}
