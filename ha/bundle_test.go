package ha

import (
	"bytes"
	"errors"
	"slices"
	"testing"
	"time"

	"stratum.dev/stratum/internal/addons"
	"stratum.dev/stratum/internal/pki"
)

func bundleForTest(t testing.TB, withEnc bool) bundle {
	t.Helper()
	s, err := pki.NewShared(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	files := s.Files()
	if withEnc {
		files[encryptionConfigFile] = []byte("kind: EncryptionConfiguration\n# key material\n")
	}
	prof := bundleProfile{PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/12", ClusterDomain: "cluster.local",
		Cilium: addons.CiliumSettings{Enabled: true, KubeProxyReplacement: true, Version: "1.18.0"},
		VIP:    "10.0.0.10", EtcdEndpoints: []string{"https://10.0.0.11:2379"}}
	return bundle{
		meta:  envelopeMeta{Generation: 7, CarriesAtRestKey: withEnc, VIP: prof.VIP, EtcdEndpoints: prof.EtcdEndpoints, Profile: prof},
		files: files,
	}
}

func certKeyForTest(t testing.TB) []byte {
	t.Helper()
	k, err := NewCertKey()
	if err != nil {
		t.Fatal(err)
	}
	b, err := parseCertKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseCertKey(t *testing.T) {
	good, _ := NewCertKey()
	for _, tc := range []struct {
		name, in string
		ok       bool
	}{
		{"fresh", good, true},
		{"surrounding space", " " + good + "\n", true},
		{"empty", "", false},
		{"short", good[:62], false},
		{"long", good + "00", false},
		{"not hex", "zz" + good[2:], false},
		{"base64-looking", "q83vEjRWeJCrze8SNFZ4kKvN7xI0VniQq83vEjRWeJA=", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := parseCertKey(tc.in)
			if tc.ok != (err == nil) {
				t.Fatalf("parseCertKey(%q) = %v, want ok=%t", tc.in, err, tc.ok)
			}
			if !tc.ok && !errors.Is(err, ErrBadCertKey) {
				t.Fatalf("error %v does not match ErrBadCertKey", err)
			}
			if tc.ok && len(k) != 32 {
				t.Fatalf("key of %d bytes", len(k))
			}
		})
	}
}

func TestNewCertKeyFresh(t *testing.T) {
	a, _ := NewCertKey()
	b, _ := NewCertKey()
	if a == b || len(a) != 64 {
		t.Fatalf("keys %q %q", a, b)
	}
}

func TestEnvelopeRoundTrip(t *testing.T) {
	for _, withEnc := range []bool{false, true} {
		b := bundleForTest(t, withEnc)
		key := certKeyForTest(t)
		sealed, err := sealV1(key, certsSecret, "certs-abcdef", b)
		if err != nil {
			t.Fatal(err)
		}
		files, g, err := openEnvelope(key, certsSecret, "certs-abcdef", sealed)
		if err != nil {
			t.Fatalf("open v1: %v", err)
		}
		if g.Generation != 7 || g.VIP != "10.0.0.10" || g.CarriesAtRestKey != withEnc || !slices.Equal(g.EtcdEndpoints, b.meta.EtcdEndpoints) || g.Legacy {
			t.Fatalf("v1 grant %+v", g)
		}
		if g.Profile.Cilium != b.meta.Profile.Cilium || g.Profile.PodCIDR != b.meta.Profile.PodCIDR {
			t.Fatalf("v1 profile %+v", g.Profile)
		}
		for name, want := range b.files {
			if !bytes.Equal(files[name], want) {
				t.Fatalf("v1 file %s differs", name)
			}
		}
		legacy, err := sealLegacy(key, certsSecret, b)
		if err != nil {
			t.Fatal(err)
		}
		lfiles, lg, err := openEnvelope(key, certsSecret, legacyEntry, legacy)
		if err != nil {
			t.Fatalf("open legacy: %v", err)
		}
		if !lg.Legacy || lg.Generation != 0 || lg.CarriesAtRestKey != withEnc || lg.Profile.ClusterDomain != "cluster.local" {
			t.Fatalf("legacy grant %+v", lg)
		}
		if _, ok := lfiles[legacyFactsFile]; ok {
			t.Fatal("legacy facts leaked into the files to write")
		}
		if len(lfiles) != len(b.files) {
			t.Fatalf("legacy files %v, want %v", sortedNames(lfiles), sortedNames(b.files))
		}
	}
}

func TestSealUsesFreshNonces(t *testing.T) {
	b := bundleForTest(t, false)
	key := certKeyForTest(t)
	x, _ := sealV1(key, certsSecret, "certs-abcdef", b)
	y, _ := sealV1(key, certsSecret, "certs-abcdef", b)
	if bytes.Equal(x[1:13], y[1:13]) {
		t.Fatal("two seals used the same nonce")
	}
}

// TestEnvelopeRefuses: every way an entry can be wrong is refused, with the
// sentinel a caller branches on.
func TestEnvelopeRefuses(t *testing.T) {
	b := bundleForTest(t, true)
	key, other := certKeyForTest(t), certKeyForTest(t)
	v1, _ := sealV1(key, certsSecret, "certs-aaaaaa", b)
	legacy, _ := sealLegacy(key, certsSecret, b)
	flip := func(in []byte, i int) []byte { out := bytes.Clone(in); out[i] ^= 0x01; return out }
	for _, tc := range []struct {
		name          string
		key           []byte
		secret, entry string
		sealed        []byte
		want          error
	}{
		{"wrong key", other, certsSecret, "certs-aaaaaa", v1, ErrBundleOpen},
		{"tampered ciphertext", key, certsSecret, "certs-aaaaaa", flip(v1, len(v1)-40), ErrBundleOpen},
		{"tampered tag", key, certsSecret, "certs-aaaaaa", flip(v1, len(v1)-1), ErrBundleOpen},
		{"tampered nonce", key, certsSecret, "certs-aaaaaa", flip(v1, 3), ErrBundleOpen},
		{"swapped into another grant", key, certsSecret, "certs-bbbbbb", v1, ErrBundleOpen},
		{"grant entry as legacy", key, certsSecret, legacyEntry, v1, ErrBundleMalformed},
		{"legacy as grant entry", key, certsSecret, "certs-aaaaaa", legacy, ErrBundleMalformed},
		{"version byte rewritten", key, certsSecret, legacyEntry, append([]byte{0}, v1[1:]...), ErrBundleOpen},
		{"other Secret", key, "other-secret", "certs-aaaaaa", v1, ErrBundleOpen},
		{"truncated", key, certsSecret, "certs-aaaaaa", v1[:20], ErrBundleMalformed},
		{"empty", key, certsSecret, "certs-aaaaaa", nil, ErrBundleMalformed},
		{"not a bundle entry", key, certsSecret, proofEntry, v1, ErrBundleMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := openEnvelope(tc.key, tc.secret, tc.entry, tc.sealed)
			if !errors.Is(err, tc.want) {
				t.Fatalf("open = %v, want %v", err, tc.want)
			}
		})
	}
}

// TestEnvelopeRefusesBadContents: an authenticated bundle with the wrong shape
// is still refused (a key holder cannot make a joiner write outside the PKI).
func TestEnvelopeRefusesBadContents(t *testing.T) {
	key := certKeyForTest(t)
	for _, tc := range []struct {
		name string
		edit func(*bundle)
	}{
		{"path traversal", func(b *bundle) { b.files["../../../etc/passwd"] = []byte("x") }},
		{"unknown file", func(b *bundle) { b.files["apiserver.key"] = []byte("x") }},
		{"missing CA key", func(b *bundle) { delete(b.files, pki.CAKeyFile) }},
		{"carries-key lie", func(b *bundle) { b.meta.CarriesAtRestKey = true }},
		{"reserved name", func(b *bundle) { b.files[legacyFactsFile] = []byte("{}") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := bundleForTest(t, false)
			tc.edit(&b)
			sealed, err := sealV1(key, certsSecret, "certs-aaaaaa", b)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := openEnvelope(key, certsSecret, "certs-aaaaaa", sealed); !errors.Is(err, ErrBundleMalformed) {
				t.Fatalf("open = %v, want ErrBundleMalformed", err)
			}
		})
	}
}

func TestProof(t *testing.T) {
	enc := []byte("kind: EncryptionConfiguration\nkey: one\n")
	p, err := sealProof(certsSecret, enc)
	if err != nil {
		t.Fatal(err)
	}
	if !proofOpens(certsSecret, enc, p) {
		t.Fatal("proof does not open under its own config")
	}
	if proofOpens(certsSecret, []byte("kind: EncryptionConfiguration\nkey: two\n"), p) {
		t.Fatal("proof opens under another config")
	}
	if proofOpens("other", enc, p) {
		t.Fatal("proof opens in another Secret")
	}
}

func TestGrantHelpers(t *testing.T) {
	data := map[string][]byte{"certs": {1}, "certs-bbbbbb": {2}, "certs-aaaaaa": {3}, "proof": {4}}
	if got := grantEntries(data); !slices.Equal(got, []string{"certs-aaaaaa", "certs-bbbbbb"}) {
		t.Fatalf("grantEntries = %v", got)
	}
	if dataSize(data) != len("certs")+len("certs-bbbbbb")+len("certs-aaaaaa")+len("proof")+4 {
		t.Fatalf("dataSize = %d", dataSize(data))
	}
}
