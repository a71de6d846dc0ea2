package sim

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"stratum.dev/stratum/internal/assets/assetstest"
)

// TestWithoutAPIServerConfig: only later control planes of a cluster whose
// apiservers run without a VIP can go without one.
func TestWithoutAPIServerConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string // "" for accepted
	}{
		{Config{ControlPlanes: 3, APIServers: true, WithoutAPIServer: []string{"cp3"}}, ""},
		{Config{ControlPlanes: 3, APIServers: true, WithoutAPIServer: []string{"cp2", "cp3"}}, ""},
		{Config{ControlPlanes: 3, WithoutAPIServer: []string{"cp3"}}, "needs APIServers"},
		{Config{ControlPlanes: 3, APIServers: true, VIP: true, WithoutAPIServer: []string{"cp3"}}, "no VIP"},
		{Config{ControlPlanes: 3, APIServers: true, WithoutAPIServer: []string{"cp1"}}, "publishes cluster-info"},
		{Config{ControlPlanes: 3, SpareHosts: 1, APIServers: true, WithoutAPIServer: []string{"cp4"}}, "not one of the 3 control planes"},
		{Config{ControlPlanes: 3, APIServers: true, WithoutAPIServer: []string{"cp03"}}, "not one of"},
		{Config{ControlPlanes: 3, APIServers: true, WithoutAPIServer: []string{"host2"}}, "not one of"},
	} {
		err := tc.cfg.defaults()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("WithoutAPIServer %v (APIServers %v, VIP %v): %v, want %q", tc.cfg.WithoutAPIServer, tc.cfg.APIServers, tc.cfg.VIP, err, tc.want)
		}
	}
}

// TestWithoutAPIServerStartsNoneThereUntilAsked: the named control plane
// starts and reboots without an apiserver; a start through its Handle (what
// stratum's join, rejoin and up do) still runs one, which a client trusting
// only the cluster CA reads through, and which a reboot starts again.
func TestWithoutAPIServerStartsNoneThereUntilAsked(t *testing.T) {
	t.Parallel() // its own simulated cluster
	assetstest.Require(t)
	c := Start(t, Config{ControlPlanes: 2, APIServers: true, WithoutAPIServer: []string{"cp2"}})
	cp1, cp2 := c.Host("cp1"), c.Host("cp2")
	if !cp1.APIServerRunning() || cp2.APIServerRunning() {
		t.Fatalf("apiservers running: cp1 %v, cp2 %v; want cp1 only", cp1.APIServerRunning(), cp2.APIServerRunning())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp2.Crash()
	if err := cp2.Reboot(ctx); err != nil {
		t.Fatal(err)
	}
	if !cp2.EtcdRunning() || cp2.APIServerRunning() {
		t.Fatalf("after a reboot cp2 runs etcd %v, an apiserver %v; want etcd only", cp2.EtcdRunning(), cp2.APIServerRunning())
	}
	if err := cp2.Handle().StartService(ctx, ServiceAPIServer); err != nil {
		t.Fatal(err)
	}
	cs, err := cp2.Admin() // the admin kubeconfig: the cluster CA alone
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{}); err != nil {
		t.Fatalf("reading through cp2's apiserver, started through its Handle: %v", err)
	}
	// Its stop says what it cost: a start alone is a few CPU seconds.
	if err := cp2.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	stopped := c.Events().Find("service", "kube-apiserver stopped (ran ")
	if len(stopped) != 1 || !regexp.MustCompile(`^kube-apiserver stopped \(ran \S+, [0-9][0-9.ms]* of CPU\)`).MatchString(stopped[0].What) || strings.Contains(stopped[0].What, " 0s of CPU") {
		t.Fatalf("the apiserver's stop event: %v, want its run time and CPU time", stopped)
	}
	// Once one has run there, a reboot starts it again, as a real host's
	// supervisor would.
	cp2.Crash()
	if err := cp2.Reboot(ctx); err != nil {
		t.Fatal(err)
	}
	if !cp2.APIServerRunning() {
		t.Fatal("after a reboot cp2 runs no apiserver, although one ran there")
	}
}
