package ha_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"stratum.dev/stratum/internal/assets/assetstest"
	"stratum.dev/stratum/internal/pki"
	"stratum.dev/stratum/sim"
)

// TestAPIServerServesKubeletsAndAggregatedAPIs: a control plane's
// kube-apiserver, started from controlplane.APIServerArgs, is what kubelets
// and aggregated API servers (metrics-server, `kubectl top`) need:
//   - `kubectl logs` reaches a node's kubelet with the apiserver-kubelet-client
//     certificate, which chains to the cluster CA (a kubelet refuses an
//     apiserver without one: logs, exec and port-forward failed);
//   - kube-system/extension-apiserver-authentication, which an aggregated API
//     server reads to trust the apiserver as its authenticating proxy, names
//     the front-proxy CA and front-proxy-client;
//   - NodeRestriction admits a kubelet's credential to its own Node only, and
//     not to a label that would draw control-plane workloads to it (the Node
//     authorizer alone lets any node write every Node object).
func TestAPIServerServesKubeletsAndAggregatedAPIs(t *testing.T) {
	t.Parallel() // its own simulated cluster
	assetstest.Require(t)
	c := sim.Start(t, sim.Config{ControlPlanes: 1, APIServers: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := c.Host("cp1")
	admin, err := h.Admin()
	if err != nil {
		t.Fatal(err)
	}
	shared := c.Shared()

	// A stand-in kubelet on loopback: it records the client certificate the
	// apiserver presents and answers a container's log.
	kubeletCA, err := pki.NewCA("stand-in kubelet", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	crtPEM, keyPEM, err := kubeletCA.Issue(pki.LeafSpec{CommonName: "node-b", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	serving, err := tls.X509KeyPair(crtPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{serving}, ClientAuth: tls.RequireAnyClientCert})
	if err != nil {
		t.Fatal(err)
	}
	presented := make(chan *x509.Certificate, 8)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			presented <- r.TLS.PeerCertificates[0]
		}
		fmt.Fprintf(w, "log line from %s\n", r.URL.Path)
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	port := ln.Addr().(*net.TCPAddr).Port

	for _, name := range []string{"node-a", "node-b"} {
		n, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
		n.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(port)
		if _, err := admin.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "logs", Namespace: "default"},
		Spec:       corev1.PodSpec{NodeName: "node-b", Containers: []corev1.Container{{Name: "c", Image: "registry.example/c:1"}}},
	}
	if _, err := admin.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	logs, err := admin.CoreV1().Pods("default").GetLogs("logs", &corev1.PodLogOptions{Container: "c"}).DoRaw(ctx)
	if err != nil || !strings.Contains(string(logs), "/containerLogs/default/logs/c") {
		t.Fatalf("kubectl logs through the apiserver from the stand-in kubelet: %q, %v", logs, err)
	}
	select {
	case crt := <-presented:
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(shared.Cluster.CertPEM)
		if _, err := crt.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil || crt.Subject.CommonName != pki.APIServerKubeletClientCN {
			t.Fatalf("the apiserver presented %q to the kubelet (%v); want %s, chaining to the cluster CA", crt.Subject.CommonName, err, pki.APIServerKubeletClientCN)
		}
		// A real kubelet (webhook authorization, as kubeadm sets it up)
		// asks the apiserver whether that identity may reach its API:
		// logs, exec and port-forward are nodes/proxy. RBAC grants it
		// through the stratum:cluster-admins binding, not system:masters.
		if slices.Contains(crt.Subject.Organization, pki.MastersGroup) {
			t.Fatalf("the kubelet client certificate is in %s: %v", pki.MastersGroup, crt.Subject.Organization)
		}
		review, err := admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: crt.Subject.CommonName, Groups: append(slices.Clone(crt.Subject.Organization), "system:authenticated"),
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Resource: "nodes", Subresource: "proxy", Name: "node-b"},
		}}, metav1.CreateOptions{})
		if err != nil || !review.Status.Allowed {
			t.Fatalf("the kubelet's authorization of the apiserver's client (%s in %v) for nodes/proxy: %+v, %v; want allowed", crt.Subject.CommonName, crt.Subject.Organization, review, err)
		}
	default:
		t.Fatal("the apiserver presented no client certificate to the kubelet")
	}

	// What an aggregated API server reads to trust the apiserver's proxy.
	cm, err := admin.CoreV1().ConfigMaps("kube-system").Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := cm.Data["requestheader-client-ca-file"]; !strings.Contains(got, strings.TrimSpace(string(shared.FrontProxy.CertPEM))) {
		t.Fatalf("extension-apiserver-authentication's requestheader-client-ca-file does not hold the front-proxy CA:\n%s", got)
	}
	for key, want := range map[string]string{"requestheader-allowed-names": pki.FrontProxyClientCN, "requestheader-username-headers": "X-Remote-User", "requestheader-group-headers": "X-Remote-Group"} {
		if got := cm.Data[key]; !strings.Contains(got, want) {
			t.Errorf("extension-apiserver-authentication's %s = %q, want it to name %s", key, got, want)
		}
	}

	// node-a's kubelet credential.
	crtA, keyA, err := shared.Cluster.Issue(pki.LeafSpec{CommonName: "system:node:node-a", Organization: []string{"system:nodes"}, Client: true}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(mustAdminConfig(t, h))
	cfg.TLSClientConfig = rest.TLSClientConfig{CAData: shared.Cluster.CertPEM, CertData: crtA, KeyData: keyA}
	kubelet, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	label := func(node, key string) error {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{key: "x"}}})
		_, err := kubelet.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	}
	if err := label("node-a", "example.com/own"); err != nil {
		t.Fatalf("node-a's kubelet labelling its own Node: %v", err)
	}
	for _, c := range []struct{ node, key, why string }{
		{"node-b", "example.com/other", "another node's Node"},
		{"node-a", "node-role.kubernetes.io/control-plane", "a control-plane role label on its own Node"},
	} {
		if err := label(c.node, c.key); !apierrors.IsForbidden(err) {
			t.Errorf("node-a's kubelet writing %s (%s=x on %s): %v, want it forbidden (NodeRestriction)", c.why, c.key, c.node, err)
		}
	}
	b, err := admin.CoreV1().Nodes().Get(ctx, "node-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Labels["example.com/other"]; ok {
		t.Fatal("node-a's kubelet labelled node-b")
	}
}

func mustAdminConfig(t *testing.T, h *sim.Host) *rest.Config {
	t.Helper()
	cfg, err := h.AdminConfig()
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
