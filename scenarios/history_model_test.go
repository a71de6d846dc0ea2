package scenarios

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"stratum.dev/stratum/sim"
)

// op is a history entry for the model's tests: times in milliseconds.
func op(client int, call, ret int64, in kvInput, out kvOutput) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call * 1e6, Return: ret * 1e6}
}

func put(k, v string) kvInput        { return kvInput{Op: "put", Key: k, Value: v} }
func get(k string) kvInput           { return kvInput{Op: "get", Key: k} }
func cas(k, from, to string) kvInput { return kvInput{Op: "cas", Key: k, From: from, Value: to} }
func read(v string) kvOutput         { return kvOutput{Value: v} }

var (
	done    = kvOutput{}
	swapped = kvOutput{OK: true}
	refused = kvOutput{}
	unknown = kvOutput{Unknown: true}
)

// TestKVModel: the model accepts what a linearizable register allows and
// refuses a stale read, a swap refused on a matching value, and a read of a
// value nobody wrote.
func TestKVModel(t *testing.T) {
	cases := []struct {
		name string
		ops  []porcupine.Operation
		want porcupine.CheckResult
	}{
		{"read your write", []porcupine.Operation{op(0, 0, 1, put("k", "a"), done), op(1, 2, 3, get("k"), read("a"))}, porcupine.Ok},
		{"stale read after an acknowledged put", []porcupine.Operation{op(0, 0, 1, put("k", "a"), done), op(1, 2, 3, get("k"), read(""))}, porcupine.Illegal},
		{"concurrent read sees the old value", []porcupine.Operation{op(0, 0, 5, put("k", "a"), done), op(1, 1, 2, get("k"), read(""))}, porcupine.Ok},
		{"concurrent read sees the new value", []porcupine.Operation{op(0, 0, 5, put("k", "a"), done), op(1, 1, 2, get("k"), read("a"))}, porcupine.Ok},
		{"new then old: time travel", []porcupine.Operation{op(0, 0, 10, put("k", "a"), done), op(1, 1, 2, get("k"), read("a")), op(2, 3, 4, get("k"), read(""))}, porcupine.Illegal},
		{"a value nobody wrote", []porcupine.Operation{op(1, 0, 1, get("k"), read("z"))}, porcupine.Illegal},
		{"swap of a matching value", []porcupine.Operation{op(0, 0, 1, put("k", "a"), done), op(1, 2, 3, cas("k", "a", "b"), swapped), op(1, 4, 5, get("k"), read("b"))}, porcupine.Ok},
		{"swap refused on a matching value", []porcupine.Operation{op(0, 0, 1, put("k", "a"), done), op(1, 2, 3, cas("k", "a", "b"), refused)}, porcupine.Illegal},
		{"swap done on another value", []porcupine.Operation{op(0, 0, 1, put("k", "a"), done), op(1, 2, 3, cas("k", "x", "b"), swapped)}, porcupine.Illegal},
		{"swap from absent", []porcupine.Operation{op(1, 0, 1, cas("k", "", "b"), swapped), op(1, 2, 3, get("k"), read("b"))}, porcupine.Ok},
		{"unknown put seen later", []porcupine.Operation{op(0, 0, 100, put("k", "a"), unknown), op(1, 5, 6, get("k"), read("a"))}, porcupine.Ok},
		{"unknown put never seen", []porcupine.Operation{op(0, 0, 100, put("k", "a"), unknown), op(1, 5, 6, get("k"), read(""))}, porcupine.Ok},
		{"unknown put seen before its call", []porcupine.Operation{op(1, 0, 1, get("k"), read("a")), op(0, 5, 100, put("k", "a"), unknown)}, porcupine.Illegal},
		{"keys apart", []porcupine.Operation{op(0, 0, 1, put("k", "a"), done), op(1, 2, 3, get("j"), read(""))}, porcupine.Ok},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := porcupine.CheckOperationsTimeout(kvModel, c.ops, 10*time.Second); got != c.want {
				t.Errorf("%s: %s, want %s", c.name, got, c.want)
			}
		})
	}
}

// TestWorkloadCheck: check keeps a write of unknown outcome that the store
// held and drops one it never held, and on a violation fails with
// errHistoryIllegal and writes porcupine's picture.
func TestWorkloadCheck(t *testing.T) {
	newLoad := func(ops ...porcupine.Operation) *workload {
		return &workload{name: "test", events: &sim.EventLog{}, hist: &history{start: time.Now(), ops: ops}, cancel: func() {}}
	}
	never := func(context.Context) (map[string][]string, bool) { return map[string][]string{}, true }
	heldA := func(context.Context) (map[string][]string, bool) {
		return map[string][]string{"k": {`{"data":{"v":"a"}}`}}, true
	}
	// A put of unknown outcome, then a read of its value before a later
	// acknowledged put: legal when the put happened.
	ops := []porcupine.Operation{
		op(0, 0, 1, put("k", "a"), unknown),
		op(1, 2, 3, get("k"), read("a")),
	}
	if _, err := newLoad(ops...).check(context.Background(), heldA, filepath.Join(t.TempDir(), "x.html")); err != nil {
		t.Fatalf("a held unknown write read back: %v", err)
	}
	// The same put, never held, cannot explain the read: illegal, and the
	// picture is written.
	pic := filepath.Join(t.TempDir(), "sub", "lin.html")
	summary, err := newLoad(ops...).check(context.Background(), never, pic)
	if !errors.Is(err, errHistoryIllegal) {
		t.Fatalf("a read of a value never held: %v (%s), want errHistoryIllegal", err, summary)
	}
	if st, serr := os.Stat(pic); serr != nil || st.Size() == 0 {
		t.Fatalf("porcupine's picture %s: %v", pic, serr)
	}
	// Unreadable revisions keep every unknown write.
	unreadable := func(context.Context) (map[string][]string, bool) { return nil, false }
	if _, err := newLoad(ops...).check(context.Background(), unreadable, filepath.Join(t.TempDir(), "y.html")); err != nil {
		t.Fatalf("unreadable revisions: %v", err)
	}
}
