package certbundle

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzOpenEnvelope feeds arbitrary entries (and entry names) to the decoder a
// download runs on what the apiserver hands it: it must refuse without a
// panic, and anything it accepts must be a well-formed bundle. Random
// ciphertext never authenticates, so plain is also sealed properly (as the
// holder of the key could) and opened, which drives the decoding behind the
// authentication: the flat map, the v1 metadata and the file-set checks.
func FuzzOpenEnvelope(f *testing.F) {
	key := certKeyForTest(f)
	b := bundleForTest(f, true)
	v1, err := SealV1(key, certsSecret, "certs-aaaaaa", b)
	if err != nil {
		f.Fatal(err)
	}
	legacy, err := SealLegacy(key, certsSecret, b)
	if err != nil {
		f.Fatal(err)
	}
	v1JSON, _ := json.Marshal(v1Plain{Meta: Meta{Files: SortedNames(b.Files), CarriesAtRestKey: true}, Files: b.Files})
	flat, _ := json.Marshal(b.Files)
	f.Add("certs-aaaaaa", v1, v1JSON)
	f.Add(LegacyEntry, legacy, flat)
	f.Add("certs-aaaaaa", legacy, []byte(`{"meta":{"files":null},"files":{}}`))
	f.Add(LegacyEntry, v1, []byte(`{"ca.crt":"AA==","stratum-cluster-facts.json":"e30="}`))
	f.Add("certs-aaaaaa", []byte{}, []byte(`null`))
	f.Add("certs-aaaaaa", []byte{1}, []byte(`{"files":{"../x":"AA=="}}`))
	f.Add("proof", v1[:40], []byte{})
	f.Add("certs-", bytes.Repeat([]byte{0xff}, 64), []byte(`[]`))
	f.Fuzz(func(t *testing.T, entry string, sealed, plain []byte) {
		check := func(files map[string][]byte, g Grant, err error) {
			if err != nil {
				return
			}
			if checkFiles(files) != nil {
				t.Fatalf("accepted a bundle with a bad file set: %v", SortedNames(files))
			}
			if _, ok := files[legacyFactsFile]; ok {
				t.Fatal("accepted a bundle that would write the reserved facts name")
			}
			_, carries := files[EncryptionConfigFile]
			if carries != g.CarriesAtRestKey {
				t.Fatalf("grant says carries=%t, files say %t", g.CarriesAtRestKey, carries)
			}
		}
		check(Open(key, certsSecret, entry, sealed))
		ver := envelopeV1
		if entry == LegacyEntry {
			ver = envelopeLegacy
		}
		resealed, err := sealEntry(key, certsSecret, entry, ver, plain)
		if err != nil {
			t.Fatal(err)
		}
		check(Open(key, certsSecret, entry, resealed))
	})
}
