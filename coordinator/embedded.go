package coordinator

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
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
	// Logger receives the server's logs (nil: none).
	Logger *zerolog.Logger
}

// Embedded is a running embedded NATS server with JetStream.
type Embedded struct {
	Server *server.Server
	auth   *Authority
	token  string
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
	}
	e := &Embedded{}
	switch cfg.Auth {
	case AuthNone, "":
	case AuthToken:
		if cfg.Token == "" {
			return nil, errors.New("coordinator: token mode needs a token")
		}
		opts.Authorization, e.token = cfg.Token, cfg.Token
	case AuthCreds:
		if err := e.trustOperator(opts, cfg); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("coordinator: unknown auth mode %q", cfg.Auth)
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("coordinator: embedded NATS: %w", err)
	}
	if cfg.Logger != nil {
		s.SetLoggerV2(natsLogger{cfg.Logger.With().Str("component", "nats").Logger()}, false, false, false)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, errors.New("coordinator: embedded NATS did not start within 10s")
	}
	e.Server = s
	return e, nil
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
	e.auth = auth
	return nil
}

// Connect opens the coordinator's own in-process connection, with full
// rights in whatever auth mode the server runs.
func (e *Embedded) Connect(opts ...nats.Option) (*nats.Conn, error) {
	opts = append([]nats.Option{nats.InProcessServer(e.Server), nats.Name("shockwave-coordinator"), nats.MaxReconnects(-1)}, opts...)
	switch {
	case e.token != "":
		opts = append(opts, nats.Token(e.token))
	case e.auth != nil:
		o, err := e.auth.coordinator()
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

// Shutdown stops the server and waits for it.
func (e *Embedded) Shutdown() {
	e.Server.Shutdown()
	e.Server.WaitForShutdown()
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
