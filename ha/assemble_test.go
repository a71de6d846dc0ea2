package ha

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/netcfg"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/pki"
)

// recordingAssembly records every effect it runs; failAt makes the named step
// fail, and onStep runs after each (for cancellation tests).
func recordingAssembly(steps *[]string, failAt string, onStep func(string)) NodeAssembly {
	rec := func(name string) error {
		*steps = append(*steps, name)
		if onStep != nil {
			onStep(name)
		}
		if name == failAt {
			return errors.New("refused by " + name)
		}
		return nil
	}
	return NodeAssembly{
		HostDirs: func() error { return rec("dirs") },
		Prereqs:  func(host.PrereqOptions) error { return rec("prereqs") },
		ResolveNet: func() (netcfg.Config, error) {
			return netcfg.Config{}.WithDefaults(), rec("net")
		},
		TrustPodCIDRs: func(string) { _ = rec("trust") },
		ResolveNodeIP: func(flag, config, state string, detect func() (string, error)) (host.NodeIPChoice, error) {
			return host.NodeIPChoice{IP: "192.0.2.7", Source: "flag"}, rec("nodeip")
		},
		DetectNodeIPs: func(bool) (string, error) { return "", rec("detect") },
		BeforeCerts:   func(host.NodeIPChoice) error { return rec("before-certs") },
		IssueCerts: func(h, ip string, sans *pki.APISANs) error {
			return rec("certs")
		},
		WriteKubeconfigs:     func(h, server string, vip bool) error { return rec("kubeconfigs") },
		WriteProfileConfigs:  func() error { return rec("profile") },
		BeforeRuntimeConfigs: func() error { return rec("before-runtime") },
		WriteRuntimeConfigs:  func(*nodestate.NodeState) error { return rec("runtime") },
	}
}

var allSteps = []string{"dirs", "prereqs", "net", "trust", "nodeip", "before-certs", "certs", "kubeconfigs", "profile", "before-runtime", "runtime"}

func TestAssembleNodeOrder(t *testing.T) {
	var steps []string
	choice, err := AssembleNode(recordingAssembly(&steps, "", nil), AssembleRequest{
		Hostname: "cp2", PrereqOptions: host.PrereqOptions{Profile: "cis"}, State: &nodestate.NodeState{},
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(allSteps, steps); diff != "" {
		t.Fatalf("step order (-want +got):\n%s", diff)
	}
	if choice.IP != "192.0.2.7" {
		t.Fatalf("choice %v", choice)
	}
}

func TestAssembleNodeSkipsProfileWithoutOne(t *testing.T) {
	var steps []string
	if _, err := AssembleNode(recordingAssembly(&steps, "", nil), AssembleRequest{State: &nodestate.NodeState{}}); err != nil {
		t.Fatal(err)
	}
	for _, s := range steps {
		if s == "profile" {
			t.Fatal("profile step ran for a node without a profile")
		}
	}
}

// Every fallible step returns before the ones after it, and its error is the
// one reported.
func TestAssembleNodeRefusalStopsEverythingAfter(t *testing.T) {
	for i, failAt := range allSteps {
		if failAt == "trust" {
			continue // best effort: it cannot refuse
		}
		t.Run(failAt, func(t *testing.T) {
			var steps []string
			_, err := AssembleNode(recordingAssembly(&steps, failAt, nil), AssembleRequest{
				PrereqOptions: host.PrereqOptions{Profile: "cis"}, State: &nodestate.NodeState{},
			})
			if err == nil || !strings.Contains(err.Error(), "refused by "+failAt) {
				t.Fatalf("err = %v, want the step's own refusal", err)
			}
			if diff := cmp.Diff(allSteps[:i+1], steps); diff != "" {
				t.Fatalf("steps run (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAssembleNodeContextStopsBetweenSteps(t *testing.T) {
	for i, cancelAfter := range allSteps[:len(allSteps)-1] {
		t.Run(cancelAfter, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var steps []string
			a := recordingAssembly(&steps, "", func(name string) {
				if name == cancelAfter {
					cancel()
				}
			})
			_, err := AssembleNodeContext(ctx, a, AssembleRequest{
				PrereqOptions: host.PrereqOptions{Profile: "cis"}, State: &nodestate.NodeState{},
			})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want context.Canceled", err)
			}
			if diff := cmp.Diff(allSteps[:i+1], steps); diff != "" {
				t.Fatalf("steps run after cancel (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAssembleNodeRefusesMissingEffects(t *testing.T) {
	var steps []string
	a := recordingAssembly(&steps, "", nil)
	a.IssueCerts = nil
	if _, err := AssembleNode(a, AssembleRequest{}); err == nil || !strings.Contains(err.Error(), "IssueCerts") {
		t.Fatalf("err = %v", err)
	}
	if len(steps) != 0 {
		t.Fatalf("steps ran: %v", steps)
	}
}

func TestAPISANs(t *testing.T) {
	sans, err := apiSANs("192.0.2.10", netcfg.Config{}.WithDefaults())
	if err != nil {
		t.Fatal(err)
	}
	if len(sans.IPs) != 2 || sans.IPs[0].String() != "192.0.2.10" || sans.IPs[1].String() != "10.96.0.1" {
		t.Fatalf("IPs %v", sans.IPs)
	}
	if _, err := apiSANs("not-ip", netcfg.Config{}); err == nil {
		t.Fatal("bad VIP accepted")
	}
}
