package sim

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"stratum.dev/stratum/internal/assets/assetstest"
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
