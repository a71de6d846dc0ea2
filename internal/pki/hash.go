package pki

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// caHashPrefix is the algorithm prefix of a CA hash.
const caHashPrefix = "sha256:"

// Errors CheckCAHash returns, for callers to tell a wrong cluster from a
// mistyped flag.
var (
	// ErrCAHashMismatch: the CA is not the one the hash pins. The join must
	// not trust this cluster.
	ErrCAHashMismatch = errors.New("CA certificate does not match the pinned hash")
	// ErrCAHashMalformed: the pinned hash is not "sha256:" followed by 64 hex
	// digits, so nothing was compared.
	ErrCAHashMalformed = errors.New("CA hash is not sha256:<64 hex digits>")
)

// CAHash is kubeadm's --discovery-token-ca-cert-hash of the first certificate
// in caCertPEM: "sha256:" and the hex SHA-256 of its SubjectPublicKeyInfo. It
// pins the CA's key, so a join trusts the cluster it was told to and no other.
func CAHash(caCertPEM []byte) (string, error) {
	crt, err := ParseCert(caCertPEM)
	if err != nil {
		return "", fmt.Errorf("hash CA certificate: %w", err)
	}
	sum := sha256.Sum256(crt.RawSubjectPublicKeyInfo)
	return caHashPrefix + hex.EncodeToString(sum[:]), nil
}

// CheckCAHash checks that the first certificate in caCertPEM has the CA hash
// want. want may omit the "sha256:" prefix and its hex may be in either case.
// It wraps ErrCAHashMismatch when the hashes differ and ErrCAHashMalformed
// when want is not a SHA-256 hash.
func CheckCAHash(caCertPEM []byte, want string) error {
	digits := strings.TrimSpace(want)
	if len(digits) >= len(caHashPrefix) && strings.EqualFold(digits[:len(caHashPrefix)], caHashPrefix) {
		digits = digits[len(caHashPrefix):]
	}
	wantSum, err := hex.DecodeString(digits)
	if err != nil || len(wantSum) != sha256.Size {
		return fmt.Errorf("check CA hash %q: %w", want, ErrCAHashMalformed)
	}
	got, err := CAHash(caCertPEM)
	if err != nil {
		return fmt.Errorf("check CA hash: %w", err)
	}
	gotSum, _ := hex.DecodeString(strings.TrimPrefix(got, caHashPrefix))
	if subtle.ConstantTimeCompare(gotSum, wantSum) != 1 {
		return fmt.Errorf("check CA hash: the CA's hash is %s, want %s: %w", got, caHashPrefix+strings.ToLower(digits), ErrCAHashMismatch)
	}
	return nil
}

// CheckCAHashFormat checks want is a SHA-256 CA hash ("sha256:" optional, hex
// in either case) and returns it normalized, so a malformed --ca-hash is
// refused before anything is fetched.
func CheckCAHashFormat(want string) (string, error) {
	digits := strings.TrimSpace(want)
	if len(digits) >= len(caHashPrefix) && strings.EqualFold(digits[:len(caHashPrefix)], caHashPrefix) {
		digits = digits[len(caHashPrefix):]
	}
	sum, err := hex.DecodeString(digits)
	if err != nil || len(sum) != sha256.Size {
		return "", fmt.Errorf("CA hash %q: %w", want, ErrCAHashMalformed)
	}
	return caHashPrefix + strings.ToLower(digits), nil
}
