package coordinator

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"

	"github.com/shockwave-sched/shockwave/protocol"
)

// Credential revocation (creds mode). The authority records the user key of
// every job credential it issues (auth/issued/<job>.keys); revoking a job
// adds those keys, with the time, to auth/revocations.json. The embedded
// server's JOBS account claims carry the revocations: a revoked credential
// can no longer connect, and a running coordinator applies a changed file
// within a second, disconnecting the revoked job's open connections.

const (
	issuedDir       = "issued"
	revocationsFile = "revocations.json"
)

// recordIssued appends a job credential's user key to the job's list.
func (a *Authority) recordIssued(job, userKey string) error {
	if a.dir == "" {
		return nil
	}
	dir := filepath.Join(a.dir, issuedDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, job+".keys"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(f, userKey)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Revoke revokes every credential issued to job so far; it returns how
// many. A running coordinator applies it within a second.
func (a *Authority) Revoke(job string, at time.Time) (int, error) {
	if err := protocol.ValidateJobID("revoke", job); err != nil {
		return 0, err
	}
	raw, err := os.ReadFile(filepath.Join(a.dir, issuedDir, job+".keys"))
	if errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("coordinator: no credentials were issued to job %q by the authority in %s", job, a.dir)
	}
	if err != nil {
		return 0, err
	}
	var keys []string
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		if key := strings.TrimSpace(sc.Text()); key != "" {
			keys = append(keys, key)
		}
	}
	return len(keys), a.revokeKeys(keys, at)
}

// revokeKeys adds user keys to the revocations file, void before at.
func (a *Authority) revokeKeys(keys []string, at time.Time) error {
	if a.dir == "" {
		return errors.New("coordinator: this authority has no directory to record revocations in")
	}
	a.revokeMu.Lock()
	defer a.revokeMu.Unlock()
	revs, err := a.revocations()
	if err != nil {
		return err
	}
	for _, key := range keys {
		revs[key] = at.Unix()
	}
	data, _ := json.MarshalIndent(revs, "", "  ")
	tmp := filepath.Join(a.dir, revocationsFile+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(a.dir, revocationsFile))
}

// revocations reads the revoked user keys and the times before which their
// credentials are void.
func (a *Authority) revocations() (map[string]int64, error) {
	revs := map[string]int64{}
	if a.dir == "" {
		return revs, nil
	}
	raw, err := os.ReadFile(filepath.Join(a.dir, revocationsFile))
	if errors.Is(err, os.ErrNotExist) {
		return revs, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, &revs); err != nil {
		return nil, fmt.Errorf("coordinator: %s: %w", filepath.Join(a.dir, revocationsFile), err)
	}
	return revs, nil
}

// watchRevocations applies a changed revocations file to the running
// server until stop is closed.
func (e *Embedded) watchRevocations(subj protocol.Subjects, stop <-chan struct{}) {
	path := filepath.Join(e.auth.dir, revocationsFile)
	var last time.Time
	if fi, err := os.Stat(path); err == nil {
		last = fi.ModTime()
	}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		fi, err := os.Stat(path)
		if err != nil || fi.ModTime().Equal(last) {
			continue
		}
		last = fi.ModTime()
		if err := e.applyRevocations(subj); err != nil && e.log != nil {
			e.log.Error().Err(err).Msg("cannot apply the credential revocations")
		}
	}
}

// applyRevocations rebuilds the JOBS account claims and updates the server.
func (e *Embedded) applyRevocations(subj protocol.Subjects) error {
	_, accounts, err := e.auth.trust(subj)
	if err != nil {
		return err
	}
	tok := accounts[pub(e.auth.jobs)]
	claims, err := jwt.DecodeAccountClaims(tok)
	if err != nil {
		return err
	}
	acc, err := e.Server.LookupAccount(claims.Subject)
	if err != nil {
		return err
	}
	if e.resolver != nil {
		_ = e.resolver.Store(claims.Subject, tok)
	}
	e.Server.UpdateAccountClaims(acc, claims)
	if e.log != nil {
		e.log.Info().Int("revoked_keys", len(claims.Revocations)).Msg("credential revocations applied")
	}
	return nil
}
