"""TLS: a job trusting the coordinator's CA registers; another CA is refused."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import unittest

from tests.harness import Coordinator

import shockwave


def _openssl(*args: str, cwd: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(d: str, name: str) -> None:
    """A self-signed CA: name.key, name.pem."""
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "1", "-subj", f"/CN={name}", cwd=d)


def make_server_cert(d: str, ca: str) -> None:
    """server.key and server.crt for 127.0.0.1, signed by ca."""
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1", cwd=d)
    with open(os.path.join(d, "ext.cnf"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
             "-out", "server.crt", "-days", "1", "-extfile", "ext.cnf", cwd=d)


def make_client_cert(d: str, ca: str, name: str) -> None:
    """name.key and name.crt, a client certificate signed by ca."""
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
    with open(os.path.join(d, "client.cnf"), "w") as f:
        f.write("extendedKeyUsage=clientAuth\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
             "-out", f"{name}.crt", "-days", "1", "-extfile", "client.cnf", cwd=d)


@unittest.skipIf(shutil.which("openssl") is None, "needs the openssl command to make certificates")
class TestTLS(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="shockwave-tls-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        make_ca(self.dir, "ca")
        make_ca(self.dir, "wrong")
        make_server_cert(self.dir, "ca")
        self.coord = Coordinator(gpus=1, extra=["--tls-cert", os.path.join(self.dir, "server.crt"),
                                                "--tls-key", os.path.join(self.dir, "server.key")])
        self.coord.start()
        self.addCleanup(self.coord.stop)
        self.url = self.coord.url.replace("nats://", "tls://")

    def open(self, ca: str, job: str) -> shockwave.Job:
        return shockwave.Job(model="mlp", batch_size=32, dataset_size=3200, epochs=2, url=self.url,
                             job_id=job, tls_ca=os.path.join(self.dir, ca), register_timeout=3)

    def test_a_job_trusting_the_ca_registers(self):
        job = self.open("ca.pem", "tls-good")
        job.close()

    def test_a_job_trusting_another_ca_is_refused(self):
        with self.assertRaises(shockwave.ShockwaveError) as cm:
            self.open("wrong.pem", "tls-bad").close()
        self.assertIn("certificate", str(cm.exception))


@unittest.skipIf(shutil.which("openssl") is None, "needs the openssl command to make certificates")
class TestMutualTLS(unittest.TestCase):
    """A coordinator with --tls-ca admits only jobs with a client certificate of that CA."""

    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="shockwave-mtls-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        make_ca(self.dir, "ca")
        make_ca(self.dir, "wrong")
        make_server_cert(self.dir, "ca")
        make_client_cert(self.dir, "ca", "job")
        make_client_cert(self.dir, "wrong", "intruder")
        p = lambda f: os.path.join(self.dir, f)  # noqa: E731
        self.coord = Coordinator(gpus=1, extra=["--tls-cert", p("server.crt"), "--tls-key", p("server.key"),
                                                "--tls-ca", p("ca.pem")])
        self.coord.start()
        self.addCleanup(self.coord.stop)
        self.p = p

    def open(self, job: str, **kw) -> shockwave.Job:
        return shockwave.Job(model="mlp", batch_size=32, dataset_size=3200, epochs=2, url=self.coord.url,
                             job_id=job, tls_ca=self.p("ca.pem"), register_timeout=3, **kw)

    def test_a_job_with_a_certificate_of_the_ca_registers(self):
        self.open("mtls-good", tls_cert=self.p("job.crt"), tls_key=self.p("job.key")).close()

    def test_a_job_without_a_certificate_or_with_a_strangers_is_refused(self):
        for kw in ({}, {"tls_cert": self.p("intruder.crt"), "tls_key": self.p("intruder.key")}):
            with self.subTest(kw=kw), self.assertRaises(shockwave.ShockwaveError):
                self.open("mtls-bad", **kw).close()

    def test_a_certificate_without_its_key_is_an_invalid_argument_naming_both_keys(self):
        with self.assertRaises(shockwave.InvalidArgument) as cm:
            self.open("mtls-half", tls_cert=self.p("job.crt"))
        self.assertIn("tls_cert/tls_key", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
