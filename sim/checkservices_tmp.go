package sim

import "context"

// CheckServices is a placeholder until the simulator's preflight lands: the
// live-incarnation check only.
func (d *Handle) CheckServices(ctx context.Context, names []string) error { return d.live() }
