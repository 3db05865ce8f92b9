// Package certs issues X.509 certificates with ECDSA P-256 keys: a CA, a certificate it signs, or a
// self-signed one. It is the one place the repository creates certificates (the webhook's self-managed
// TLS, the preflight probe webhook, the test harness's webhook server).
//
// Trust role: none of its own. It is a leaf on the standard library alone, used by trusted code and tests
// alike, so that importing it pulls nothing in.
package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"time"
)

// Spec describes one certificate. Validity is the caller's to choose: the package reads no clock.
type Spec struct {
	CommonName string
	DNSNames   []string
	IPs        []net.IP
	// KeyUsage and ExtKeyUsage are set as given; a CA needs x509.KeyUsageCertSign.
	KeyUsage    x509.KeyUsage
	ExtKeyUsage []x509.ExtKeyUsage
	// CA marks a certificate authority (basic constraints valid, IsCA); otherwise no basic constraints are
	// written, as for a leaf.
	CA                  bool
	NotBefore, NotAfter time.Time
	// Serial is the serial number; nil picks a random one of 127 bits.
	Serial *big.Int
}

// Pair is a certificate and its private key.
type Pair struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// Issue creates a fresh ECDSA P-256 key and a certificate for it as spec says, signed by parent, or
// self-signed when parent is nil.
func Issue(spec Spec, parent *Pair) (*Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial := spec.Serial
	if serial == nil {
		if serial, err = rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127)); err != nil {
			return nil, err
		}
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: spec.CommonName},
		DNSNames: spec.DNSNames, IPAddresses: spec.IPs,
		NotBefore: spec.NotBefore, NotAfter: spec.NotAfter,
		KeyUsage: spec.KeyUsage, ExtKeyUsage: spec.ExtKeyUsage,
		IsCA: spec.CA, BasicConstraintsValid: spec.CA,
	}
	signer, signerKey := tmpl, key
	if parent != nil {
		signer, signerKey = parent.Cert, parent.Key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &Pair{Cert: cert, Key: key}, nil
}

// CertPEM is the certificate in PEM ("CERTIFICATE").
func (p *Pair) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.Cert.Raw})
}

// KeyPEM is the private key in PEM, as SEC 1 ("EC PRIVATE KEY").
func (p *Pair) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(p.Key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}
