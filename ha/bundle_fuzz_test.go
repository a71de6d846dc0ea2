package ha

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
	v1, err := sealV1(key, certsSecret, "certs-aaaaaa", b)
	if err != nil {
		f.Fatal(err)
	}
	legacy, err := sealLegacy(key, certsSecret, b)
	if err != nil {
		f.Fatal(err)
	}
	v1Plain, _ := json.Marshal(envelopeV1Plain{Meta: envelopeMeta{Files: sortedNames(b.files), CarriesAtRestKey: true}, Files: b.files})
	flat, _ := json.Marshal(b.files)
	f.Add("certs-aaaaaa", v1, v1Plain)
	f.Add(legacyEntry, legacy, flat)
	f.Add("certs-aaaaaa", legacy, []byte(`{"meta":{"files":null},"files":{}}`))
	f.Add(legacyEntry, v1, []byte(`{"ca.crt":"AA==","stratum-cluster-facts.json":"e30="}`))
	f.Add("certs-aaaaaa", []byte{}, []byte(`null`))
	f.Add("certs-aaaaaa", []byte{1}, []byte(`{"files":{"../x":"AA=="}}`))
	f.Add("proof", v1[:40], []byte{})
	f.Add("certs-", bytes.Repeat([]byte{0xff}, 64), []byte(`[]`))
	f.Fuzz(func(t *testing.T, entry string, sealed, plain []byte) {
		check := func(files map[string][]byte, g bundleGrant, err error) {
			if err != nil {
				return
			}
			if checkBundleFiles(files) != nil {
				t.Fatalf("accepted a bundle with a bad file set: %v", sortedNames(files))
			}
			if _, ok := files[legacyFactsFile]; ok {
				t.Fatal("accepted a bundle that would write the reserved facts name")
			}
			_, carries := files[encryptionConfigFile]
			if carries != g.CarriesAtRestKey {
				t.Fatalf("grant says carries=%t, files say %t", g.CarriesAtRestKey, carries)
			}
		}
		check(openEnvelope(key, certsSecret, entry, sealed))
		ver := envelopeV1
		if entry == legacyEntry {
			ver = envelopeLegacy
		}
		resealed, err := seal(key, certsSecret, entry, ver, plain)
		if err != nil {
			t.Fatal(err)
		}
		check(openEnvelope(key, certsSecret, entry, resealed))
	})
}
