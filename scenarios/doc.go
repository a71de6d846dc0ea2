// Package scenarios holds stratum's property-based fault scenarios: rapid
// properties over simulated clusters (package sim) running the production ha
// code against real etcd members and kube-apiservers. Each property draws a
// sequence of actions and faults, checks safety invariants after every one,
// and ends with a convergence check. See docs/faults.md for the catalogue of
// faults, checkpoints and invariants, and for how to replay a failure.
//
// The package has no non-test code; `go test ./scenarios` runs it.
package scenarios
