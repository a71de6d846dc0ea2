package ha

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"stratum.dev/stratum/internal/certbundle"
	"stratum.dev/stratum/internal/token"
)

// Annotations UploadCerts stamps on stratum-certs.
const (
	// keySetAtAnnotation is when the certificate-key was last set (RFC 3339).
	keySetAtAnnotation = "stratum.dev/certs-key-set-at"
	// generationAnnotation is the publication's generation, which the v1
	// envelope also authenticates.
	generationAnnotation = "stratum.dev/certs-generation"
)

// secretSizeLimit is the apiserver's limit on a Secret's data (1 MiB).
const secretSizeLimit = 1 << 20

// grantSecretBudget is how many bytes of data (entry names plus values) the
// multi-entry Secret may hold: the 1 MiB limit less 64 KiB headroom for the
// object's metadata (owner references, annotations, managed fields), which
// count against etcd's request size but not against the data limit.
const grantSecretBudget = secretSizeLimit - 64<<10

// dataSize is what a Secret's data counts against the budget.
func dataSize(data map[string][]byte) int {
	n := 0
	for k, v := range data {
		n += len(k) + len(v)
	}
	return n
}

// grantEntry is the entry name of the grant minted with tokenID.
func grantEntry(tokenID string) string { return certbundle.GrantEntryPrefix + tokenID }

// grantTokenID is the token ID of a grant entry's name, "" for any other entry.
func grantTokenID(entry string) string {
	id, ok := strings.CutPrefix(entry, certbundle.GrantEntryPrefix)
	if !ok {
		return ""
	}
	return id
}

// grantEntries lists the grant entries of data, sorted.
func grantEntries(data map[string][]byte) []string {
	var out []string
	for k := range data {
		if grantTokenID(k) != "" {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// expiredGrantEntries are the grant entries of data whose bootstrap token is
// gone or expired by now (stratum's own clock), sorted. The tokens are read in
// one list, so a mint costs the same with one live grant or hundreds; a list
// that fails is an error: no token is shown to be gone.
func expiredGrantEntries(ctx context.Context, cs kubernetes.Interface, data map[string][]byte, now time.Time) ([]string, error) {
	entries := grantEntries(data)
	if len(entries) == 0 {
		return nil, nil
	}
	secrets, err := token.Secrets(ctx, cs)
	if err != nil {
		return nil, fmt.Errorf("judge %d grant(s): %w", len(entries), err)
	}
	byName := make(map[string]*corev1.Secret, len(secrets))
	for i := range secrets {
		byName[secrets[i].Name] = &secrets[i]
	}
	var out []string
	for _, e := range entries {
		if token.ExpiredOrGone(byName[token.SecretPrefix+grantTokenID(e)], now) {
			out = append(out, e)
		}
	}
	return out, nil
}

// mergeOwner adds owner to refs unless a reference with its UID is there.
func mergeOwner(refs []metav1.OwnerReference, owner *metav1.OwnerReference) []metav1.OwnerReference {
	if owner == nil {
		return refs
	}
	for _, r := range refs {
		if r.UID == owner.UID {
			return refs
		}
	}
	return append(slices.Clone(refs), *owner)
}

// ownerTokenID is the token ID of the bootstrap-token Secret owner names.
func ownerTokenID(owner *metav1.OwnerReference) (string, error) {
	if owner == nil {
		return "", nil
	}
	id := token.IDFromSecretName(owner.Name)
	if owner.Kind != "Secret" || owner.APIVersion != "v1" || id == "" || owner.UID == "" {
		return "", fmt.Errorf("owner %s %s (uid %q) is not a bootstrap-token Secret; nothing was uploaded", owner.Kind, owner.Name, owner.UID)
	}
	return id, nil
}

// secretGeneration is the generation a Secret's annotation records, 0 for none.
func secretGeneration(s *corev1.Secret) int64 {
	if s == nil {
		return 0
	}
	g, err := strconv.ParseInt(s.Annotations[generationAnnotation], 10, 64)
	if err != nil || g < 0 {
		return 0
	}
	return g
}
