package ha

import (
	"context"
	"io"
	"time"

	"k8s.io/client-go/kubernetes"
)

// RepointCiliumWithin is RepointCiliumWith with the rollout wait bounded by
// rollout instead of ciliumRolloutTimeout, for tests whose rollouts never
// finish (no kubelet runs in the simulator).
func (n *Node) RepointCiliumWithin(ctx context.Context, w io.Writer, cs kubernetes.Interface, vip string, rollout time.Duration) ([]string, error) {
	return n.repointCilium(ctx, w, cs, vip, n.VIPServes, rollout)
}

// NodeRepointServes is NodeRepoint with serves standing in for the VIP check.
func (n *Node) NodeRepointServes(ctx context.Context, w io.Writer, vip string, serves func(context.Context, string) (bool, error)) ([]string, error) {
	return n.nodeRepoint(ctx, w, vip, serves)
}
