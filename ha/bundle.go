package ha

import "stratum.dev/stratum/internal/certbundle"

// The shared-certificate bundle's codec (envelopes, certificate-key, proof)
// lives in internal/certbundle; these forward the names ha has always
// exported, so callers and errors.Is keep working unchanged.

// Errors a caller branches on.
var (
	// ErrBadCertKey: the certificate-key is not 64 hex digits
	// (certbundle.ErrBadCertKey).
	ErrBadCertKey = certbundle.ErrBadCertKey
	// ErrBundleOpen: the entry does not open under this key at this place —
	// a wrong key, a tampered ciphertext, or an entry moved from elsewhere
	// (certbundle.ErrOpen).
	ErrBundleOpen = certbundle.ErrOpen
	// ErrBundleMalformed: the entry is not a stratum envelope at all
	// (certbundle.ErrMalformed).
	ErrBundleMalformed = certbundle.ErrMalformed
)

// NewCertKey returns a fresh AES-256 certificate-key (hex) for upload-certs.
func NewCertKey() (string, error) { return certbundle.NewCertKey() }
