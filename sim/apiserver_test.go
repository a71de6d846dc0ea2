package sim

import (
	"bytes"
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"stratum.dev/stratum/internal/assets/assetstest"
	"stratum.dev/stratum/internal/certbundle"
)

func TestSecretAcrossHostsAndVIPFailover(t *testing.T) {
	t.Parallel() // its own simulated cluster
	assetstest.Require(t)
	c := Start(t, Config{ControlPlanes: 3, APIServers: true, VIP: true})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	vipCfg, err := c.VIPConfig()
	if err != nil {
		t.Fatal(err)
	}
	vipCfg.Timeout = 2 * time.Second
	vipCS := kubernetes.NewForConfigOrDie(vipCfg)
	// A started cluster's VIP answers at once, its first request a create,
	// which client-go does not retry on a reset connection.
	first := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "first-through-the-vip", Namespace: "default"}}
	if _, err := vipCS.CoreV1().ConfigMaps("default").Create(ctx, first, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the first request through the VIP of a started cluster (holder %v): %v", c.VIPHolder(), err)
	}
	cs1, err := c.Host("cp1").Admin()
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "sentinel", Namespace: "default"},
		StringData: map[string]string{"k": "written-through-cp1"},
	}
	if _, err := cs1.CoreV1().Secrets("default").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cs2, err := c.Host("cp2").Admin()
	if err != nil {
		t.Fatal(err)
	}
	got, err := cs2.CoreV1().Secrets("default").Get(ctx, "sentinel", metav1.GetOptions{})
	if err != nil || string(got.Data["k"]) != "written-through-cp1" {
		t.Fatalf("read through cp2: %v %v", got, err)
	}

	holder, err := c.WaitVIP(ctx)
	if err != nil {
		t.Fatal(err)
	}
	readVIP := func() error {
		got, err := vipCS.CoreV1().Secrets("default").Get(ctx, "sentinel", metav1.GetOptions{})
		if err == nil && string(got.Data["k"]) != "written-through-cp1" {
			t.Fatalf("VIP served a different secret: %v", got.Data)
		}
		return err
	}
	if err := readVIP(); err != nil {
		t.Fatalf("read through the VIP (held by %s): %v", holder.Name(), err)
	}

	if err := holder.KillAPIServer(); err != nil {
		t.Fatal(err)
	}
	var last error
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if last = readVIP(); last == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if last != nil {
		t.Fatalf("VIP did not answer after its holder %s's apiserver was killed: %v", holder.Name(), last)
	}
	if now := c.VIPHolder(); now == nil || now == holder {
		t.Fatalf("VIP holder after failover = %v, want another host than %s", now, holder.Name())
	}
	if len(c.Events().Find("vip", "holds the VIP")) < 2 {
		t.Fatalf("event log does not show the VIP moving:\n%s", c.Events())
	}
}

// TestAPIServerRunsWhatItsNodeSays: a host's apiserver runs the command line
// a real host's supervisor renders (controlplane.APIServerArgs): with an
// at-rest encryption config placed on the host, a Secret is stored
// encrypted in etcd. The simulated apiserver once ran flags of its own,
// without the encryption config (and any other flag a node's files or state
// add), so no simulated test had an apiserver encrypt anything.
func TestAPIServerRunsWhatItsNodeSays(t *testing.T) {
	t.Parallel() // its own simulated cluster
	assetstest.Require(t)
	c := Start(t, Config{ControlPlanes: 1, APIServers: true})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cp1 := c.Host("cp1")
	key := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	config := "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  - resources: [secrets]\n    providers:\n      - aescbc:\n          keys:\n            - name: sim\n              secret: " + key + "\n      - identity: {}\n"
	if err := cp1.Files().WriteFile(certbundle.EncryptionConfigPath, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cp1.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := cp1.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	cs, err := cp1.Admin()
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "at-rest", Namespace: "default"}, StringData: map[string]string{"word": "plaintext-marker"}}
	if _, err := cs.CoreV1().Secrets("default").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cli, err := cp1.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	resp, err := cli.Get(ctx, "/registry/secrets/default/at-rest")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the Secret's etcd key: %v, %v", resp, err)
	}
	if raw := string(resp.Kvs[0].Value); !strings.HasPrefix(raw, "k8s:enc:aescbc:v1:sim:") || strings.Contains(raw, "plaintext-marker") {
		t.Fatalf("the Secret in etcd is not encrypted by the host's config (starts %q)", raw[:min(len(raw), 40)])
	}
}
