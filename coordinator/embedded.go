package coordinator

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/shockwave-sched/shockwave/protocol"
)

// EmbeddedConfig sets up the NATS server the coordinator embeds by default.
type EmbeddedConfig struct {
	// Listen is the client address, host:port (port -1: a random one).
	// DontListen serves in-process connections only (tests).
	Listen     string
	DontListen bool
	// DataDir holds the JetStream store (DataDir/jetstream) and, in creds
	// mode, the credentials authority (DataDir/auth).
	DataDir string
	Auth    AuthMode
	Token   string // AuthToken: the shared token
	// Prefix is the subject prefix, needed by creds mode's accounts.
	Prefix string
	// MaxPayload is the server's message size limit (default 8 MiB, so
	// that the status reply of a large cluster fits).
	MaxPayload int32
	// TLS, when set, serves client connections over TLS only.
	TLS *TLSFiles
	// Logger receives the server's logs (nil: none).
	Logger *zerolog.Logger
	// FloodLimit is the message rate per second beyond which a job's
	// connection is disconnected, and in creds mode its credential
	// revoked (flood.go): 0 is DefaultFloodLimit, a negative value turns
	// the guard off.
	FloodLimit int
	// ConnectionsAdvice is the number of client connections past which
	// the server logs that the jobs should come through node agents or
	// NATS run apart (connadvice.go): 0 is DefaultConnectionsAdvice, a
	// negative value never.
	ConnectionsAdvice int
}

// Embedded is a running embedded NATS server with JetStream.
type Embedded struct {
	Server *server.Server
	auth   *Authority
	local  *localAuth
	lock   *dirLock
	// creds mode: the resolver of the account JWTs, the logger and the
	// revocation watcher's stop channel.
	resolver *server.MemAccResolver
	log      *zerolog.Logger
	stop     chan struct{}
	flood    floodGuard
	advice   connAdvice
}

// StartEmbedded starts the server and waits until it accepts connections.
func StartEmbedded(cfg EmbeddedConfig) (*Embedded, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("coordinator: embedded NATS needs a data directory")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = protocol.DefaultPrefix
	}
	if cfg.MaxPayload == 0 {
		cfg.MaxPayload = 8 << 20
	}
	subj, err := protocol.NewSubjects(cfg.Prefix)
	if err != nil {
		return nil, err
	}
	opts := &server.Options{
		ServerName: "shockwave", JetStream: true, StoreDir: cfg.DataDir, // the server stores under StoreDir/jetstream
		MaxPayload: cfg.MaxPayload, DontListen: cfg.DontListen, NoSigs: true, NoLog: cfg.Logger == nil,
	}
	if !cfg.DontListen {
		host, port, err := splitListen(cfg.Listen)
		if err != nil {
			return nil, err
		}
		opts.Host, opts.Port = host, port
		if err := checkPortFree(host, port); err != nil {
			return nil, err
		}
	}
	if cfg.TLS != nil {
		if err := cfg.TLS.configure(opts); err != nil {
			return nil, err
		}
	}
	lock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	e := &Embedded{lock: lock, log: cfg.Logger, stop: make(chan struct{}), advice: connAdvice{level: cmp.Or(cfg.ConnectionsAdvice, DefaultConnectionsAdvice)}}
	if err := e.setupAuth(opts, cfg, subj); err != nil {
		lock.release()
		return nil, err
	}
	if e.local != nil && cfg.FloodLimit >= 0 {
		e.local.guard = &e.flood
	}
	s, err := server.NewServer(opts)
	if err != nil {
		lock.release()
		return nil, fmt.Errorf("coordinator: embedded NATS: %w", err)
	}
	if cfg.Logger != nil {
		s.SetLoggerV2(natsLogger{cfg.Logger.With().Str("component", "nats").Logger()}, false, false, false)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		lock.release()
		return nil, errors.New("coordinator: embedded NATS did not start within 10s")
	}
	if e.local != nil {
		if err := e.local.link(s, subj); err != nil {
			s.Shutdown()
			lock.release()
			return nil, err
		}
	}
	e.Server = s
	if e.auth != nil {
		go e.watchRevocations(subj, e.stop)
	}
	guard := cfg.FloodLimit >= 0
	if guard {
		e.flood.limit, e.flood.byUser = float64(cmp.Or(cfg.FloodLimit, DefaultFloodLimit)), e.auth != nil
	}
	if guard || e.advice.level > 0 {
		account := localJobsAccount
		if e.auth != nil {
			account = pub(e.auth.jobs)
		}
		go e.watch(account, guard, e.stop)
	}
	return e, nil
}

// setupAuth configures the server's authentication for cfg.Auth.
func (e *Embedded) setupAuth(opts *server.Options, cfg EmbeddedConfig, subj protocol.Subjects) error {
	switch cfg.Auth {
	case AuthNone, "", AuthToken:
		if cfg.Auth == AuthToken && cfg.Token == "" {
			return errors.New("coordinator: token mode needs a token")
		}
		local, err := setupLocalAuth(opts, cfg, subj)
		if err != nil {
			return err
		}
		e.local = local
		return nil
	case AuthCreds:
		return e.trustOperator(opts, cfg)
	}
	return fmt.Errorf("coordinator: unknown auth mode %q", cfg.Auth)
}

// checkPortFree reports a listen address already in use as such, instead of
// a server that never becomes ready.
func checkPortFree(host string, port int) error {
	if port <= 0 {
		return nil
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("coordinator: cannot listen on %s: the address is already in use (another coordinator or NATS server?)", addr)
		}
		return fmt.Errorf("coordinator: cannot listen on %s: %w", addr, err)
	}
	return ln.Close()
}

// trustOperator sets up operator mode with the authority's accounts.
func (e *Embedded) trustOperator(opts *server.Options, cfg EmbeddedConfig) error {
	auth, err := LoadAuthority(filepath.Join(cfg.DataDir, "auth"), true)
	if err != nil {
		return err
	}
	subj, err := protocol.NewSubjects(cfg.Prefix)
	if err != nil {
		return err
	}
	op, accounts, err := auth.trust(subj)
	if err != nil {
		return err
	}
	res := &server.MemAccResolver{}
	for pubKey, tok := range accounts {
		if err := res.Store(pubKey, tok); err != nil {
			return err
		}
	}
	opts.TrustedOperators = []*jwt.OperatorClaims{op}
	opts.AccountResolver = res
	opts.SystemAccount = pub(auth.system)
	e.auth, e.resolver = auth, res
	return nil
}

// Connect opens the coordinator's own in-process connection, with full
// rights in whatever auth mode the server runs.
func (e *Embedded) Connect(opts ...nats.Option) (*nats.Conn, error) {
	opts = append([]nats.Option{nats.InProcessServer(e.Server), nats.Name("shockwave-coordinator"), nats.MaxReconnects(-1)}, opts...)
	switch {
	case e.local != nil:
		opts = append(opts, nats.Token(string(e.local.coordSecret)))
	case e.auth != nil:
		o, err := e.auth.CoordinatorOption()
		if err != nil {
			return nil, err
		}
		opts = append(opts, o)
	}
	return nats.Connect("", opts...)
}

// Authority returns the credentials authority in creds mode, else nil.
func (e *Embedded) Authority() *Authority { return e.auth }

// ClientURL is the address clients connect to.
func (e *Embedded) ClientURL() string { return e.Server.ClientURL() }

// CoordinatorOptions are the connection options of a client with the
// coordinator's full rights on this server (tools and tests that read the
// log or publish as the coordinator). Keep them as secret as the data
// directory.
func (e *Embedded) CoordinatorOptions() ([]nats.Option, error) {
	switch {
	case e.local != nil:
		return []nats.Option{nats.Token(string(e.local.coordSecret))}, nil
	case e.auth != nil:
		o, err := e.auth.CoordinatorOption()
		if err != nil {
			return nil, err
		}
		return []nats.Option{o}, nil
	}
	return nil, nil
}

// AdminSecretFile is the file holding the administrator's secret in none
// and token mode (a NATS token that may request status), else "".
func (e *Embedded) AdminSecretFile(dataDir string) string {
	if e.local == nil {
		return ""
	}
	return filepath.Join(dataDir, "auth", adminSecretFile)
}

// CoordinatorSecretFile is the file holding the coordinator's secret in
// none and token mode (the NATS token of a coordinator on --nats-url, and
// of a standby), else "".
func (e *Embedded) CoordinatorSecretFile(dataDir string) string {
	if e.local == nil {
		return ""
	}
	return filepath.Join(dataDir, "auth", coordinatorSecretFile)
}

// Shutdown stops the server, waits for it and releases the data directory.
func (e *Embedded) Shutdown() {
	select {
	case <-e.stop:
	default:
		close(e.stop)
	}
	e.Server.Shutdown()
	e.Server.WaitForShutdown()
	e.lock.release()
}

func splitListen(listen string) (string, int, error) {
	host, p, err := net.SplitHostPort(listen)
	if err != nil {
		return "", 0, fmt.Errorf("coordinator: listen address %q: %w", listen, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < -1 || port > 65535 {
		return "", 0, fmt.Errorf("coordinator: listen address %q: bad port", listen)
	}
	return host, port, nil
}

// natsLogger forwards the embedded server's logs to zerolog.
type natsLogger struct{ l zerolog.Logger }

func (n natsLogger) Noticef(f string, v ...any) { n.l.Debug().Msgf(f, v...) }
func (n natsLogger) Warnf(f string, v ...any)   { n.l.Warn().Msgf(f, v...) }
func (n natsLogger) Fatalf(f string, v ...any)  { n.l.Error().Msgf(f, v...) }
func (n natsLogger) Errorf(f string, v ...any)  { n.l.Error().Msgf(f, v...) }
func (n natsLogger) Debugf(f string, v ...any)  { n.l.Debug().Msgf(f, v...) }
func (n natsLogger) Tracef(f string, v ...any)  { n.l.Trace().Msgf(f, v...) }
