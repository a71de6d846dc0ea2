package certbundle

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"stratum.dev/stratum/internal/addons"
	"stratum.dev/stratum/internal/pki"
)

// certsSecret is the Secret the tests seal for: ha's stratum-certs.
const certsSecret = "stratum-certs"

func bundleForTest(t testing.TB, withEnc bool) Bundle {
	t.Helper()
	s, err := pki.NewShared(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	files := s.Files()
	if withEnc {
		files[EncryptionConfigFile] = []byte("kind: EncryptionConfiguration\n# key material\n")
	}
	prof := Profile{PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/12", ClusterDomain: "cluster.local",
		Cilium: addons.CiliumSettings{Enabled: true, KubeProxyReplacement: true, Version: "1.18.0"},
		VIP:    "10.0.0.10", EtcdEndpoints: []string{"https://10.0.0.11:2379"}}
	return Bundle{
		Meta:  Meta{Generation: 7, CarriesAtRestKey: withEnc, VIP: prof.VIP, EtcdEndpoints: prof.EtcdEndpoints, Profile: prof},
		Files: files,
	}
}

func certKeyForTest(t testing.TB) []byte {
	t.Helper()
	k, err := NewCertKey()
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseCertKey(k)
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
			k, err := ParseCertKey(tc.in)
			if tc.ok != (err == nil) {
				t.Fatalf("ParseCertKey(%q) = %v, want ok=%t", tc.in, err, tc.ok)
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
		sealed, err := SealV1(key, certsSecret, "certs-abcdef", b)
		if err != nil {
			t.Fatal(err)
		}
		files, g, err := Open(key, certsSecret, "certs-abcdef", sealed)
		if err != nil {
			t.Fatalf("open v1: %v", err)
		}
		if g.Generation != 7 || g.VIP != "10.0.0.10" || g.CarriesAtRestKey != withEnc || !slices.Equal(g.EtcdEndpoints, b.Meta.EtcdEndpoints) || g.Legacy {
			t.Fatalf("v1 grant %+v", g)
		}
		if g.Profile.Cilium != b.Meta.Profile.Cilium || g.Profile.PodCIDR != b.Meta.Profile.PodCIDR {
			t.Fatalf("v1 profile %+v", g.Profile)
		}
		for name, want := range b.Files {
			if !bytes.Equal(files[name], want) {
				t.Fatalf("v1 file %s differs", name)
			}
		}
		legacy, err := SealLegacy(key, certsSecret, b)
		if err != nil {
			t.Fatal(err)
		}
		lfiles, lg, err := Open(key, certsSecret, LegacyEntry, legacy)
		if err != nil {
			t.Fatalf("open legacy: %v", err)
		}
		if !lg.Legacy || lg.Generation != 0 || lg.CarriesAtRestKey != withEnc || lg.Profile.ClusterDomain != "cluster.local" {
			t.Fatalf("legacy grant %+v", lg)
		}
		if _, ok := lfiles[legacyFactsFile]; ok {
			t.Fatal("legacy facts leaked into the files to write")
		}
		if len(lfiles) != len(b.Files) {
			t.Fatalf("legacy files %v, want %v", SortedNames(lfiles), SortedNames(b.Files))
		}
	}
}

func TestSealUsesFreshNonces(t *testing.T) {
	b := bundleForTest(t, false)
	key := certKeyForTest(t)
	x, _ := SealV1(key, certsSecret, "certs-abcdef", b)
	y, _ := SealV1(key, certsSecret, "certs-abcdef", b)
	if bytes.Equal(x[1:13], y[1:13]) {
		t.Fatal("two seals used the same nonce")
	}
}

// TestEnvelopeRefuses: every way an entry can be wrong is refused, with the
// sentinel a caller branches on.
func TestEnvelopeRefuses(t *testing.T) {
	b := bundleForTest(t, true)
	key, other := certKeyForTest(t), certKeyForTest(t)
	v1, _ := SealV1(key, certsSecret, "certs-aaaaaa", b)
	legacy, _ := SealLegacy(key, certsSecret, b)
	flip := func(in []byte, i int) []byte { out := bytes.Clone(in); out[i] ^= 0x01; return out }
	for _, tc := range []struct {
		name          string
		key           []byte
		secret, entry string
		sealed        []byte
		want          error
	}{
		{"wrong key", other, certsSecret, "certs-aaaaaa", v1, ErrOpen},
		{"tampered ciphertext", key, certsSecret, "certs-aaaaaa", flip(v1, len(v1)-40), ErrOpen},
		{"tampered tag", key, certsSecret, "certs-aaaaaa", flip(v1, len(v1)-1), ErrOpen},
		{"tampered nonce", key, certsSecret, "certs-aaaaaa", flip(v1, 3), ErrOpen},
		{"swapped into another grant", key, certsSecret, "certs-bbbbbb", v1, ErrOpen},
		{"grant entry as legacy", key, certsSecret, LegacyEntry, v1, ErrMalformed},
		{"legacy as grant entry", key, certsSecret, "certs-aaaaaa", legacy, ErrMalformed},
		{"version byte rewritten", key, certsSecret, LegacyEntry, append([]byte{0}, v1[1:]...), ErrOpen},
		{"other Secret", key, "other-secret", "certs-aaaaaa", v1, ErrOpen},
		{"truncated", key, certsSecret, "certs-aaaaaa", v1[:20], ErrMalformed},
		{"empty", key, certsSecret, "certs-aaaaaa", nil, ErrMalformed},
		{"not a bundle entry", key, certsSecret, ProofEntry, v1, ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Open(tc.key, tc.secret, tc.entry, tc.sealed)
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
		edit func(*Bundle)
	}{
		{"path traversal", func(b *Bundle) { b.Files["../../../etc/passwd"] = []byte("x") }},
		{"unknown file", func(b *Bundle) { b.Files["apiserver.key"] = []byte("x") }},
		{"missing CA key", func(b *Bundle) { delete(b.Files, pki.CAKeyFile) }},
		{"carries-key lie", func(b *Bundle) { b.Meta.CarriesAtRestKey = true }},
		{"reserved name", func(b *Bundle) { b.Files[legacyFactsFile] = []byte("{}") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := bundleForTest(t, false)
			tc.edit(&b)
			sealed, err := SealV1(key, certsSecret, "certs-aaaaaa", b)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := Open(key, certsSecret, "certs-aaaaaa", sealed); !errors.Is(err, ErrMalformed) {
				t.Fatalf("open = %v, want ErrMalformed", err)
			}
		})
	}
}

// TestOpenNamesANewerStratumsGrant: a grant in an envelope version this
// stratum does not read, or one that opens under its key but holds a field
// or a file this stratum does not know, is refused as ErrUnknownContent (an
// ErrMalformed too): a newer stratum minted it, and the join's advice is a
// stratum at least as new, not another certificate-key. A bundle broken
// otherwise, or naming a file outside the PKI directory, stays plain
// ErrMalformed.
func TestOpenNamesANewerStratumsGrant(t *testing.T) {
	key := certKeyForTest(t)
	valid, err := SealV1(key, certsSecret, "certs-aaaaaa", bundleForTest(t, false))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := openEntry(key, certsSecret, "certs-aaaaaa", envelopeV1, valid)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(plain, &doc); err != nil {
		t.Fatal(err)
	}
	doc["addedByANewerStratum"] = true
	withField, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	seal := func(ver byte, plain []byte) []byte {
		t.Helper()
		sealed, err := sealEntry(key, certsSecret, "certs-aaaaaa", ver, plain)
		if err != nil {
			t.Fatal(err)
		}
		return sealed
	}
	withFile := bundleForTest(t, false)
	withFile.Files["kubelet-ca.crt"] = []byte("x")
	sealedWithFile, err := SealV1(key, certsSecret, "certs-aaaaaa", withFile)
	if err != nil {
		t.Fatal(err)
	}
	traversal := bundleForTest(t, false)
	traversal.Files["../../etc/cron.d/x"] = []byte("x")
	sealedTraversal, err := SealV1(key, certsSecret, "certs-aaaaaa", traversal)
	if err != nil {
		t.Fatal(err)
	}
	missing := bundleForTest(t, false)
	delete(missing.Files, pki.CAKeyFile)
	sealedMissing, err := SealV1(key, certsSecret, "certs-aaaaaa", missing)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		sealed []byte
		newer  bool
	}{
		{"a newer envelope version", seal(envelopeV1+1, plain), true},
		{"a field this stratum does not know", seal(envelopeV1, withField), true},
		{"a file this stratum does not know", sealedWithFile, true},
		{"not JSON", seal(envelopeV1, []byte("{")), false},
		{"a required file missing", sealedMissing, false},
		{"a name no stratum writes", sealedTraversal, false},
	} {
		_, _, err := Open(key, certsSecret, "certs-aaaaaa", tc.sealed)
		if !errors.Is(err, ErrMalformed) || errors.Is(err, ErrUnknownContent) != tc.newer {
			t.Errorf("%s: %v; want ErrMalformed, ErrUnknownContent %v", tc.name, err, tc.newer)
		}
	}
}

func TestProof(t *testing.T) {
	enc := []byte("kind: EncryptionConfiguration\nkey: one\n")
	p, err := SealProof(certsSecret, enc)
	if err != nil {
		t.Fatal(err)
	}
	if !ProofOpens(certsSecret, enc, p) {
		t.Fatal("proof does not open under its own config")
	}
	if ProofOpens(certsSecret, []byte("kind: EncryptionConfiguration\nkey: two\n"), p) {
		t.Fatal("proof opens under another config")
	}
	if ProofOpens("other", enc, p) {
		t.Fatal("proof opens in another Secret")
	}
}
