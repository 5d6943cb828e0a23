package coordinator

import (
	"errors"
	"fmt"
	"os"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// TLSFiles names the PEM files of the embedded server's TLS. Cert and Key
// are required; CA, when set, makes the server require client certificates
// signed by it (mutual TLS). The coordinator's own in-process connection
// needs no TLS.
type TLSFiles struct {
	Cert, Key, CA string
}

// Validate checks that the files exist and that cert and key come together.
func (t *TLSFiles) Validate() error {
	if t.Cert == "" || t.Key == "" {
		return errors.New("coordinator: TLS needs both a certificate (--tls-cert) and a key (--tls-key)")
	}
	for _, f := range [][2]string{{"--tls-cert", t.Cert}, {"--tls-key", t.Key}, {"--tls-ca", t.CA}} {
		if f[1] == "" {
			continue
		}
		if _, err := os.Stat(f[1]); err != nil {
			return fmt.Errorf("coordinator: %s: %w", f[0], err)
		}
	}
	return nil
}

// configure turns TLS on in the server options.
func (t *TLSFiles) configure(opts *server.Options) error {
	if err := t.Validate(); err != nil {
		return err
	}
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: t.Cert, KeyFile: t.Key, CaFile: t.CA, Verify: t.CA != ""})
	if err != nil {
		return fmt.Errorf("coordinator: TLS: %w", err)
	}
	opts.TLSConfig, opts.TLS, opts.TLSVerify = tc, true, t.CA != ""
	opts.TLSTimeout = 2
	return nil
}

// ClientTLSOptions are the options of a client of a TLS server: trust the
// certificates signed by ca (empty: the system roots), and present cert and
// key when both are given (mutual TLS).
func ClientTLSOptions(ca, cert, key string) []nats.Option {
	var o []nats.Option
	if ca != "" {
		o = append(o, nats.RootCAs(ca))
	}
	if cert != "" && key != "" {
		o = append(o, nats.ClientCert(cert, key))
	}
	return o
}
