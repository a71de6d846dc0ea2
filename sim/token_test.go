package sim

import (
	"context"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"stratum.dev/stratum/internal/assets/assetstest"
)

// TestBootstrapTokensLiveAndAlreadyExpired checks, against the real
// apiserver and controller manager, that a live bootstrap token
// authenticates in its groups, one created already expired is refused, and
// the token cleaner removes the expired one.
func TestBootstrapTokensLiveAndAlreadyExpired(t *testing.T) {
	assetstest.Require(t)
	c := Start(t, Config{ControlPlanes: 1, APIServers: true, ControllerManager: true})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	h := c.Host("cp1")
	admin, err := h.Admin()
	if err != nil {
		t.Fatal(err)
	}
	const group = "system:bootstrappers:stratum:control-plane"
	live, err := CreateBootstrapToken(ctx, admin, []string{group}, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	expired, err := CreateBootstrapToken(ctx, admin, []string{group}, time.Now().Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	whoami := func(token string) (*authv1.SelfSubjectReview, error) { return reviewAs(ctx, t, h, token) }
	var review *authv1.SelfSubjectReview
	deadline := time.Now().Add(10 * time.Second)
	for {
		review, err = whoami(live)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("live token refused: %v", err)
	}
	id := strings.SplitN(live, ".", 2)[0]
	if review.Status.UserInfo.Username != "system:bootstrap:"+id || !contains(review.Status.UserInfo.Groups, group) {
		t.Fatalf("live token authenticated as %+v", review.Status.UserInfo)
	}
	if _, err := whoami(expired); !apierrors.IsUnauthorized(err) {
		t.Fatalf("expired token: %v, want Unauthorized", err)
	}
	expiredSecret := "bootstrap-token-" + strings.SplitN(expired, ".", 2)[0]
	deadline = time.Now().Add(30 * time.Second)
	for {
		_, err := admin.CoreV1().Secrets("kube-system").Get(ctx, expiredSecret, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("token cleaner did not remove the expired token %s (last: %v)", expiredSecret, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := admin.CoreV1().Secrets("kube-system").Get(ctx, "bootstrap-token-"+id, metav1.GetOptions{}); err != nil {
		t.Fatalf("token cleaner touched the live token: %v", err)
	}
}

// reviewAs asks h's apiserver who the bearer of token is (a
// SelfSubjectReview), with no other credential.
func reviewAs(ctx context.Context, t *testing.T, h *Host, token string) (*authv1.SelfSubjectReview, error) {
	t.Helper()
	cfg, err := h.AdminConfig()
	if err != nil {
		t.Fatal(err)
	}
	anon := rest.AnonymousClientConfig(cfg)
	anon.BearerToken = token
	return kubernetes.NewForConfigOrDie(anon).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authv1.SelfSubjectReview{}, metav1.CreateOptions{})
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// TestDeletedTokenAuthenticatesWithinTheApiserverCache pins what the
// expired-grant property models: kube-apiserver caches a token's successful
// authentication for 10 s (its built-in TokenSuccessCacheTTL), so a
// bootstrap token used just before its deletion still authenticates for a
// few seconds, and is refused once that window has passed. A revoked join
// command is therefore dead at most 10 s after its last use.
func TestDeletedTokenAuthenticatesWithinTheApiserverCache(t *testing.T) {
	t.Parallel() // its own simulated cluster
	assetstest.Require(t)
	c := Start(t, Config{ControlPlanes: 1, APIServers: true})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	h := c.Host("cp1")
	admin, err := h.Admin()
	if err != nil {
		t.Fatal(err)
	}
	tok, err := CreateBootstrapToken(ctx, admin, []string{"system:bootstrappers:stratum:control-plane"}, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	whoami := func() error {
		_, err := reviewAs(ctx, t, h, tok)
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for err = whoami(); err != nil && time.Now().Before(deadline); err = whoami() {
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("the live token is refused: %v", err)
	}
	used := time.Now()
	id := strings.SplitN(tok, ".", 2)[0]
	if err := admin.CoreV1().Secrets("kube-system").Delete(ctx, "bootstrap-token-"+id, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := whoami(); err != nil {
		t.Fatalf("%s after its last use, the deleted token is already refused (%v): the apiserver no longer caches successes; update the expired-grant property's apiserverTokenCache", time.Since(used).Round(time.Millisecond), err)
	}
	time.Sleep(time.Until(used.Add(11 * time.Second)))
	if err := whoami(); !apierrors.IsUnauthorized(err) {
		t.Fatalf("11 s after its last use the deleted token still answers %v, want Unauthorized", err)
	}
}
