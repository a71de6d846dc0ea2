package ha

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"stratum.dev/stratum/internal/token"
)

// Grant is one control-plane join grant's entry in the shared-certificate
// Secret, with the state of the bootstrap token it was minted with: what
// `stratum grants list` reports. The JSON names are stable (docs/cli.md).
type Grant struct {
	// TokenID is the grant's bootstrap token ID (the entry is certs-<id>).
	TokenID string `json:"tokenID"`
	// Bytes is the entry's size, which counts against the Secret's budget.
	Bytes int `json:"bytes"`
	// TokenExists is false once the token's Secret is gone.
	TokenExists bool `json:"tokenExists"`
	// Expires is the token's expiry, absent for a token without one or gone.
	Expires *time.Time `json:"expires,omitempty"`
	// Live is whether the token still authenticates, so the grant can still
	// be used; a grant that is not live is what PruneExpiredGrants drops.
	Live bool `json:"live"`
}

// GrantsReport is the shared-certificate Secret's grants and its budget.
type GrantsReport struct {
	// Published is false when no shared certificates are published at all.
	Published bool    `json:"published"`
	Grants    []Grant `json:"grants"`
	// Generation is the publication's generation (0 for none recorded).
	Generation int64 `json:"generation"`
	// Bytes and BudgetBytes are the Secret's data size and what it may hold.
	Bytes       int `json:"bytes"`
	BudgetBytes int `json:"budgetBytes"`
}

// ListGrants reads the shared-certificate Secret through cs and reports each
// grant entry with its token's state at now (stratum's clock, the same one
// the prune uses). It changes nothing.
func ListGrants(ctx context.Context, cs kubernetes.Interface, now time.Time) (GrantsReport, error) {
	rep := GrantsReport{Grants: []Grant{}, BudgetBytes: grantSecretBudget}
	s, err := cs.CoreV1().Secrets(certsNamespace).Get(ctx, certsSecret, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return rep, nil
	}
	if err != nil {
		return rep, fmt.Errorf("read Secret %s/%s: %w", certsNamespace, certsSecret, err)
	}
	rep.Published, rep.Generation, rep.Bytes = true, secretGeneration(s), dataSize(s.Data)
	tokens, err := token.List(ctx, cs, now)
	if err != nil {
		return rep, err
	}
	byID := make(map[string]token.Info, len(tokens))
	for _, t := range tokens {
		byID[t.ID] = t
	}
	for _, e := range grantEntries(s.Data) {
		g := Grant{TokenID: grantTokenID(e), Bytes: len(e) + len(s.Data[e])}
		if t, ok := byID[g.TokenID]; ok {
			g.TokenExists, g.Live, g.Expires = true, t.Live, t.Expires
		}
		rep.Grants = append(rep.Grants, g)
	}
	return rep, nil
}
