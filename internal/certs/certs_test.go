package certs

import (
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"net"
	"slices"
	"testing"
	"time"
)

var now = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func issueCA(t *testing.T) *Pair {
	t.Helper()
	ca, err := Issue(Spec{CommonName: "test-ca", NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		CA: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// TestSelfSignedCA: with no parent the certificate signs itself, is a CA with valid basic constraints, and
// carries the spec's names, usages and validity on a P-256 key.
func TestSelfSignedCA(t *testing.T) {
	ca := issueCA(t)
	c := ca.Cert
	if !c.IsCA || !c.BasicConstraintsValid {
		t.Errorf("IsCA=%v BasicConstraintsValid=%v, want both", c.IsCA, c.BasicConstraintsValid)
	}
	if err := c.CheckSignatureFrom(c); err != nil {
		t.Errorf("not self-signed: %v", err)
	}
	if c.Subject.CommonName != "test-ca" || c.Issuer.CommonName != "test-ca" {
		t.Errorf("subject %q issuer %q", c.Subject.CommonName, c.Issuer.CommonName)
	}
	if c.KeyUsage != x509.KeyUsageCertSign|x509.KeyUsageCRLSign {
		t.Errorf("key usage %v", c.KeyUsage)
	}
	if !c.NotBefore.Equal(now.Add(-time.Hour)) || !c.NotAfter.Equal(now.Add(24*time.Hour)) {
		t.Errorf("validity %v..%v", c.NotBefore, c.NotAfter)
	}
	if ca.Key.Curve != elliptic.P256() {
		t.Errorf("curve %v, want P-256", ca.Key.Curve.Params().Name)
	}
	if c.SerialNumber.Sign() <= 0 || c.SerialNumber.BitLen() > 127 {
		t.Errorf("random serial %v out of range", c.SerialNumber)
	}
}

// TestLeafSignedByParent: a leaf issued under a CA verifies against it for its DNS names and IPs as a
// server certificate, has no basic constraints, and keeps a serial the spec fixes.
func TestLeafSignedByParent(t *testing.T) {
	ca := issueCA(t)
	leaf, err := Issue(Spec{CommonName: "svc.ns.svc", DNSNames: []string{"svc", "svc.ns.svc"}, IPs: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), Serial: big.NewInt(2),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, ca)
	if err != nil {
		t.Fatal(err)
	}
	c := leaf.Cert
	if c.IsCA || c.BasicConstraintsValid {
		t.Errorf("leaf IsCA=%v BasicConstraintsValid=%v, want neither", c.IsCA, c.BasicConstraintsValid)
	}
	if c.SerialNumber.Cmp(big.NewInt(2)) != 0 {
		t.Errorf("serial %v, want 2", c.SerialNumber)
	}
	if !slices.Equal(c.DNSNames, []string{"svc", "svc.ns.svc"}) || len(c.IPAddresses) != 1 || !c.IPAddresses[0].Equal(net.ParseIP("127.0.0.1")) {
		t.Errorf("SANs %v %v", c.DNSNames, c.IPAddresses)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	for _, name := range []string{"svc.ns.svc", "127.0.0.1"} {
		if _, err := c.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, CurrentTime: now}); err != nil {
			t.Errorf("verify for %s: %v", name, err)
		}
	}
	if _, err := c.Verify(x509.VerifyOptions{DNSName: "other", Roots: roots, CurrentTime: now}); err == nil {
		t.Error("verified for a name it does not carry")
	}
	if _, err := c.Verify(x509.VerifyOptions{DNSName: "svc", Roots: roots, CurrentTime: now.Add(2 * time.Hour)}); err == nil {
		t.Error("verified after NotAfter")
	}
	if leaf.Key.Equal(ca.Key) {
		t.Error("the leaf reuses its parent's key")
	}
}

// TestPEM: the PEM forms are what crypto/tls loads as a pair, and what x509 parses back.
func TestPEM(t *testing.T) {
	p := issueCA(t)
	keyPEM, err := p.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.X509KeyPair(p.CertPEM(), keyPEM); err != nil {
		t.Fatalf("not a key pair: %v", err)
	}
	cb, _ := pem.Decode(p.CertPEM())
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || cb.Type != "CERTIFICATE" || kb == nil || kb.Type != "EC PRIVATE KEY" {
		t.Fatalf("PEM types: %v %v", cb, kb)
	}
	k, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !k.Equal(p.Key) {
		t.Error("key does not round-trip")
	}
}
