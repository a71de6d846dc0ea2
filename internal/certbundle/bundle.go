// Package certbundle is the codec of the shared-certificate bundle a
// control-plane join downloads: the sealed entries of the stratum-certs
// Secret (AES-256-GCM envelopes bound to their Secret, entry and version),
// the certificate-key they are sealed under, the at-rest key proof, and the
// checks an opened bundle passes before any file is written.
//
// It is a package of its own, apart from package ha that publishes and
// downloads the Secret, so that it depends on the standard library and a few
// small internal packages only: fuzzing the decoder (FuzzOpenEnvelope)
// instruments every dependency of the fuzzed package, and ha's (client-go,
// the etcd clients) would take minutes to build for seconds of fuzzing.
package certbundle

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"stratum.dev/stratum/internal/addons"
	"stratum.dev/stratum/internal/pki"
	"stratum.dev/stratum/internal/version"
)

// The entries of the stratum-certs Secret.
const (
	// LegacyEntry is the flat-map bundle every joiner version decodes,
	// sealed under the newest mint's (or re-upload's) key.
	LegacyEntry = "certs"
	// GrantEntryPrefix prefixes a grant's own entry; the token ID follows.
	GrantEntryPrefix = "certs-"
	// ProofEntry is sealed under a key derived from the at-rest encryption
	// config the bundle carries; absent when the bundle carries none.
	ProofEntry = "proof"
)

// Envelope versions: the first byte of every sealed entry.
const (
	envelopeLegacy byte = 0 // plaintext: the flat file map
	envelopeV1     byte = 1 // plaintext: v1Plain (metadata + files)
)

// certKeyLen is the certificate-key's length in bytes (AES-256).
const certKeyLen = 32

// EncryptionConfigFile is the bundle's name for the at-rest encryption config,
// and EncryptionConfigPath where it lives on a node.
const (
	EncryptionConfigFile = "encryption-config.yaml"
	EncryptionConfigPath = version.K8sConfDir + "/" + EncryptionConfigFile
)

// legacyFactsFile is the reserved name, in the flat map, of the cluster facts
// a joiner checks before writing anything (JSON Profile). It is no file
// name a joiner writes: bundle files are written only from fileNames.
const legacyFactsFile = "stratum-cluster-facts.json"

// proofPlaintext is what the proof entry seals.
const proofPlaintext = "stratum-certs at-rest key proof v1"

// Errors a caller branches on.
var (
	// ErrBadCertKey: the certificate-key is not 64 hex digits.
	ErrBadCertKey = errors.New("certificate-key is not 64 hex digits (32 bytes)")
	// ErrOpen: the entry does not open under this key at this place —
	// a wrong key, a tampered ciphertext, or an entry moved from elsewhere.
	ErrOpen = errors.New("shared-certificate bundle does not open with this certificate-key")
	// ErrMalformed: the entry is not a stratum envelope at all.
	ErrMalformed = errors.New("shared-certificate bundle is malformed")
	// ErrUnknownContent (an ErrMalformed too): the entry is in an envelope
	// version this stratum does not read, or opened under its key (so it
	// is the cluster's, unaltered) and holds fields or files this stratum
	// does not know: a newer stratum minted it, and a joiner at least as
	// new reads it.
	ErrUnknownContent = fmt.Errorf("%w: it holds what this stratum does not read (most likely minted by a newer stratum)", ErrMalformed)
)

// NewCertKey returns a fresh AES-256 certificate-key (hex) for upload-certs.
func NewCertKey() (string, error) {
	k := make([]byte, certKeyLen)
	if _, err := rand.Read(k); err != nil {
		return "", fmt.Errorf("new certificate-key: %w", err)
	}
	return hex.EncodeToString(k), nil
}

// ParseCertKey decodes a certificate-key: exactly 64 hex digits.
func ParseCertKey(certKeyHex string) ([]byte, error) {
	s := strings.TrimSpace(certKeyHex)
	if len(s) != 2*certKeyLen {
		return nil, fmt.Errorf("%w: got %d characters", ErrBadCertKey, len(s))
	}
	k, err := hex.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadCertKey, err)
	}
	return k, nil
}

// Profile is the cluster a bundle belongs to: the facts a joiner must
// match, checked (ha's DownloadCerts check) before any file is written.
type Profile struct {
	PodCIDR       string                `json:"podCIDR,omitempty"`
	ServiceCIDR   string                `json:"serviceCIDR,omitempty"`
	ClusterDomain string                `json:"clusterDomain,omitempty"`
	Cilium        addons.CiliumSettings `json:"cilium"`
	// VIP is the cluster VIP the publishing control plane recorded.
	VIP string `json:"vip,omitempty"`
	// EtcdEndpoints are the etcd client URLs the cluster published.
	EtcdEndpoints []string `json:"etcdEndpoints,omitempty"`
}

// Grant is what a download grants: the facts a join continues with.
type Grant struct {
	// EtcdEndpoints are the etcd client URLs the cluster published.
	EtcdEndpoints []string
	// CarriesAtRestKey reports that the bundle itself carried the at-rest
	// encryption config (a fact about the download, not about the disk).
	CarriesAtRestKey bool
	// VIP is the cluster VIP the publishing control plane recorded.
	VIP string
	// Generation is the publication's generation (0 for a legacy bundle).
	Generation int64
	// Profile is the cluster the bundle belongs to.
	Profile Profile
	// Legacy reports that the flat-map entry was opened (no grant entry).
	Legacy bool
}

// Meta is the v1 envelope's authenticated metadata.
type Meta struct {
	Generation       int64    `json:"generation"`
	CarriesAtRestKey bool     `json:"carriesAtRestKey"`
	VIP              string   `json:"vip,omitempty"`
	EtcdEndpoints    []string `json:"etcdEndpoints,omitempty"`
	Files            []string `json:"files"`
	Profile          Profile  `json:"profile"`
}

// v1Plain is the v1 plaintext.
type v1Plain struct {
	Meta  Meta              `json:"meta"`
	Files map[string][]byte `json:"files"`
}

// Bundle is the material one publication seals.
type Bundle struct {
	Meta  Meta
	Files map[string][]byte
}

// fileNames are the names a bundle may carry and a download writes:
// the shared PKI files and the at-rest encryption config.
func fileNames() []string {
	return append(pki.SharedFileNames(), EncryptionConfigFile)
}

// FilePath is where a bundle file is written on a node.
func FilePath(name string) string {
	if name == EncryptionConfigFile {
		return EncryptionConfigPath
	}
	return version.PKIFile(name)
}

// FileMode is a bundle file's mode on a node: keys and the encryption config
// 0600, certificates 0644.
func FileMode(name string) uint32 {
	if strings.HasSuffix(name, ".key") || name == EncryptionConfigFile {
		return 0o600
	}
	return 0o644
}

// checkFiles refuses a file set a download must not write: a name
// outside fileNames, or a required shared file missing.
func checkFiles(files map[string][]byte) error {
	allowed := fileNames()
	var errs []error
	var why error
	for name := range files {
		if name == legacyFactsFile {
			continue
		}
		if !slices.Contains(allowed, name) || path.Clean(name) != name {
			errs = append(errs, fmt.Errorf("unexpected file %q", name))
			if fs.ValidPath(name) && path.Clean(name) == name && why != ErrMalformed {
				why = ErrUnknownContent // authenticated: a file a newer stratum sends
			} else {
				why = ErrMalformed // a name no stratum writes (../x), whoever sealed it
			}
		}
	}
	for _, name := range pki.SharedFileNames() {
		if len(files[name]) == 0 {
			errs = append(errs, fmt.Errorf("%s is missing", name))
			why = ErrMalformed // no stratum sends a set without it
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", why, errors.Join(errs...))
	}
	return nil
}

// entryAAD is the associated data every sealed entry binds: the Secret's name,
// the entry's key and the envelope version. An entry therefore opens only in
// the place it was sealed for.
func entryAAD(secretName, entryKey string, ver byte) []byte {
	return fmt.Appendf(nil, "stratum.dev/certs-envelope\x00secret=%s\x00entry=%s\x00version=%d", secretName, entryKey, ver)
}

// sealEntry encrypts plaintext under key (AES-256-GCM, a fresh random nonce)
// for entryKey of secretName: version byte || nonce || ciphertext+tag.
func sealEntry(key []byte, secretName, entryKey string, ver byte, plaintext []byte) ([]byte, error) {
	aead, err := newAEAD(key)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("seal %s: nonce: %w", entryKey, err)
	}
	out := make([]byte, 0, 1+len(nonce)+len(plaintext)+aead.Overhead())
	out = append(out, ver)
	out = append(out, nonce...)
	return aead.Seal(out, nonce, plaintext, entryAAD(secretName, entryKey, ver)), nil
}

// openEntry authenticates and decrypts an entry sealed for entryKey of
// secretName with the given version.
func openEntry(key []byte, secretName, entryKey string, wantVer byte, sealed []byte) ([]byte, error) {
	aead, err := newAEAD(key)
	if err != nil {
		return nil, err
	}
	ns := aead.NonceSize()
	if len(sealed) < 1+ns+aead.Overhead() {
		return nil, fmt.Errorf("entry %s: %w: %d bytes is too short", entryKey, ErrMalformed, len(sealed))
	}
	if sealed[0] > envelopeV1 {
		return nil, fmt.Errorf("entry %s: %w: envelope version %d, this stratum reads up to %d", entryKey, ErrUnknownContent, sealed[0], envelopeV1)
	}
	if sealed[0] != wantVer {
		return nil, fmt.Errorf("entry %s: %w: envelope version %d, want %d", entryKey, ErrMalformed, sealed[0], wantVer)
	}
	plain, err := aead.Open(nil, sealed[1:1+ns], sealed[1+ns:], entryAAD(secretName, entryKey, wantVer))
	if err != nil {
		return nil, fmt.Errorf("entry %s: %w (a different key, a tampered entry, or one moved from another place)", entryKey, ErrOpen)
	}
	return plain, nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	if len(key) != certKeyLen {
		return nil, ErrBadCertKey
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// SealV1 seals b as a v1 envelope for entryKey.
func SealV1(key []byte, secretName, entryKey string, b Bundle) ([]byte, error) {
	meta := b.Meta
	meta.Files = SortedNames(b.Files)
	plain, err := json.Marshal(v1Plain{Meta: meta, Files: b.Files})
	if err != nil {
		return nil, fmt.Errorf("encode bundle: %w", err)
	}
	return sealEntry(key, secretName, entryKey, envelopeV1, plain)
}

// SealLegacy seals b as the flat map (file name -> contents), the cluster
// facts riding under legacyFactsFile.
func SealLegacy(key []byte, secretName string, b Bundle) ([]byte, error) {
	flat := make(map[string][]byte, len(b.Files)+1)
	for k, v := range b.Files {
		flat[k] = v
	}
	facts, err := json.Marshal(b.Meta.Profile)
	if err != nil {
		return nil, fmt.Errorf("encode cluster facts: %w", err)
	}
	flat[legacyFactsFile] = facts
	plain, err := json.Marshal(flat)
	if err != nil {
		return nil, fmt.Errorf("encode bundle: %w", err)
	}
	return sealEntry(key, secretName, LegacyEntry, envelopeLegacy, plain)
}

// Open opens the entry entryKey of secretName: a grant entry is a v1
// envelope, the legacy entry the flat map. It returns the files to write and
// the grant they make; nothing is trusted before the open authenticated it,
// and an authenticated bundle is still checked for shape.
func Open(key []byte, secretName, entryKey string, sealed []byte) (map[string][]byte, Grant, error) {
	if entryKey == LegacyEntry {
		plain, err := openEntry(key, secretName, entryKey, envelopeLegacy, sealed)
		if err != nil {
			return nil, Grant{}, err
		}
		var flat map[string][]byte
		if err := json.Unmarshal(plain, &flat); err != nil {
			return nil, Grant{}, fmt.Errorf("entry %s: %w: %v", entryKey, ErrMalformed, err)
		}
		var prof Profile
		if facts, ok := flat[legacyFactsFile]; ok {
			if err := json.Unmarshal(facts, &prof); err != nil {
				return nil, Grant{}, fmt.Errorf("entry %s: %w: cluster facts: %v", entryKey, ErrMalformed, err)
			}
			delete(flat, legacyFactsFile)
		}
		if err := checkFiles(flat); err != nil {
			return nil, Grant{}, fmt.Errorf("entry %s: %w", entryKey, err)
		}
		_, carries := flat[EncryptionConfigFile]
		return flat, Grant{
			EtcdEndpoints: prof.EtcdEndpoints, CarriesAtRestKey: carries, VIP: prof.VIP,
			Profile: prof, Legacy: true,
		}, nil
	}
	if !strings.HasPrefix(entryKey, GrantEntryPrefix) {
		return nil, Grant{}, fmt.Errorf("entry %s: %w: not a bundle entry", entryKey, ErrMalformed)
	}
	plain, err := openEntry(key, secretName, entryKey, envelopeV1, sealed)
	if err != nil {
		return nil, Grant{}, err
	}
	var env v1Plain
	dec := json.NewDecoder(bytes.NewReader(plain))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&env); err != nil {
		why := ErrMalformed
		if strings.HasPrefix(err.Error(), "json: unknown field ") { // authenticated: a newer stratum's field
			why = ErrUnknownContent
		}
		return nil, Grant{}, fmt.Errorf("entry %s: %w: %v", entryKey, why, err)
	}
	if err := checkFiles(env.Files); err != nil {
		return nil, Grant{}, fmt.Errorf("entry %s: %w", entryKey, err)
	}
	if _, ok := env.Files[legacyFactsFile]; ok {
		return nil, Grant{}, fmt.Errorf("entry %s: %w: reserved name %s in a v1 bundle", entryKey, ErrMalformed, legacyFactsFile)
	}
	if !slices.Equal(env.Meta.Files, SortedNames(env.Files)) {
		return nil, Grant{}, fmt.Errorf("entry %s: %w: metadata names files %v, bundle has %v", entryKey, ErrMalformed, env.Meta.Files, SortedNames(env.Files))
	}
	_, carries := env.Files[EncryptionConfigFile]
	if carries != env.Meta.CarriesAtRestKey {
		return nil, Grant{}, fmt.Errorf("entry %s: %w: metadata says carries-at-rest-key=%t, bundle disagrees", entryKey, ErrMalformed, env.Meta.CarriesAtRestKey)
	}
	return env.Files, Grant{
		EtcdEndpoints: env.Meta.EtcdEndpoints, CarriesAtRestKey: carries, VIP: env.Meta.VIP,
		Generation: env.Meta.Generation, Profile: env.Meta.Profile,
	}, nil
}

// proofKey derives the proof entry's key from the at-rest encryption config:
// only a node holding the same config bytes derives the same key.
func proofKey(encryptionConfig []byte) []byte {
	h := sha256.New()
	h.Write([]byte("stratum.dev/certs-proof-key\x00"))
	h.Write(encryptionConfig)
	return h.Sum(nil)
}

// SealProof seals the proof entry under the at-rest config's key.
func SealProof(secretName string, encryptionConfig []byte) ([]byte, error) {
	return sealEntry(proofKey(encryptionConfig), secretName, ProofEntry, envelopeV1, []byte(proofPlaintext))
}

// ProofOpens reports whether the proof entry opens under encryptionConfig.
func ProofOpens(secretName string, encryptionConfig, sealed []byte) bool {
	plain, err := openEntry(proofKey(encryptionConfig), secretName, ProofEntry, envelopeV1, sealed)
	return err == nil && string(plain) == proofPlaintext
}

// SortedNames returns the names of files, sorted: the order v1 metadata
// lists them in and a download writes them in.
func SortedNames(files map[string][]byte) []string {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
