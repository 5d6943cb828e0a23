package main

import (
	"flag"
	"os"

	"github.com/nats-io/nats.go"

	"github.com/shockwave-sched/shockwave/coordinator"
)

// tlsFlags are a client's TLS flags: the CA that signed the server's
// certificate, and the client certificate and key a server with mutual
// TLS (the coordinator's --tls-ca) requires.
type tlsFlags struct{ ca, cert, key string }

func (f *tlsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.ca, "tls-ca", "", "trust the coordinator's TLS certificate signed by this CA `FILE` (PEM)")
	fs.StringVar(&f.cert, "tls-cert", "", "present this client certificate `FILE` (PEM; for a coordinator started with --tls-ca)")
	fs.StringVar(&f.key, "tls-key", "", "private key `FILE` of --tls-cert (PEM)")
}

// options checks the flags (a certificate needs its key, and every file
// named must be readable) and returns the connection's TLS options.
func (f *tlsFlags) options() ([]nats.Option, error) {
	if (f.cert == "") != (f.key == "") {
		return nil, badInput("--tls-cert and --tls-key go together")
	}
	for _, fl := range [][2]string{{"--tls-ca", f.ca}, {"--tls-cert", f.cert}, {"--tls-key", f.key}} {
		if fl[1] == "" {
			continue
		}
		if _, err := os.Stat(fl[1]); err != nil {
			return nil, badInput("%s: %v", fl[0], err)
		}
	}
	return coordinator.ClientTLSOptions(f.ca, f.cert, f.key), nil
}
