package pki

import (
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"io/fs"
	"maps"
	"math/big"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/util/keyutil"
)

// now is the fixed issuing time of the tests that verify at a chosen time.
var now = time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)

// testShared caches one Shared for the tests that only read it.
var testShared = sync.OnceValues(func() (*Shared, error) { return NewShared(now) })

func mustShared(t *testing.T) *Shared {
	t.Helper()
	s, err := testShared()
	if err != nil {
		t.Fatalf("NewShared: %v", err)
	}
	return s
}

func mustCA(t *testing.T, cn string, at time.Time) *CA {
	t.Helper()
	ca, err := NewCA(cn, at)
	if err != nil {
		t.Fatalf("NewCA(%q): %v", cn, err)
	}
	return ca
}

func mustParse(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	c, err := ParseCert(certPEM)
	if err != nil {
		t.Fatalf("ParseCert: %v", err)
	}
	return c
}

// verify checks certPEM against ca for usage at time at.
func verify(t *testing.T, certPEM []byte, ca *CA, usage x509.ExtKeyUsage, at time.Time) error {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	_, err := mustParse(t, certPEM).Verify(x509.VerifyOptions{
		Roots: roots, CurrentTime: at, KeyUsages: []x509.ExtKeyUsage{usage},
	})
	return err
}

func TestNewCA(t *testing.T) {
	for _, cn := range []string{ClusterCAName, EtcdCAName, "x"} {
		t.Run(cn, func(t *testing.T) {
			ca := mustCA(t, cn, now)
			c := ca.Cert
			if c.Subject.CommonName != cn {
				t.Errorf("CN %q, want %q", c.Subject.CommonName, cn)
			}
			if !c.IsCA || !c.BasicConstraintsValid {
				t.Errorf("IsCA %v BasicConstraintsValid %v, want both", c.IsCA, c.BasicConstraintsValid)
			}
			wantUsage := x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
			if c.KeyUsage != wantUsage {
				t.Errorf("KeyUsage %b, want %b", c.KeyUsage, wantUsage)
			}
			if !c.NotBefore.Equal(now.Add(-Backdate)) || !c.NotAfter.Equal(now.Add(10*365*24*time.Hour)) {
				t.Errorf("valid %v to %v, want %v to now+10y", c.NotBefore, c.NotAfter, now.Add(-Backdate))
			}
			if err := c.CheckSignatureFrom(c); err != nil {
				t.Errorf("not self-signed: %v", err)
			}
			if _, ok := ca.Key.(*ecdsa.PrivateKey); !ok {
				t.Errorf("key is %T, want ECDSA", ca.Key)
			}
			if c.SerialNumber.BitLen() > 128 || c.SerialNumber.Sign() <= 0 {
				t.Errorf("serial %v is not a positive 128-bit number", c.SerialNumber)
			}
			if _, err := LoadCA(ca.CertPEM, ca.KeyPEM); err != nil {
				t.Errorf("LoadCA of its own PEM: %v", err)
			}
		})
	}
	if _, err := NewCA("", now); err == nil {
		t.Error("NewCA with an empty name succeeded")
	}
}

func TestIssueVerifiesAgainstItsCAOnly(t *testing.T) {
	ca := mustCA(t, "issuer", now)
	other := mustCA(t, "other", now)
	for _, tc := range []struct {
		name           string
		spec           LeafSpec
		server, client bool // usages the leaf must verify for
	}{
		{"server", LeafSpec{CommonName: "s", DNSNames: []string{"s.example"}, Server: true}, true, false},
		{"client", LeafSpec{CommonName: "c", Organization: []string{"g"}, Client: true}, false, true},
		{"both", LeafSpec{CommonName: "b", IPs: []net.IP{net.ParseIP("10.0.0.1")}, Server: true, Client: true}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			certPEM, keyPEM, err := ca.Issue(tc.spec, now)
			if err != nil {
				t.Fatalf("Issue: %v", err)
			}
			if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
				t.Fatalf("certificate and key are not a pair: %v", err)
			}
			at := now.Add(time.Hour)
			for _, u := range []struct {
				usage x509.ExtKeyUsage
				want  bool
			}{{x509.ExtKeyUsageServerAuth, tc.server}, {x509.ExtKeyUsageClientAuth, tc.client}} {
				if err := verify(t, certPEM, ca, u.usage, at); (err == nil) != u.want {
					t.Errorf("verify for usage %v against the issuer: %v, want ok=%v", u.usage, err, u.want)
				}
				if err := verify(t, certPEM, other, u.usage, at); err == nil {
					t.Errorf("verify for usage %v against another CA succeeded", u.usage)
				}
			}
			c := mustParse(t, certPEM)
			if c.IsCA {
				t.Error("leaf is a CA")
			}
			if !c.NotBefore.Equal(now.Add(-Backdate)) || !c.NotAfter.Equal(now.Add(365*24*time.Hour)) {
				t.Errorf("valid %v to %v, want now-5m to now+1y", c.NotBefore, c.NotAfter)
			}
			if c.Subject.CommonName != tc.spec.CommonName || !slices.Equal(c.Subject.Organization, tc.spec.Organization) {
				t.Errorf("subject %v, want CN %q O %v", c.Subject, tc.spec.CommonName, tc.spec.Organization)
			}
			if err := verify(t, certPEM, ca, x509.ExtKeyUsageAny, now.Add(-time.Hour)); err == nil {
				t.Error("leaf verifies before its NotBefore")
			}
			if err := verify(t, certPEM, ca, x509.ExtKeyUsageAny, now.Add(366*24*time.Hour)); err == nil {
				t.Error("leaf verifies after a year")
			}
		})
	}
}

func TestIssueSerialsAreRandom(t *testing.T) {
	ca := mustCA(t, "issuer", now)
	seen := map[string]bool{}
	for range 8 {
		certPEM, _, err := ca.Issue(LeafSpec{CommonName: "x", Client: true}, now)
		if err != nil {
			t.Fatal(err)
		}
		sn := mustParse(t, certPEM).SerialNumber
		if sn.BitLen() > 128 || sn.Cmp(big.NewInt(1<<32)) < 0 {
			t.Errorf("serial %v is not a random 128-bit number", sn)
		}
		if seen[sn.String()] {
			t.Errorf("serial %v issued twice", sn)
		}
		seen[sn.String()] = true
	}
}

func TestIssueStopsAtCAExpiry(t *testing.T) {
	ca := mustCA(t, "issuer", now)
	late := ca.Cert.NotAfter.Add(-24 * time.Hour)
	certPEM, _, err := ca.Issue(LeafSpec{CommonName: "x", Client: true}, late)
	if err != nil {
		t.Fatal(err)
	}
	if got := mustParse(t, certPEM).NotAfter; !got.Equal(ca.Cert.NotAfter) {
		t.Errorf("leaf NotAfter %v, want the CA's %v", got, ca.Cert.NotAfter)
	}
	// Past the CA's end (or a clock set that far ahead), a leaf would end
	// before it begins, which x509 does not refuse: it is not issued.
	for _, at := range []time.Time{ca.Cert.NotAfter, ca.Cert.NotAfter.Add(Backdate), ca.Cert.NotAfter.Add(time.Hour)} {
		if _, _, err := ca.Issue(LeafSpec{CommonName: "x", Client: true}, at); err == nil || !strings.Contains(err.Error(), "expired at") {
			t.Errorf("Issue at %v, past the CA's end %v = %v; want it refused naming the expiry", at, ca.Cert.NotAfter, err)
		}
	}
}

// TestIssueValidity: a leaf is valid for a year by default, and for its
// spec's Validity when one is given (a credential minted for one operation).
func TestIssueValidity(t *testing.T) {
	ca := mustCA(t, "issuer", now)
	for _, c := range []struct {
		validity, want time.Duration
	}{{0, LeafValidity}, {10 * time.Minute, 10 * time.Minute}} {
		certPEM, _, err := ca.Issue(LeafSpec{CommonName: "x", Client: true, Validity: c.validity}, now)
		if err != nil {
			t.Fatal(err)
		}
		if got := mustParse(t, certPEM).NotAfter; !got.Equal(now.Add(c.want).UTC().Truncate(time.Second)) {
			t.Errorf("Validity %v: NotAfter %v, want %v", c.validity, got, now.Add(c.want))
		}
	}
}

func TestIssueRefuses(t *testing.T) {
	ca := mustCA(t, "issuer", now)
	for name, spec := range map[string]LeafSpec{
		"no common name": {Server: true},
		"no usage":       {CommonName: "x"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, _, err := ca.Issue(spec, now); err == nil {
				t.Error("Issue succeeded")
			}
		})
	}
}

func TestLoadCA(t *testing.T) {
	ca := mustCA(t, "a", now)
	other := mustCA(t, "b", now)
	leafCert, leafKey, err := ca.Issue(LeafSpec{CommonName: "leaf", Client: true}, now)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name          string
		certPEM, key  []byte
		wantErrSubstr string
	}{
		{"matching pair", ca.CertPEM, ca.KeyPEM, ""},
		{"another CA's key", ca.CertPEM, other.KeyPEM, "does not match"},
		{"not a CA", leafCert, leafKey, "not a CA"},
		{"garbage certificate", []byte("garbage"), ca.KeyPEM, "certificate"},
		{"garbage key", ca.CertPEM, []byte("garbage"), "private key"},
		{"empty", nil, nil, "certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := LoadCA(tc.certPEM, tc.key)
			if tc.wantErrSubstr == "" {
				if err != nil {
					t.Fatalf("LoadCA: %v", err)
				}
				if !got.Cert.Equal(ca.Cert) {
					t.Error("loaded a different certificate")
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErrSubstr) {
				t.Fatalf("LoadCA error %v, want one containing %q", err, tc.wantErrSubstr)
			}
		})
	}
}

func TestSharedFileNames(t *testing.T) {
	want := []string{
		"ca.crt", "ca.key", "etcd/ca.crt", "etcd/ca.key",
		"front-proxy-ca.crt", "front-proxy-ca.key", "sa.key", "sa.pub",
	}
	if got := SharedFileNames(); !slices.Equal(got, want) {
		t.Errorf("SharedFileNames() = %v, want %v", got, want)
	}
}

func TestNewSharedCAs(t *testing.T) {
	s := mustShared(t)
	for _, tc := range []struct {
		ca *CA
		cn string
	}{{s.Cluster, "stratum-ca"}, {s.FrontProxy, "stratum-front-proxy-ca"}, {s.Etcd, "stratum-etcd-ca"}} {
		if got := tc.ca.Cert.Subject.CommonName; got != tc.cn {
			t.Errorf("CA CN %q, want %q", got, tc.cn)
		}
	}
}

// TestSAKeyPair checks the service-account pair in the forms kube-apiserver
// reads: a private key PEM and a "PUBLIC KEY" PEM of the same key.
func TestSAKeyPair(t *testing.T) {
	s := mustShared(t)
	for _, tc := range []struct {
		pem  []byte
		want string
	}{{s.SAKeyPEM, keyutil.ECPrivateKeyBlockType}, {s.SAPubPEM, keyutil.PublicKeyBlockType}} {
		if b, _ := pem.Decode(tc.pem); b == nil || b.Type != tc.want {
			t.Errorf("PEM block %v, want type %q", b, tc.want)
		}
	}
	priv, err := keyutil.ParsePrivateKeyPEM(s.SAKeyPEM)
	if err != nil {
		t.Fatalf("sa.key: %v", err)
	}
	pubs, err := keyutil.ParsePublicKeysPEM(s.SAPubPEM)
	if err != nil || len(pubs) != 1 {
		t.Fatalf("sa.pub: %v keys, %v", len(pubs), err)
	}
	if !priv.(*ecdsa.PrivateKey).PublicKey.Equal(pubs[0]) {
		t.Error("sa.pub is not sa.key's public key")
	}
}

func TestLoadSharedRoundTrip(t *testing.T) {
	s := mustShared(t)
	files := s.Files()
	if got := slices.Sorted(maps.Keys(files)); !slices.Equal(got, SharedFileNames()) {
		t.Fatalf("Files() names %v, want %v", got, SharedFileNames())
	}
	loaded, err := LoadShared(files)
	if err != nil {
		t.Fatalf("LoadShared: %v", err)
	}
	for name, data := range loaded.Files() {
		if string(data) != string(files[name]) {
			t.Errorf("%s changed in the round trip", name)
		}
	}
	// The loaded CAs sign what the originals verify.
	certPEM, _, err := loaded.Etcd.Issue(LeafSpec{CommonName: "x", Client: true}, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := verify(t, certPEM, s.Etcd, x509.ExtKeyUsageClientAuth, now); err != nil {
		t.Errorf("leaf from the loaded etcd CA: %v", err)
	}
}

func TestLoadSharedNamesBadFiles(t *testing.T) {
	s := mustShared(t)
	otherSA, err := NewShared(now)
	if err != nil {
		t.Fatal(err)
	}
	type tcase struct {
		name   string
		mutate func(map[string][]byte)
		want   []string // substrings of the error
	}
	var cases []tcase
	for _, n := range SharedFileNames() {
		cases = append(cases, tcase{"missing " + n, func(f map[string][]byte) { delete(f, n) }, []string{n + " is missing"}})
	}
	cases = append(cases,
		tcase{"two missing", func(f map[string][]byte) { delete(f, "ca.key"); delete(f, "sa.pub") },
			[]string{"ca.key is missing", "sa.pub is missing"}},
		tcase{"empty file", func(f map[string][]byte) { f["front-proxy-ca.crt"] = nil }, []string{"front-proxy-ca.crt is missing"}},
		tcase{"corrupt etcd CA certificate", func(f map[string][]byte) { f["etcd/ca.crt"] = []byte("junk") }, []string{"etcd/ca.crt"}},
		tcase{"CA keys swapped", func(f map[string][]byte) {
			f["ca.key"], f["front-proxy-ca.key"] = f["front-proxy-ca.key"], f["ca.key"]
		}, []string{"ca.key", "front-proxy-ca.key", "does not match"}},
		tcase{"sa.pub of another pair", func(f map[string][]byte) { f["sa.pub"] = otherSA.SAPubPEM }, []string{"sa.key and sa.pub"}},
		tcase{"sa.pub not a public key", func(f map[string][]byte) { f["sa.pub"] = f["sa.key"] }, []string{"sa.pub"}},
		tcase{"sa.key garbage", func(f map[string][]byte) { f["sa.key"] = []byte("junk") }, []string{"sa.key"}},
	)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			files := s.Files()
			tc.mutate(files)
			_, err := LoadShared(files)
			if err == nil {
				t.Fatal("LoadShared succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestNodeLeaves(t *testing.T) {
	s := mustShared(t)
	nodeIP := net.ParseIP("10.0.0.7")
	vip := net.ParseIP("10.0.0.100")
	svc := net.ParseIP("10.96.0.1")
	sans := &APISANs{
		DNSNames: []string{"api.example", "localhost", "KUBERNETES", "api.example"},
		// 127.0.0.1 in its 16-byte form and the node IP again must not repeat.
		IPs: []net.IP{vip, svc, net.ParseIP("127.0.0.1"), nodeIP, vip},
	}
	leaves, err := NodeLeaves(s, "cp2", nodeIP, sans, now)
	if err != nil {
		t.Fatalf("NodeLeaves: %v", err)
	}
	if got := slices.Sorted(maps.Keys(leaves)); !slices.Equal(got, NodeLeafNames()) {
		t.Fatalf("NodeLeaves names %v, want %v", got, NodeLeafNames())
	}
	if len(NodeLeafNames()) != 16 {
		t.Errorf("NodeLeafNames() has %d names, want 16", len(NodeLeafNames()))
	}
	lo := net.IPv4(127, 0, 0, 1)
	cas := map[string]*CA{"cluster": s.Cluster, "front-proxy": s.FrontProxy, "etcd": s.Etcd}
	for _, tc := range []struct {
		name           string
		ca             string
		cn             string
		org            []string
		dns            []string
		ips            []net.IP
		server, client bool
	}{
		{"apiserver", "cluster", "kube-apiserver", nil,
			[]string{"cp2", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost", "api.example"},
			[]net.IP{nodeIP, lo, vip, svc}, true, false},
		{"apiserver-etcd-client", "etcd", "kube-apiserver-etcd-client", nil, nil, nil, false, true},
		{"apiserver-kubelet-client", "cluster", "kube-apiserver-kubelet-client", []string{"stratum:cluster-admins"}, nil, nil, false, true},
		{"front-proxy-client", "front-proxy", "front-proxy-client", nil, nil, nil, false, true},
		{"etcd/server", "etcd", "cp2", nil, []string{"cp2", "localhost"}, []net.IP{nodeIP, lo}, true, true},
		{"etcd/peer", "etcd", "cp2", nil, []string{"cp2"}, []net.IP{nodeIP, net.ParseIP("127.0.0.1")}, true, true},
		{"etcd/healthcheck-client", "etcd", "stratum-etcd-client", nil, nil, nil, false, true},
		{"admin", "cluster", "kubernetes-admin", []string{"stratum:cluster-admins"}, nil, nil, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			certPEM, keyPEM := leaves[tc.name+".crt"], leaves[tc.name+".key"]
			if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
				t.Fatalf("certificate and key are not a pair: %v", err)
			}
			c := mustParse(t, certPEM)
			if c.Subject.CommonName != tc.cn || !slices.Equal(c.Subject.Organization, tc.org) {
				t.Errorf("subject CN %q O %v, want CN %q O %v", c.Subject.CommonName, c.Subject.Organization, tc.cn, tc.org)
			}
			if !slices.Equal(c.DNSNames, tc.dns) {
				t.Errorf("DNS SANs %v, want %v", c.DNSNames, tc.dns)
			}
			if !slices.EqualFunc(c.IPAddresses, tc.ips, net.IP.Equal) {
				t.Errorf("IP SANs %v, want %v", c.IPAddresses, tc.ips)
			}
			for caName, ca := range cas {
				for _, u := range []struct {
					usage x509.ExtKeyUsage
					has   bool
				}{{x509.ExtKeyUsageServerAuth, tc.server}, {x509.ExtKeyUsageClientAuth, tc.client}} {
					want := u.has && caName == tc.ca
					if err := verify(t, certPEM, ca, u.usage, now); (err == nil) != want {
						t.Errorf("verify against %s CA for %v: %v, want ok=%v", caName, u.usage, err, want)
					}
				}
			}
		})
	}
}

func TestNodeLeavesWithoutSANs(t *testing.T) {
	leaves, err := NodeLeaves(mustShared(t), "cp1", net.ParseIP("192.0.2.1"), nil, now)
	if err != nil {
		t.Fatalf("NodeLeaves: %v", err)
	}
	c := mustParse(t, leaves["apiserver.crt"])
	want := []net.IP{net.ParseIP("192.0.2.1"), net.ParseIP("127.0.0.1")}
	if !slices.EqualFunc(c.IPAddresses, want, net.IP.Equal) {
		t.Errorf("IP SANs %v, want %v", c.IPAddresses, want)
	}
}

func TestNodeLeavesRefuses(t *testing.T) {
	s := mustShared(t)
	for _, tc := range []struct {
		name     string
		s        *Shared
		hostname string
		ip       net.IP
	}{
		{"no shared", nil, "cp", net.ParseIP("10.0.0.1")},
		{"no etcd CA", &Shared{Cluster: s.Cluster, FrontProxy: s.FrontProxy}, "cp", net.ParseIP("10.0.0.1")},
		{"no hostname", s, "", net.ParseIP("10.0.0.1")},
		{"no IP", s, "cp", nil},
		{"unspecified IP", s, "cp", net.IPv4zero},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NodeLeaves(tc.s, tc.hostname, tc.ip, nil, now); err == nil {
				t.Error("NodeLeaves succeeded")
			}
		})
	}
}

// TestRenewNodeLeavesKeepsKeys: a renewal reissues every certificate, the
// same leaves NodeLeaves issues, over the key on disk; a key that is
// missing or does not parse is made anew and returned to be written; a key
// that cannot be read fails the renewal.
func TestRenewNodeLeavesKeepsKeys(t *testing.T) {
	s := mustShared(t)
	ip := net.ParseIP("10.0.0.7")
	old, err := NodeLeaves(s, "cp2", ip, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	onDisk := maps.Clone(old)
	delete(onDisk, "admin.key")
	onDisk["etcd/peer.key"] = []byte("not a key")
	read := func(name string) ([]byte, error) {
		if b, ok := onDisk[name]; ok {
			return b, nil
		}
		return nil, fs.ErrNotExist
	}
	later := now.Add(24 * time.Hour)
	certs, newKeys, err := RenewNodeLeaves(s, "cp2", ip, nil, later, read)
	if err != nil {
		t.Fatalf("RenewNodeLeaves: %v", err)
	}
	if got := slices.Sorted(maps.Keys(newKeys)); !slices.Equal(got, []string{"admin.key", "etcd/peer.key"}) {
		t.Fatalf("keys made anew %v, want the missing admin.key and the unparsable etcd/peer.key", got)
	}
	for _, name := range NodeLeafNames() {
		if !strings.HasSuffix(name, ".crt") {
			continue
		}
		base := strings.TrimSuffix(name, ".crt")
		key, ok := newKeys[base+".key"]
		if !ok {
			key = old[base+".key"]
		}
		if _, err := tls.X509KeyPair(certs[name], key); err != nil {
			t.Errorf("%s does not pair with the key it is to be written beside: %v", name, err)
		}
		renewed, was := mustParse(t, certs[name]), mustParse(t, old[name])
		if !renewed.NotAfter.After(was.NotAfter) || renewed.Subject.CommonName != was.Subject.CommonName ||
			!slices.Equal(renewed.DNSNames, was.DNSNames) || !slices.EqualFunc(renewed.IPAddresses, was.IPAddresses, net.IP.Equal) {
			t.Errorf("%s renewed as %v %v %v until %s, was %v %v %v until %s", name, renewed.Subject, renewed.DNSNames, renewed.IPAddresses, renewed.NotAfter,
				was.Subject, was.DNSNames, was.IPAddresses, was.NotAfter)
		}
	}
	broken := errors.New("input/output error")
	if _, _, err := RenewNodeLeaves(s, "cp2", ip, nil, later, func(string) ([]byte, error) { return nil, broken }); !errors.Is(err, broken) {
		t.Fatalf("RenewNodeLeaves with a key that cannot be read = %v, want its error", err)
	}
}

func TestCAHash(t *testing.T) {
	s := mustShared(t)
	got, err := CAHash(s.Cluster.CertPEM)
	if err != nil {
		t.Fatalf("CAHash: %v", err)
	}
	block, _ := pem.Decode(s.Cluster.CertPEM)
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	if want := "sha256:" + hex.EncodeToString(sum[:]); got != want {
		t.Errorf("CAHash = %s, want %s", got, want)
	}
	if other, _ := CAHash(s.Etcd.CertPEM); other == got {
		t.Error("two CAs hash alike")
	}
	if _, err := CAHash([]byte("junk")); err == nil {
		t.Error("CAHash of junk succeeded")
	}
}

func TestCheckCAHash(t *testing.T) {
	s := mustShared(t)
	h, err := CAHash(s.Cluster.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	digits := strings.TrimPrefix(h, "sha256:")
	otherHash, _ := CAHash(s.Etcd.CertPEM)
	for _, tc := range []struct {
		name    string
		caPEM   []byte
		want    string
		wantErr error // nil: accepted; errAny: some other error
	}{
		{"exact", s.Cluster.CertPEM, h, nil},
		{"no prefix", s.Cluster.CertPEM, digits, nil},
		{"upper-case hex", s.Cluster.CertPEM, "sha256:" + strings.ToUpper(digits), nil},
		{"upper-case prefix", s.Cluster.CertPEM, "SHA256:" + digits, nil},
		{"another CA", s.Cluster.CertPEM, otherHash, ErrCAHashMismatch},
		{"another CA without prefix", s.Etcd.CertPEM, digits, ErrCAHashMismatch},
		{"short", s.Cluster.CertPEM, h[:len(h)-2], ErrCAHashMalformed},
		{"not hex", s.Cluster.CertPEM, "sha256:" + strings.Repeat("zz", 32), ErrCAHashMalformed},
		{"other algorithm", s.Cluster.CertPEM, "sha1:" + digits, ErrCAHashMalformed},
		{"empty", s.Cluster.CertPEM, "", ErrCAHashMalformed},
		{"bad certificate", []byte("junk"), h, errAny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckCAHash(tc.caPEM, tc.want)
			switch {
			case tc.wantErr == nil:
				if err != nil {
					t.Errorf("CheckCAHash: %v", err)
				}
			case tc.wantErr == errAny:
				if err == nil || errors.Is(err, ErrCAHashMismatch) || errors.Is(err, ErrCAHashMalformed) {
					t.Errorf("CheckCAHash error %v, want one that is neither sentinel", err)
				}
			default:
				if !errors.Is(err, tc.wantErr) {
					t.Errorf("CheckCAHash error %v, want %v", err, tc.wantErr)
				}
				other := ErrCAHashMalformed
				if tc.wantErr == ErrCAHashMalformed {
					other = ErrCAHashMismatch
				}
				if errors.Is(err, other) {
					t.Errorf("CheckCAHash error %v is also %v", err, other)
				}
			}
		})
	}
}

// errAny stands for an error that is neither of the package's sentinels.
var errAny = errors.New("any other error")

func TestCheckLeafCovers(t *testing.T) {
	ca := mustCA(t, "ca", now)
	certPEM, _, err := ca.Issue(LeafSpec{
		CommonName: "x", DNSNames: []string{"10.0.0.9"},
		IPs: []net.IP{net.ParseIP("10.0.0.1"), net.ParseIP("fd00::1")}, Server: true,
	}, now)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		certPEM []byte
		ip      net.IP
		wantErr error
	}{
		{"covered", certPEM, net.ParseIP("10.0.0.1"), nil},
		{"covered 4-byte form", certPEM, net.IPv4(10, 0, 0, 1).To4(), nil},
		{"covered IPv6", certPEM, net.ParseIP("fd00::1"), nil},
		{"not covered", certPEM, net.ParseIP("10.0.0.2"), ErrIPNotCovered},
		{"only a DNS name", certPEM, net.ParseIP("10.0.0.9"), ErrIPNotCovered},
		{"no IP", certPEM, nil, errAny},
		{"bad certificate", []byte("junk"), net.ParseIP("10.0.0.1"), errAny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckLeafCovers(tc.certPEM, tc.ip)
			switch {
			case tc.wantErr == nil:
				if err != nil {
					t.Errorf("CheckLeafCovers: %v", err)
				}
			case tc.wantErr == errAny:
				if err == nil || errors.Is(err, ErrIPNotCovered) {
					t.Errorf("CheckLeafCovers error %v, want an error other than ErrIPNotCovered", err)
				}
			default:
				if !errors.Is(err, tc.wantErr) {
					t.Errorf("CheckLeafCovers error %v, want %v", err, tc.wantErr)
				}
			}
		})
	}
}

// TestTLSHandshake runs real handshakes between ServerTLS and ClientTLS over
// loopback: both sides must present certificates of the trusted CA.
func TestTLSHandshake(t *testing.T) {
	at := time.Now()
	ca := mustCA(t, "etcd", at)
	rogue := mustCA(t, "rogue", at)
	issue := func(ca *CA, spec LeafSpec) [2][]byte {
		t.Helper()
		c, k, err := ca.Issue(spec, at)
		if err != nil {
			t.Fatal(err)
		}
		return [2][]byte{c, k}
	}
	server := issue(ca, LeafSpec{CommonName: "srv", DNSNames: []string{"srv"}, IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true})
	client := issue(ca, LeafSpec{CommonName: "cli", Client: true})
	rogueServer := issue(rogue, LeafSpec{CommonName: "srv", DNSNames: []string{"srv"}, Server: true})
	rogueClient := issue(rogue, LeafSpec{CommonName: "cli", Client: true})
	serverOnly := issue(ca, LeafSpec{CommonName: "cli", Server: true})

	for _, tc := range []struct {
		name       string
		server     [2][]byte
		client     [2][]byte
		serverName string
		wantOK     bool
	}{
		{"both from the CA", server, client, "srv", true},
		{"by IP", server, client, "127.0.0.1", true},
		{"client from another CA", server, rogueClient, "srv", false},
		{"server from another CA", rogueServer, client, "srv", false},
		{"client certificate without client usage", server, serverOnly, "srv", false},
		{"wrong server name", server, client, "other", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			scfg, err := ServerTLS(ca.CertPEM, tc.server[0], tc.server[1])
			if err != nil {
				t.Fatalf("ServerTLS: %v", err)
			}
			ccfg, err := ClientTLS(ca.CertPEM, tc.client[0], tc.client[1], tc.serverName)
			if err != nil {
				t.Fatalf("ClientTLS: %v", err)
			}
			if scfg.MinVersion != tls.VersionTLS12 || ccfg.MinVersion != tls.VersionTLS12 {
				t.Errorf("MinVersion server %x client %x, want TLS 1.2", scfg.MinVersion, ccfg.MinVersion)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			type result struct {
				err   error
				peers []*x509.Certificate
			}
			srvDone := make(chan result, 1)
			go func() {
				conn, err := ln.Accept()
				if err != nil {
					srvDone <- result{err: err}
					return
				}
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
				srv := tls.Server(conn, scfg)
				err = srv.Handshake()
				srvDone <- result{err, srv.ConnectionState().PeerCertificates}
			}()
			conn, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			cliErr := tls.Client(conn, ccfg).Handshake()
			if cliErr != nil {
				_ = conn.Close() // the server may still wait for the client's flight
			}
			srvRes := <-srvDone
			sErr := srvRes.err
			if ok := cliErr == nil && sErr == nil; ok != tc.wantOK {
				t.Fatalf("handshake: client %v, server %v; want ok=%v", cliErr, sErr, tc.wantOK)
			}
			if tc.wantOK {
				if peers := srvRes.peers; len(peers) == 0 || peers[0].Subject.CommonName != "cli" {
					t.Errorf("server saw client certificates %v, want CN cli", peers)
				}
			}
		})
	}
}

func TestTLSConfigRefusesBadInput(t *testing.T) {
	ca := mustCA(t, "ca", now)
	c, k, err := ca.Issue(LeafSpec{CommonName: "x", Client: true, Server: true}, now)
	if err != nil {
		t.Fatal(err)
	}
	other := mustCA(t, "other", now)
	for _, tc := range []struct {
		name            string
		caPEM, crt, key []byte
		serverName      string
	}{
		{"no CA", nil, c, k, "x"},
		{"garbage CA", []byte("junk"), c, k, "x"},
		{"no certificate", ca.CertPEM, nil, k, "x"},
		{"key of another certificate", ca.CertPEM, c, other.KeyPEM, "x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ClientTLS(tc.caPEM, tc.crt, tc.key, tc.serverName); err == nil {
				t.Error("ClientTLS succeeded")
			}
			if _, err := ServerTLS(tc.caPEM, tc.crt, tc.key); err == nil {
				t.Error("ServerTLS succeeded")
			}
		})
	}
	cfg, err := ClientTLS(ca.CertPEM, c, k, "")
	if err != nil || cfg.ServerName != "" {
		t.Errorf("ClientTLS without a server name = %v, %v; want a config that leaves the name to the transport", cfg, err)
	}
}
