package ha

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"stratum.dev/stratum/internal/certbundle"
)

// Names the external tests (package ha_test) need.
type (
	BundleProfile = certbundle.Profile
	BundleGrant   = certbundle.Grant
)

// CAsMakingPath is the marker of cluster CAs being written (clustercas.go).
var CAsMakingPath = casMakingPath

const (
	CertsSecretName   = certsSecret
	FenceLeaseName    = fenceLease
	JoinFencePolicy   = joinFencePolicy
	LegacyEntry       = certbundle.LegacyEntry
	GrantSecretBudget = grantSecretBudget
)

// GrantEntry is the entry name of tokenID's grant.
func GrantEntry(tokenID string) string { return grantEntry(tokenID) }

// UploadCertsWithBudget is UploadCerts with the Secret's budget set to budget
// bytes, so a test can fill it with a few grants.
func (n *Node) UploadCertsWithBudget(ctx context.Context, certKeyHex string, owner *metav1.OwnerReference, confirm func(context.Context) error, budget int) error {
	return n.publish(ctx, certKeyHex, owner, confirm, publishMint, publishOptions{budget: budget})
}

// DataSize is what a Secret's data counts against the budget.
func DataSize(data map[string][]byte) int { return dataSize(data) }

// RESTConfigOf is the client configuration ha builds from kc, its waits
// (apiretry.RetryRefusedWhileUnready) included.
func (n *Node) RESTConfigOf(kc []byte) (*rest.Config, error) { return n.restConfig(kc) }

// FetchCAOf is the join's discovery of o.Server's CA, its waits
// (askWhileSilent) included.
func (n *Node) FetchCAOf(ctx context.Context, o JoinOptions) ([]byte, error) {
	ca, _, err := n.fetchCA(ctx, o)
	return ca, err
}
