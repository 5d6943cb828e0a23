package sdk_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shockwave-sched/shockwave/coordinator"
	"github.com/shockwave-sched/shockwave/internal/testpki"
	"github.com/shockwave-sched/shockwave/sdk"
	"github.com/shockwave-sched/shockwave/sdk/sdktest"
)

// mtlsCoordinator starts a coordinator whose server requires client
// certificates signed by its CA, and returns it with the CA and the
// directory of the certificates.
func mtlsCoordinator(t *testing.T) (*sdktest.Coordinator, *testpki.CA, string) {
	t.Helper()
	dir := t.TempDir()
	ca := testpki.NewCA(t, dir, "ca")
	cert, key := ca.Issue(t, dir, "server")
	admin, adminKey := ca.Issue(t, dir, "admin")
	c := sdktest.Start(t, sdktest.Config{GPUs: 1, Round: 200 * time.Millisecond,
		TLS:       &coordinator.TLSFiles{Cert: cert, Key: key, CA: ca.File},
		ClientTLS: coordinator.ClientTLSOptions(ca.File, admin, adminKey)})
	return c, ca, dir
}

func TestTLS_AJobWithAClientCertificateTrainsOverMutualTLS(t *testing.T) {
	c, ca, dir := mtlsCoordinator(t)
	cert, key := ca.Issue(t, dir, "job")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	job, err := sdk.Register(ctx, append(baseOptions(c, "secure"), sdk.WithEpochs(3),
		sdk.WithTLSCA(ca.File), sdk.WithTLSClientCert(cert, key))...)
	if err != nil {
		t.Fatalf("a job with a certificate of the CA: %v", err)
	}
	defer job.Close()
	for _, err := range sdk.Steps(ctx, job, &epochSource{perEpoch: 8}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	sdktest.Eventually(t, 5*time.Second, "the job is completed", func() bool {
		row, _ := c.Job("secure")
		return row.State == "completed"
	})
}

func TestTLS_TheEnvironmentGivesTheClientCertificate(t *testing.T) {
	c, ca, dir := mtlsCoordinator(t)
	cert, key := ca.Issue(t, dir, "job")
	t.Setenv(sdk.EnvTLSCA, ca.File)
	t.Setenv(sdk.EnvTLSCert, cert)
	t.Setenv(sdk.EnvTLSKey, key)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	job, err := sdk.Register(ctx, append(baseOptions(c, "from-env"), sdk.WithEpochs(1))...)
	if err != nil {
		t.Fatalf("certificate and key from %s and %s: %v", sdk.EnvTLSCert, sdk.EnvTLSKey, err)
	}
	job.Close()
}

func TestTLS_AJobWithoutACertificateOrWithAStrangersIsRefused(t *testing.T) {
	c, ca, dir := mtlsCoordinator(t)
	stranger := testpki.NewCA(t, dir, "stranger")
	badCert, badKey := stranger.Issue(t, dir, "intruder")
	for name, extra := range map[string][]sdk.Option{
		"no certificate":             {sdk.WithTLSCA(ca.File)},
		"another CA's certificate":   {sdk.WithTLSCA(ca.File), sdk.WithTLSClientCert(badCert, badKey)},
		"trusting another CA":        {sdk.WithTLSCA(stranger.File)},
		"a plain connection, no TLS": nil,
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		job, err := sdk.Register(ctx, append(baseOptions(c, "refused"), append(extra, sdk.WithEpochs(1))...)...)
		cancel()
		if err == nil {
			job.Close()
			t.Errorf("%s: registered", name)
			continue
		}
		if !errors.Is(err, sdk.ErrRegister) {
			t.Errorf("%s: %v is not ErrRegister", name, err)
		}
	}
	if _, ok := c.Job("refused"); ok {
		t.Error("a refused connection left a job in the coordinator's state")
	}
}

func TestTLS_HalfAClientCertificateIsABadOptionNamedAsSuch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := sdk.Register(ctx, sdk.WithJobID("half"), sdk.WithTLSClientCert("job.crt", ""))
	if err == nil || !strings.Contains(err.Error(), "WithTLSClientCert") {
		t.Errorf("a certificate without a key: %v, want an error naming WithTLSClientCert", err)
	}
	t.Setenv(sdk.EnvTLSCert, "job.crt")
	t.Setenv(sdk.EnvTLSKey, "")
	_, err = sdk.Register(ctx, sdk.WithJobID("half"), sdk.WithURL("nats://127.0.0.1:1"), sdk.WithModel("m"),
		sdk.WithBatchSize(8), sdk.WithDatasetSize(64), sdk.WithEpochs(1), sdk.WithLogger(quiet))
	if err == nil || !strings.Contains(err.Error(), sdk.EnvTLSCert) || !strings.Contains(err.Error(), sdk.EnvTLSKey) {
		t.Errorf("%s without %s: %v, want an error naming both", sdk.EnvTLSCert, sdk.EnvTLSKey, err)
	}
}
