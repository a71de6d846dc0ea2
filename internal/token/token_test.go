package token

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"stratum.dev/stratum/internal/kubeconfig"
	"stratum.dev/stratum/internal/pki"
)

func testCA(t *testing.T) []byte {
	t.Helper()
	ca, err := pki.NewCA("test-ca", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ca.CertPEM
}

// recording is a tokenSteps whose effects record their order.
func recording(log *[]string, uploadErr error) tokenSteps {
	return tokenSteps{
		narrow: func(context.Context) error { *log = append(*log, "narrow"); return nil },
		createToken: func(_ context.Context, group string, exp time.Time) (string, metav1.OwnerReference, error) {
			*log = append(*log, "create "+group)
			return "abcdef.0123456789abcdef", metav1.OwnerReference{APIVersion: "v1", Kind: "Secret", Name: "bootstrap-token-abcdef", UID: "u1"}, nil
		},
		deleteToken: func(_ context.Context, id string) error { *log = append(*log, "delete "+id); return nil },
		newCertKey:  func() (string, error) { *log = append(*log, "certkey"); return strings.Repeat("ab", 32), nil },
		upload: func(_ context.Context, k string, o *metav1.OwnerReference) error {
			*log = append(*log, "upload "+o.Name)
			return uploadErr
		},
	}
}

func TestMintOrder(t *testing.T) {
	ca := testCA(t)
	hash, _ := pki.CAHash(ca)
	now := func() time.Time { return time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) }
	var log []string
	m, err := mint(context.Background(), recording(&log, nil), ControlPlaneGroup, "https://10.0.0.10:6443", ca, 0, now)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"narrow", "certkey", "create " + ControlPlaneGroup, "upload bootstrap-token-abcdef"}
	if !slices.Equal(log, want) {
		t.Fatalf("steps %v, want %v", log, want)
	}
	wantCmd := fmt.Sprintf("stratum server --server https://10.0.0.10:6443 --token abcdef.0123456789abcdef --ca-hash %s --certificate-key %s", hash, strings.Repeat("ab", 32))
	if m.JoinCommand != wantCmd {
		t.Fatalf("join command\n%s\nwant\n%s", m.JoinCommand, wantCmd)
	}
	wantFiles := fmt.Sprintf("(umask 077; echo abcdef.0123456789abcdef > stratum-join-token; echo %s > stratum-join-certificate-key)\n"+
		"stratum server --server https://10.0.0.10:6443 --token-file stratum-join-token --ca-hash %s --certificate-key-file stratum-join-certificate-key",
		strings.Repeat("ab", 32), hash)
	if m.JoinCommandSecretFiles != wantFiles {
		t.Fatalf("secret-file join command\n%s\nwant\n%s", m.JoinCommandSecretFiles, wantFiles)
	}
	if !m.Expires.Equal(now().Add(DefaultTTL)) {
		t.Fatalf("expires %v", m.Expires)
	}
}

func TestMintRefusalsChangeNothing(t *testing.T) {
	ca := testCA(t)
	for _, tc := range []struct {
		name, server string
		ca           []byte
		ttl          time.Duration
	}{
		{"http server", "http://10.0.0.10:6443", ca, 0},
		{"no server", "", ca, 0},
		{"bad CA", "https://10.0.0.10:6443", []byte("not a cert"), 0},
		{"negative TTL", "https://10.0.0.10:6443", ca, -time.Hour},
	} {
		var log []string
		if _, err := mint(context.Background(), recording(&log, nil), ControlPlaneGroup, tc.server, tc.ca, tc.ttl, nil); err == nil {
			t.Errorf("%s: minted", tc.name)
		}
		if len(log) != 0 {
			t.Errorf("%s: effects ran: %v", tc.name, log)
		}
	}
}

func TestMintUploadRefusalRemovesToken(t *testing.T) {
	var log []string
	refused := errors.New("over budget")
	_, err := mint(context.Background(), recording(&log, refused), ControlPlaneGroup, "https://10.0.0.10:6443", testCA(t), time.Hour, nil)
	if !errors.Is(err, refused) {
		t.Fatalf("mint: %v", err)
	}
	if log[len(log)-1] != "delete abcdef" {
		t.Fatalf("steps %v: the token was not removed", log)
	}
}

func TestMintWorkerUploadsNothing(t *testing.T) {
	cs := fake.NewClientset()
	m, err := MintWorker(context.Background(), cs, WorkerOptions{Server: "https://10.0.0.10:6443", CACertPEM: testCA(t), TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s, err := cs.CoreV1().Secrets(Namespace).Get(context.Background(), SecretPrefix+m.ID, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Type != corev1.SecretTypeBootstrapToken || s.StringData[keyExtraGroups] != WorkerGroup || s.StringData[keyUsageAuthn] != "true" {
		t.Fatalf("worker token Secret %+v", s)
	}
	if m.CertKey != "" || m.JoinCommand != "" {
		t.Fatalf("worker mint %+v: want no certificate-key and no join command", m)
	}
	if tok, err := kubeconfig.TokenOf(m.BootstrapKubeconfig); err != nil || tok != m.Token {
		t.Fatalf("worker bootstrap kubeconfig carries token %q (%v), want %q", tok, err, m.Token)
	}
	if server, err := kubeconfig.Server(m.BootstrapKubeconfig); err != nil || server != "https://10.0.0.10:6443" {
		t.Fatalf("worker bootstrap kubeconfig targets %q (%v)", server, err)
	}
	if _, _, err := ParseToken(m.Token); err != nil {
		t.Fatal(err)
	}
}

func TestExpiredOrGone(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	tok := func(exp string, authn string) *corev1.Secret {
		d := map[string][]byte{keyUsageAuthn: []byte(authn)}
		if exp != "" {
			d[keyExpiration] = []byte(exp)
		}
		return &corev1.Secret{Type: corev1.SecretTypeBootstrapToken, Data: d}
	}
	for _, tc := range []struct {
		name string
		s    *corev1.Secret
		want bool
	}{
		{"deleted", nil, true},
		{"live", tok("2030-01-01T13:00:00Z", "true"), false},
		{"expired", tok("2030-01-01T11:59:59Z", "true"), true},
		{"expires now", tok("2030-01-01T12:00:00Z", "true"), true},
		{"no expiry", tok("", "true"), false},
		// The apiserver's authenticator reads an empty expiration as none.
		{"empty expiry", &corev1.Secret{Type: corev1.SecretTypeBootstrapToken, Data: map[string][]byte{keyUsageAuthn: []byte("true"), keyExpiration: {}}}, false},
		{"garbled expiry", tok("soon", "true"), true},
		{"not for authentication", tok("2030-01-01T13:00:00Z", ""), true},
		{"not a token", &corev1.Secret{Type: corev1.SecretTypeOpaque}, true},
	} {
		if got := ExpiredOrGone(tc.s, now); got != tc.want {
			t.Errorf("%s: %t, want %t", tc.name, got, tc.want)
		}
	}
}

func TestParseToken(t *testing.T) {
	for _, tc := range []struct {
		tok, id, secret string
	}{
		{"abcdef.0123456789abcdef", "abcdef", "0123456789abcdef"},
		{"ABCDEF.0123456789abcdef", "", ""},
		{"abcdef.0123456789ABCDEF", "", ""},
		{"abcdef.0123456789abcdef\n", "", ""},
		{" abcdef.0123456789abcdef", "", ""},
		{"abcdef.0123456789abcde", "", ""},
		{"abcdefg.0123456789abcdef", "", ""},
		{"abcdef:0123456789abcdef", "", ""},
		{"abcdef.0123456789abcdef.abcdef", "", ""},
		{"abcdef.0123456789abcd-f", "", ""},
		{"", "", ""},
	} {
		id, secret, err := ParseToken(tc.tok)
		if tc.id == "" {
			if err == nil || err.Error() != "bootstrap token is not <6 [a-z0-9]>.<16 [a-z0-9]>" {
				t.Errorf("ParseToken(%q) = %q, %q, %v; want the form refused", tc.tok, id, secret, err)
			}
			continue
		}
		if err != nil || id != tc.id || secret != tc.secret {
			t.Errorf("ParseToken(%q) = %q, %q, %v; want %q, %q", tc.tok, id, secret, err, tc.id, tc.secret)
		}
	}
	for id, want := range map[string]bool{"abc123": true, "ABC123": false, "abc12": false, "abc1234": false, "abc-12": false, "": false} {
		if got := ValidID(id); got != want {
			t.Errorf("ValidID(%q) = %t, want %t", id, got, want)
		}
	}
}

// TestNewSecret pins the Secret to what the apiserver's bootstrap-token
// authenticator reads: its type, name and keys.
func TestNewSecret(t *testing.T) {
	exp := time.Date(2030, 1, 1, 13, 0, 0, 0, time.FixedZone("x", 3600))
	s, err := NewSecret("abcdef.0123456789abcdef", []string{ControlPlaneGroup, "system:bootstrappers:x"}, exp, "joins cp2")
	if err != nil {
		t.Fatal(err)
	}
	if s.Type != "bootstrap.kubernetes.io/token" || s.Name != "bootstrap-token-abcdef" || s.Namespace != "kube-system" {
		t.Fatalf("Secret %s/%s of type %s", s.Namespace, s.Name, s.Type)
	}
	want := map[string]string{
		"token-id":                       "abcdef",
		"token-secret":                   "0123456789abcdef",
		"expiration":                     "2030-01-01T12:00:00Z",
		"usage-bootstrap-authentication": "true",
		"usage-bootstrap-signing":        "true",
		"auth-extra-groups":              ControlPlaneGroup + ",system:bootstrappers:x",
		"description":                    "joins cp2",
	}
	if !maps.Equal(s.StringData, want) {
		t.Fatalf("Secret data %v\nwant %v", s.StringData, want)
	}
	s, err = NewSecret("abcdef.0123456789abcdef", nil, exp, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.StringData["auth-extra-groups"]; ok {
		t.Fatalf("a token in no extra group has auth-extra-groups: %v", s.StringData)
	}
	if _, ok := s.StringData["description"]; ok {
		t.Fatalf("a token with no description has one: %v", s.StringData)
	}
	if _, err := NewSecret("ABCDEF.0123456789abcdef", nil, exp, ""); err == nil {
		t.Fatal("NewSecret took a malformed token")
	}
}

func TestIDFromSecretName(t *testing.T) {
	for in, want := range map[string]string{"bootstrap-token-abc123": "abc123", "bootstrap-token-ABC123": "", "bootstrap-token-abc12": "", "stratum-certs": "", "bootstrap-token-abc1234": ""} {
		if got := IDFromSecretName(in); got != want {
			t.Errorf("%s: %q, want %q", in, got, want)
		}
	}
}

func TestListAndDelete(t *testing.T) {
	cs := fake.NewClientset()
	ctx := context.Background()
	now := func() time.Time { return time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) }
	cp, err := MintControlPlane(ctx, cs, ControlPlaneOptions{
		Server: "https://10.0.0.10:6443", CACertPEM: testCA(t), TTL: time.Hour, Now: now,
		NewCertKey: func() (string, error) { return strings.Repeat("ab", 32), nil },
		Upload:     func(context.Context, string, *metav1.OwnerReference) error { return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	w, err := MintWorker(ctx, cs, WorkerOptions{Server: "https://10.0.0.10:6443", CACertPEM: testCA(t), TTL: time.Minute, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	// The apiserver turns stringData into data on write; the fake does not.
	secrets, _ := cs.CoreV1().Secrets(Namespace).List(ctx, metav1.ListOptions{})
	for i := range secrets.Items {
		sec := &secrets.Items[i]
		sec.Data = map[string][]byte{}
		for k, v := range sec.StringData {
			sec.Data[k] = []byte(v)
		}
		if _, err := cs.CoreV1().Secrets(Namespace).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	list, err := List(ctx, cs, now().Add(30*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]Info{}
	for _, i := range list {
		kinds[i.ID] = i
	}
	if got := kinds[cp.ID]; got.Kind != "control-plane" || !got.Live || got.Expires == nil || !got.Expires.Equal(now().Add(time.Hour)) {
		t.Fatalf("control-plane token listed as %+v", got)
	}
	if got := kinds[w.ID]; got.Kind != "worker" || got.Live {
		t.Fatalf("worker token (expired at the listing time) listed as %+v", got)
	}
	if err := Delete(ctx, cs, "Not-An-ID"); err == nil || !strings.Contains(err.Error(), "not a token ID") {
		t.Fatalf("delete of a malformed ID = %v", err)
	}
	if err := Delete(ctx, cs, "zzzzzz"); !errors.Is(err, ErrNoToken) {
		t.Fatalf("delete of an unknown token = %v, want ErrNoToken", err)
	}
	if err := Delete(ctx, cs, cp.ID); err != nil {
		t.Fatal(err)
	}
	list, _ = List(ctx, cs, now())
	if len(list) != 1 || list[0].ID != w.ID {
		t.Fatalf("after deleting %s: %+v", cp.ID, list)
	}
}
