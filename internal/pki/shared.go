package pki

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/client-go/util/keyutil"
)

// Common names of the shared CAs.
const (
	ClusterCAName    = "stratum-ca"
	FrontProxyCAName = "stratum-front-proxy-ca"
	EtcdCAName       = "stratum-etcd-ca"
)

// Names of the shared files, relative to version.PKIDir.
const (
	CACertFile           = "ca.crt"
	CAKeyFile            = "ca.key"
	FrontProxyCACertFile = "front-proxy-ca.crt"
	FrontProxyCAKeyFile  = "front-proxy-ca.key"
	EtcdCACertFile       = "etcd/ca.crt"
	EtcdCAKeyFile        = "etcd/ca.key"
	SAKeyFile            = "sa.key"
	SAPubFile            = "sa.pub"
)

// Shared is the material every control plane shares (what a join downloads):
// the cluster, front-proxy and etcd CAs, and the service-account key pair the
// apiservers sign and verify tokens with.
type Shared struct {
	Cluster, FrontProxy, Etcd *CA
	// SAKeyPEM is the service-account signing key ("EC PRIVATE KEY"), for
	// --service-account-signing-key-file; SAPubPEM its public half
	// ("PUBLIC KEY"), for --service-account-key-file.
	SAKeyPEM, SAPubPEM []byte
}

// NewShared makes a new cluster's shared material: three fresh CAs and a
// service-account key pair.
func NewShared(now time.Time) (*Shared, error) {
	var s Shared
	for _, c := range []struct {
		dst **CA
		cn  string
	}{
		{&s.Cluster, ClusterCAName},
		{&s.FrontProxy, FrontProxyCAName},
		{&s.Etcd, EtcdCAName},
	} {
		ca, err := NewCA(c.cn, now)
		if err != nil {
			return nil, fmt.Errorf("new shared certificates: %w", err)
		}
		*c.dst = ca
	}
	key, keyPEM, err := newKey()
	if err != nil {
		return nil, fmt.Errorf("new shared certificates: service-account key: %w", err)
	}
	pubPEM, err := publicKeyPEM(key.Public())
	if err != nil {
		return nil, fmt.Errorf("new shared certificates: service-account key: %w", err)
	}
	s.SAKeyPEM, s.SAPubPEM = keyPEM, pubPEM
	return &s, nil
}

// Files returns the shared material by file name relative to version.PKIDir
// (the names SharedFileNames lists).
func (s *Shared) Files() map[string][]byte {
	return map[string][]byte{
		CACertFile:           s.Cluster.CertPEM,
		CAKeyFile:            s.Cluster.KeyPEM,
		FrontProxyCACertFile: s.FrontProxy.CertPEM,
		FrontProxyCAKeyFile:  s.FrontProxy.KeyPEM,
		EtcdCACertFile:       s.Etcd.CertPEM,
		EtcdCAKeyFile:        s.Etcd.KeyPEM,
		SAKeyFile:            s.SAKeyPEM,
		SAPubFile:            s.SAPubPEM,
	}
}

// SharedFileNames lists the names of the shared files relative to
// version.PKIDir, sorted.
func SharedFileNames() []string {
	names := []string{
		CACertFile, CAKeyFile,
		FrontProxyCACertFile, FrontProxyCAKeyFile,
		EtcdCACertFile, EtcdCAKeyFile,
		SAKeyFile, SAPubFile,
	}
	slices.Sort(names)
	return names
}

// LoadShared parses shared material from files named as Files names them. It
// checks every file, not only the first bad one, and its error names each file
// that is missing or does not parse, and each CA or key pair whose halves do
// not match, so an operator sees the whole damage at once.
func LoadShared(files map[string][]byte) (*Shared, error) {
	var errs []error
	for _, name := range SharedFileNames() {
		if len(files[name]) == 0 {
			errs = append(errs, fmt.Errorf("%s is missing", name))
		}
	}
	var s Shared
	for _, c := range []struct {
		dst         **CA
		certF, keyF string
		what        string
	}{
		{&s.Cluster, CACertFile, CAKeyFile, "cluster CA"},
		{&s.FrontProxy, FrontProxyCACertFile, FrontProxyCAKeyFile, "front-proxy CA"},
		{&s.Etcd, EtcdCACertFile, EtcdCAKeyFile, "etcd CA"},
	} {
		certPEM, keyPEM := files[c.certF], files[c.keyF]
		if len(certPEM) == 0 || len(keyPEM) == 0 {
			continue
		}
		ca, err := LoadCA(certPEM, keyPEM)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s (%s, %s): %w", c.what, c.certF, c.keyF, err))
			continue
		}
		*c.dst = ca
	}
	if keyPEM, pubPEM := files[SAKeyFile], files[SAPubFile]; len(keyPEM) > 0 && len(pubPEM) > 0 {
		if err := checkSAKeyPair(keyPEM, pubPEM); err != nil {
			errs = append(errs, err)
		}
		s.SAKeyPEM, s.SAPubPEM = keyPEM, pubPEM
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("load shared certificates: %w", errors.Join(errs...))
	}
	return &s, nil
}

// checkSAKeyPair checks that sa.key and sa.pub parse and are one key pair.
func checkSAKeyPair(keyPEM, pubPEM []byte) error {
	key, err := ParseKey(keyPEM)
	if err != nil {
		return fmt.Errorf("%s: %w", SAKeyFile, err)
	}
	block, _ := pem.Decode(pubPEM)
	if block == nil || block.Type != keyutil.PublicKeyBlockType {
		return fmt.Errorf("%s: no %q PEM block", SAPubFile, keyutil.PublicKeyBlockType)
	}
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return fmt.Errorf("%s: %w", SAPubFile, err)
	}
	if err := checkKeyMatches(pub, key); err != nil {
		return fmt.Errorf("%s and %s: %w", SAKeyFile, SAPubFile, err)
	}
	return nil
}

// publicKeyPEM encodes pub as a PKIX "PUBLIC KEY" PEM block, the form
// kube-apiserver reads with --service-account-key-file.
func publicKeyPEM(pub crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("encode public key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: keyutil.PublicKeyBlockType, Bytes: der}), nil
}
