package ha

import (
	"context"
	"io"
)

// NodeRepointServes is NodeRepoint with serves standing in for the VIP check.
func (n *Node) NodeRepointServes(ctx context.Context, w io.Writer, vip string, serves func(context.Context, string) (bool, error)) ([]string, error) {
	return n.nodeRepoint(ctx, w, vip, serves)
}
