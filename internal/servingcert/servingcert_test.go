package servingcert

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"slices"
	"testing"
	"time"
)

// TestIssueServingCert: the self-managed TLS issues a serving certificate for the Service's names, valid a
// year, under a ten-year CA it creates once and then reuses (parseCA), so the caBundle stays put.
func TestIssueServingCert(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	s := &SelfManaged{Namespace: "ns", ServiceName: "hook", Now: func() time.Time { return now }}
	b, err := s.issue(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.X509KeyPair(b.cert, b.key); err != nil {
		t.Fatalf("tls.crt and tls.key are not a pair: %v", err)
	}
	ca, caKey := parseCA(b.ca, b.caKey, now)
	if ca == nil || caKey == nil {
		t.Fatal("the issued CA does not parse back")
	}
	if !ca.IsCA || ca.KeyUsage != x509.KeyUsageCertSign|x509.KeyUsageCRLSign || ca.Subject.CommonName != "agent-sandbox-webhook-ca" ||
		!ca.NotAfter.Equal(now.Add(caLifetime)) || !ca.NotBefore.Equal(now.Add(-time.Hour)) {
		t.Errorf("CA: IsCA=%v usage=%v CN=%q validity %v..%v", ca.IsCA, ca.KeyUsage, ca.Subject.CommonName, ca.NotBefore, ca.NotAfter)
	}
	leaf := parseCert(t, b.cert)
	if leaf.IsCA || leaf.Subject.CommonName != "hook.ns.svc" || !slices.Equal(leaf.DNSNames, s.dnsNames()) ||
		leaf.KeyUsage != x509.KeyUsageDigitalSignature || !slices.Equal(leaf.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) ||
		!leaf.NotAfter.Equal(now.Add(servingLifetime)) {
		t.Errorf("serving certificate: IsCA=%v CN=%q DNS=%v usage=%v ext=%v NotAfter=%v", leaf.IsCA, leaf.Subject.CommonName, leaf.DNSNames, leaf.KeyUsage, leaf.ExtKeyUsage, leaf.NotAfter)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "hook.ns.svc.cluster.local", Roots: roots, CurrentTime: now}); err != nil {
		t.Errorf("the serving certificate does not verify under its CA: %v", err)
	}

	// Renewal under the same CA keeps the CA and its key.
	b2, err := s.issue(ca, caKey)
	if err != nil {
		t.Fatal(err)
	}
	if string(b2.ca) != string(b.ca) || string(b2.caKey) != string(b.caKey) {
		t.Error("issuing under an existing CA replaced it")
	}
	if string(b2.cert) == string(b.cert) {
		t.Error("renewal returned the old serving certificate")
	}
	if _, err := parseCert(t, b2.cert).Verify(x509.VerifyOptions{DNSName: "hook", Roots: roots, CurrentTime: now}); err != nil {
		t.Errorf("the renewed certificate does not verify under the kept CA: %v", err)
	}
}

func parseCert(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	blk, _ := pem.Decode(certPEM)
	if blk == nil {
		t.Fatal("no PEM block")
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
