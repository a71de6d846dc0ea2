// Package pki makes and checks the certificates of a stratum control plane:
// the CAs every control plane shares, this node's leaves issued from them, the
// service-account key pair, the kubeadm-style CA hash a join pins, and the TLS
// configurations etcd clients and servers use.
//
// The package is pure: it returns PEM bytes and never touches a file, so the
// caller writes them through its host (a real machine or a simulated one) and
// tests need no directory.
//
// Every key it makes is ECDSA P-256: kubeadm's ECDSA mode and etcd use it,
// Kubernetes accepts it wherever it takes a key (the service-account pair
// included), and it is cheap enough to generate that a simulator can mint a
// fresh cluster for every scenario.
package pki

import (
	"cmp"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"

	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// Validity periods and the clock skew certificates tolerate.
const (
	// CAValidity is how long a new CA is valid.
	CAValidity = 10 * 365 * 24 * time.Hour
	// LeafValidity is how long an issued leaf is valid.
	LeafValidity = 365 * 24 * time.Hour
	// Backdate is how far before "now" a certificate becomes valid, so a
	// host whose clock lags the issuer's a little still accepts it.
	Backdate = 5 * time.Minute
)

// CA is a certificate authority: its certificate and signing key, parsed and
// as the PEM the files hold.
type CA struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte
	KeyPEM  []byte
}

// NewCA makes a self-signed CA valid for CAValidity from now (backdated by
// Backdate), with a fresh ECDSA P-256 key.
func NewCA(commonName string, now time.Time) (*CA, error) {
	if commonName == "" {
		return nil, errors.New("new CA: common name is empty")
	}
	key, keyPEM, err := newKey()
	if err != nil {
		return nil, fmt.Errorf("new CA %q: %w", commonName, err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, fmt.Errorf("new CA %q: %w", commonName, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-Backdate).UTC(),
		NotAfter:              now.Add(CAValidity).UTC(),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("new CA %q: sign certificate: %w", commonName, err)
	}
	crt, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("new CA %q: parse the signed certificate: %w", commonName, err)
	}
	certPEM, err := cert.EncodeCertificates(crt)
	if err != nil {
		return nil, fmt.Errorf("new CA %q: encode certificate: %w", commonName, err)
	}
	return &CA{Cert: crt, Key: key, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// LoadCA parses a CA from its certificate and key PEM. It refuses a
// certificate that is not a CA and a key that is not the certificate's, so a
// mixed-up pair of files is caught before anything is signed with it.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	crt, err := ParseCert(certPEM)
	if err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	if !crt.BasicConstraintsValid || !crt.IsCA {
		return nil, fmt.Errorf("load CA: certificate %q is not a CA", crt.Subject.CommonName)
	}
	key, err := ParseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("load CA %q: %w", crt.Subject.CommonName, err)
	}
	if err := checkKeyMatches(crt.PublicKey, key); err != nil {
		return nil, fmt.Errorf("load CA %q: %w", crt.Subject.CommonName, err)
	}
	return &CA{Cert: crt, Key: key, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// LeafSpec describes a leaf certificate to issue. Server and Client choose its
// extended key usages; at least one must be set.
type LeafSpec struct {
	CommonName   string
	Organization []string
	DNSNames     []string
	IPs          []net.IP
	Server       bool
	Client       bool
	// Validity is how long the leaf is valid from now; zero is LeafValidity.
	// A credential made for one operation and never written lives minutes.
	Validity time.Duration
}

// Issue signs a leaf for spec with a fresh ECDSA P-256 key. The leaf is valid
// for spec.Validity (LeafValidity when zero) from now (backdated by Backdate), cut short at the CA's own
// expiry, since a leaf cannot outlive the CA that vouches for it.
func (ca *CA) Issue(spec LeafSpec, now time.Time) (certPEM, keyPEM []byte, err error) {
	if _, err := spec.usages(); err != nil {
		return nil, nil, err
	}
	key, keyPEM, err := newKey()
	if err != nil {
		return nil, nil, fmt.Errorf("issue leaf %q: %w", spec.CommonName, err)
	}
	certPEM, err = ca.IssueFor(spec, key, now)
	if err != nil {
		return nil, nil, err
	}
	return certPEM, keyPEM, nil
}

// IssueFor signs a leaf for spec over an existing key, as Issue does
// otherwise: a renewal that keeps each leaf's key reissues only its
// certificate, so the pair on disk matches whichever certificate it holds.
func (ca *CA) IssueFor(spec LeafSpec, key crypto.Signer, now time.Time) (certPEM []byte, err error) {
	usages, err := spec.usages()
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, fmt.Errorf("issue leaf %q: %w", spec.CommonName, err)
	}
	if !now.Before(ca.Cert.NotAfter) {
		// Its validity would end before it begins, which x509 does not
		// refuse: a certificate no peer ever accepts.
		return nil, fmt.Errorf("issue leaf %q: the CA %q expired at %s, and this machine's clock says %s (a CA past its end, or a clock set ahead: check the time); nothing was issued",
			spec.CommonName, ca.Cert.Subject.CommonName, ca.Cert.NotAfter.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	notAfter := now.Add(cmp.Or(spec.Validity, LeafValidity))
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: spec.CommonName, Organization: spec.Organization},
		DNSNames:     spec.DNSNames,
		IPAddresses:  spec.IPs,
		NotBefore:    now.Add(-Backdate).UTC(),
		NotAfter:     notAfter.UTC(),
		// An ECDSA key signs; it cannot encipher a key, so it claims only
		// digital signature.
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           usages,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, fmt.Errorf("issue leaf %q from CA %q: %w", spec.CommonName, ca.Cert.Subject.CommonName, err)
	}
	certPEM, err = cert.EncodeCertificates(&x509.Certificate{Raw: der})
	if err != nil {
		return nil, fmt.Errorf("issue leaf %q: encode certificate: %w", spec.CommonName, err)
	}
	return certPEM, nil
}

// usages checks spec and returns its extended key usages.
func (spec LeafSpec) usages() ([]x509.ExtKeyUsage, error) {
	if spec.CommonName == "" {
		return nil, errors.New("issue leaf: common name is empty")
	}
	var usages []x509.ExtKeyUsage
	if spec.Server {
		usages = append(usages, x509.ExtKeyUsageServerAuth)
	}
	if spec.Client {
		usages = append(usages, x509.ExtKeyUsageClientAuth)
	}
	if len(usages) == 0 {
		return nil, fmt.Errorf("issue leaf %q: neither server nor client usage is set", spec.CommonName)
	}
	return usages, nil
}

// ParseCert parses the first certificate in pemBytes (a bundle's first is its
// own certificate).
func ParseCert(pemBytes []byte) (*x509.Certificate, error) {
	certs, err := cert.ParseCertsPEM(pemBytes)
	if err != nil {
		return nil, fmt.Errorf("parse certificate PEM: %w", err)
	}
	return certs[0], nil
}

// ParseKey parses an ECDSA or RSA private key from PEM ("EC PRIVATE KEY",
// "RSA PRIVATE KEY" or PKCS #8 "PRIVATE KEY").
func ParseKey(pemBytes []byte) (crypto.Signer, error) {
	k, err := keyutil.ParsePrivateKeyPEM(pemBytes)
	if err != nil {
		return nil, fmt.Errorf("parse private key PEM: %w", err)
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("parse private key PEM: a %T cannot sign", k)
	}
	return s, nil
}

// CheckLeafCovers reports whether the certificate in certPEM names ip among
// its IP SANs, so a caller can tell whether a certificate still covers an
// address (the VIP) or must be reissued. It wraps ErrIPNotCovered when not.
func CheckLeafCovers(certPEM []byte, ip net.IP) error {
	if ip == nil {
		return errors.New("check certificate SANs: no IP given")
	}
	crt, err := ParseCert(certPEM)
	if err != nil {
		return fmt.Errorf("check certificate SANs for %s: %w", ip, err)
	}
	for _, have := range crt.IPAddresses {
		if have.Equal(ip) {
			return nil
		}
	}
	return fmt.Errorf("certificate %q does not cover %s (IP SANs %v): %w", crt.Subject.CommonName, ip, crt.IPAddresses, ErrIPNotCovered)
}

// ErrIPNotCovered is CheckLeafCovers' answer for a certificate that does not
// name the address: the certificate must be reissued to serve it.
var ErrIPNotCovered = errors.New("IP not among the certificate's SANs")

// newKey makes an ECDSA P-256 key and its "EC PRIVATE KEY" PEM.
func newKey() (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate ECDSA P-256 key: %w", err)
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode private key: %w", err)
	}
	return key, keyPEM, nil
}

// serialLimit bounds serial numbers to 128 bits.
var serialLimit = new(big.Int).Lsh(big.NewInt(1), 128)

// newSerial draws a random non-zero 128-bit serial number, so certificates
// issued independently on different nodes from the same CA never collide.
func newSerial() (*big.Int, error) {
	for {
		n, err := rand.Int(rand.Reader, serialLimit)
		if err != nil {
			return nil, fmt.Errorf("draw serial number: %w", err)
		}
		if n.Sign() > 0 {
			return n, nil
		}
	}
}

// checkKeyMatches reports whether key is the private half of pub.
func checkKeyMatches(pub crypto.PublicKey, key crypto.Signer) error {
	p, ok := pub.(interface{ Equal(crypto.PublicKey) bool })
	if !ok {
		return fmt.Errorf("unsupported public key type %T", pub)
	}
	if !p.Equal(key.Public()) {
		return errors.New("private key does not match the certificate's public key")
	}
	return nil
}
