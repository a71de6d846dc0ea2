package scenarios

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"pgregory.net/rapid"

	"stratum.dev/stratum/sim"
)

// The linearizability workload: clients put, read and compare-and-swap a few
// keys concurrently with a property's drawn actions, every operation is
// recorded with its call and return times, and the check at the end asks
// porcupine whether some order of them, each taking effect inside its own
// interval, explains every answer a client saw. This is what a client of the
// cluster observes, whatever the code under test reports.

// kvInput is one client operation on one key.
type kvInput struct {
	Op    string // "get", "put" or "cas"
	Key   string
	Value string // put's and cas's new value
	From  string // cas's expected value ("" for absent)
}

// kvOutput is what the client was told: a get's value ("" for absent), a
// cas's outcome, or that a write's outcome is unknown (it timed out or
// failed after it may have been sent).
type kvOutput struct {
	Value   string
	OK      bool
	Unknown bool
}

// kvModel is the sequential specification: one register per key (porcupine
// checks each key's history apart), absent reading as "". A write of unknown
// outcome may take effect at any point after its call or never: it is given
// a return after every other operation, and taking effect last is never
// observed.
var kvModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(kvInput).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(string), input.(kvInput), output.(kvOutput)
		switch in.Op {
		case "get":
			return out.Value == st, st
		case "put":
			return true, in.Value
		case "cas":
			matches := st == in.From
			switch {
			case out.Unknown && matches:
				return true, in.Value
			case out.Unknown:
				return true, st
			case out.OK:
				return matches, in.Value
			default:
				return !matches, st
			}
		}
		return false, st
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(kvInput), output.(kvOutput)
		result := "ok"
		switch {
		case out.Unknown:
			result = "unknown"
		case in.Op == "get":
			result = fmt.Sprintf("%q", out.Value)
		case in.Op == "cas" && !out.OK:
			result = "refused"
		}
		switch in.Op {
		case "get":
			return fmt.Sprintf("get(%s) -> %s", in.Key, result)
		case "put":
			return fmt.Sprintf("put(%s, %q) -> %s", in.Key, in.Value, result)
		default:
			return fmt.Sprintf("cas(%s, %q -> %q) -> %s", in.Key, in.From, in.Value, result)
		}
	},
	DescribeState: func(state any) string { return fmt.Sprintf("%q", state) },
}

// kvStore is one client's way to the cluster's data: an etcd client on the
// cluster's endpoints, or a clientset through an apiserver (a ConfigMap a
// key). Every method claims linearizability.
type kvStore interface {
	Get(ctx context.Context, key string) (string, error)
	Put(ctx context.Context, key, value string) error
	// CAS sets key to to when it holds from ("" for absent), and reports
	// whether it did.
	CAS(ctx context.Context, key, from, to string) (bool, error)
}

// etcdKV is a kvStore on an etcd client: linearizable gets, puts, and a
// compare-and-swap as one transaction.
type etcdKV struct {
	cli    *clientv3.Client
	prefix string
}

func (s etcdKV) Get(ctx context.Context, key string) (string, error) {
	resp, err := s.cli.Get(ctx, s.prefix+key)
	if err != nil {
		return "", err
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	return string(resp.Kvs[0].Value), nil
}

func (s etcdKV) Put(ctx context.Context, key, value string) error {
	_, err := s.cli.Put(ctx, s.prefix+key, value)
	return err
}

func (s etcdKV) CAS(ctx context.Context, key, from, to string) (bool, error) {
	k := s.prefix + key
	// etcd's value comparison fails on an absent key: absent is "never
	// created".
	cmp := clientv3.Compare(clientv3.Value(k), "=", from)
	if from == "" {
		cmp = clientv3.Compare(clientv3.CreateRevision(k), "=", 0)
	}
	resp, err := s.cli.Txn(ctx).If(cmp).Then(clientv3.OpPut(k, to)).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

// errNotSent marks a store error that proves the operation had no effect
// (a swap whose read failed before its write was sent): it is dropped from
// the history, as a failed read is.
var errNotSent = errors.New("not sent")

// configMapKV is a kvStore through an apiserver: a key is the ConfigMap
// default/workload-<key>, its value data "v". Reads are quorum reads (no
// resourceVersion), a put an unconditional update, a swap a read and an
// update preconditioned on the read's resourceVersion (every write writes a
// value no other writes, so an unchanged resourceVersion is an unchanged
// value). The ConfigMaps exist before the clients start (createConfigMaps).
type configMapKV struct{ cs kubernetes.Interface }

// configMapPrefix names the workload's ConfigMaps; configMapEtcdPrefix is
// where the apiserver stores them in etcd.
const (
	configMapPrefix     = "workload-"
	configMapEtcdPrefix = "/registry/configmaps/default/" + configMapPrefix
)

func (s configMapKV) Get(ctx context.Context, key string) (string, error) {
	cm, err := s.cs.CoreV1().ConfigMaps("default").Get(ctx, configMapPrefix+key, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return cm.Data["v"], nil
}

func (s configMapKV) Put(ctx context.Context, key, value string) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: configMapPrefix + key, Namespace: "default"}, Data: map[string]string{"v": value}}
	_, err := s.cs.CoreV1().ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{})
	return err
}

func (s configMapKV) CAS(ctx context.Context, key, from, to string) (bool, error) {
	cm, err := s.cs.CoreV1().ConfigMaps("default").Get(ctx, configMapPrefix+key, metav1.GetOptions{})
	if err != nil {
		return false, fmt.Errorf("%w: %w", errNotSent, err)
	}
	if cm.Data["v"] != from {
		return false, nil
	}
	cm.Data = map[string]string{"v": to}
	_, err = s.cs.CoreV1().ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		return false, nil
	}
	return err == nil, err
}

// createConfigMaps creates the workload's ConfigMaps, empty, through cs
// (existing ones are emptied): the register's initial "".
func createConfigMaps(ctx context.Context, cs kubernetes.Interface) error {
	for _, key := range workloadKeys {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: configMapPrefix + key, Namespace: "default"}}
		_, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			_, err = cs.CoreV1().ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("create ConfigMap default/%s%s: %w", configMapPrefix, key, err)
		}
	}
	return nil
}

// history is the record of a workload's operations, safe for concurrent use.
type history struct {
	mu    sync.Mutex
	start time.Time
	ops   []porcupine.Operation
	// dropped counts operations that failed without effect: reads (they
	// observed nothing) and swaps never sent.
	dropped int
}

func (h *history) add(client int, in kvInput, call, ret time.Time, out kvOutput) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Output: out,
		Call: call.Sub(h.start).Nanoseconds(), Return: ret.Sub(h.start).Nanoseconds()})
}

// workload runs clients against a cluster until stopped.
type workload struct {
	name   string
	events *sim.EventLog
	hist   *history
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// opTimeout bounds one operation: one that does not answer within it
	// has an unknown outcome.
	opTimeout time.Duration
}

// workloadKeys are the keys the clients share: few enough that they
// contend, each checked apart.
var workloadKeys = []string{"k0", "k1", "k2", "k3"}

// workloadPause is each client's pause between operations: enough load to
// interleave with every action, few enough operations to check.
const workloadPause = 30 * time.Millisecond

// startWorkload starts one client per store (named name-0, name-1, ...),
// each drawing its operations from a generator seeded by the check (its
// choices replay; their timing does not).
func startWorkload(t *rapid.T, ctx context.Context, events *sim.EventLog, name string, opTimeout time.Duration, stores ...kvStore) *workload {
	seed := rapid.Uint64().Draw(t, name+" workload seed")
	ctx, cancel := context.WithCancel(ctx)
	w := &workload{name: name, events: events, hist: &history{start: time.Now()}, cancel: cancel, opTimeout: opTimeout}
	for i, st := range stores {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		w.wg.Go(func() { w.client(ctx, i, st, rng) })
	}
	t.Cleanup(w.stop)
	events.Record("", "action", "%s workload: %d clients on keys %v", name, len(stores), workloadKeys)
	return w
}

// client is one client's loop: a read, a put or a compare-and-swap of a
// drawn key, with a value no other operation writes (so a read names the
// write it saw); a swap expects what this client last read.
func (w *workload) client(ctx context.Context, id int, st kvStore, rng *rand.Rand) {
	lastRead := map[string]string{}
	for n := 0; ctx.Err() == nil; n++ {
		key := workloadKeys[rng.IntN(len(workloadKeys))]
		value := fmt.Sprintf("<%s-%d-%d>", w.name, id, n)
		var in kvInput
		switch r := rng.IntN(10); {
		case r < 4:
			in = kvInput{Op: "get", Key: key}
		case r < 7:
			in = kvInput{Op: "put", Key: key, Value: value}
		default:
			in = kvInput{Op: "cas", Key: key, Value: value, From: lastRead[key]}
		}
		octx, cancel := context.WithTimeout(ctx, w.opTimeout)
		call := time.Now()
		var out kvOutput
		var err error
		switch in.Op {
		case "get":
			out.Value, err = st.Get(octx, key)
		case "put":
			err = st.Put(octx, key, in.Value)
		case "cas":
			out.OK, err = st.CAS(octx, key, in.From, in.Value)
		}
		ret := time.Now()
		cancel()
		if ctx.Err() != nil && err != nil {
			// Stopped mid-call: a write's outcome is unknown; a read
			// saw nothing.
			if in.Op != "get" && !errors.Is(err, errNotSent) {
				w.hist.add(id, in, call, ret, kvOutput{Unknown: true})
			}
			return
		}
		switch {
		case errors.Is(err, errNotSent) || (err != nil && in.Op == "get"):
			w.hist.mu.Lock()
			w.hist.dropped++
			w.hist.mu.Unlock()
		case err != nil:
			w.hist.add(id, in, call, ret, kvOutput{Unknown: true})
			w.events.Record("", "client", "%s-%d %s %s %s: outcome unknown (%v)", w.name, id, in.Op, key, in.Value, shortErr(err))
		default:
			if in.Op == "get" {
				lastRead[key] = out.Value
			}
			w.hist.add(id, in, call, ret, out)
		}
		select {
		case <-ctx.Done():
		case <-time.After(workloadPause):
		}
	}
}

// shortErr is an error's first line, for the event log.
func shortErr(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// stop ends every client and waits for them. Idempotent.
func (w *workload) stop() {
	w.cancel()
	w.wg.Wait()
}

// persisted is, per key, every value a key ever held in the store, as its
// revisions tell; ok false when they cannot be read (compacted).
type persisted func(ctx context.Context) (map[string][]string, bool)

// etcdPersisted reads, through cli, every revision each workload key (at
// prefix+key) ever had, newest first: one read per revision, walked back from
// the current one by each version's own modification revision. An
// apiserver's keys hold encoded objects, which contain the value.
func etcdPersisted(cli *clientv3.Client, prefix string) persisted {
	return func(ctx context.Context) (map[string][]string, bool) {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		out := map[string][]string{}
		for _, key := range workloadKeys {
			var opts []clientv3.OpOption
			for {
				resp, err := cli.Get(ctx, prefix+key, opts...)
				if err != nil {
					return nil, false // compacted, or no quorum: unknown
				}
				if len(resp.Kvs) == 0 {
					break
				}
				kv := resp.Kvs[0]
				out[key] = append(out[key], string(kv.Value))
				if kv.Version <= 1 {
					break
				}
				opts = []clientv3.OpOption{clientv3.WithRev(kv.ModRevision - 1)}
			}
		}
		return out, true
	}
}

// errHistoryIllegal is a history no order explains.
var errHistoryIllegal = errors.New("the clients' history is not linearizable")

// check stops the workload and checks its history. Writes of unknown outcome
// whose value the store never held (its revisions, when readable) are
// dropped: they did not happen. It returns a summary for the log, and on a
// violation errHistoryIllegal with where porcupine's visualization was
// written (artifact names the file).
func (w *workload) check(ctx context.Context, stored persisted, artifact string) (string, error) {
	w.stop()
	w.hist.mu.Lock()
	ops := slices.Clone(w.hist.ops)
	dropped := w.hist.dropped
	w.hist.mu.Unlock()

	// The revisions are read (one read per revision) only when a write's
	// outcome is unknown: nothing else needs them.
	var held map[string][]string
	readable := false
	if stored != nil && slices.ContainsFunc(ops, func(op porcupine.Operation) bool { return op.Output.(kvOutput).Unknown }) {
		held, readable = stored(ctx)
	}
	var end int64
	for _, op := range ops {
		end = max(end, op.Return)
	}
	kept := ops[:0]
	unknown, neverHeld := 0, 0
	for _, op := range ops {
		if op.Output.(kvOutput).Unknown {
			in := op.Input.(kvInput)
			if readable && !heldValue(held[in.Key], in.Value) {
				neverHeld++
				continue
			}
			unknown++
			op.Return = end + 1
		}
		kept = append(kept, op)
	}
	explored.invariant("linearizable history: " + w.name)
	res, info := porcupine.CheckOperationsVerbose(kvModel, kept, 60*time.Second)
	verdict := map[porcupine.CheckResult]string{porcupine.Ok: "linearizable", porcupine.Illegal: "NOT linearizable", porcupine.Unknown: "inconclusive"}[res]
	explored.history(w.name, len(kept), unknown, neverHeld, dropped, verdict)
	summary := fmt.Sprintf("%s workload: %d operations (%d writes of unknown outcome kept, %d never held dropped, %d failed without effect): %s",
		w.name, len(kept), unknown, neverHeld, dropped, verdict)
	if res == porcupine.Unknown {
		summary += " (the checker's 60 s ran out)"
	}
	w.events.Record("", "client", "%s", summary)
	if res != porcupine.Illegal {
		return summary, nil
	}
	if err := os.MkdirAll(filepath.Dir(artifact), 0o755); err == nil {
		if err := porcupine.VisualizePath(kvModel, info, artifact); err == nil {
			return summary, fmt.Errorf("%w: %s; porcupine's picture of it: %s", errHistoryIllegal, summary, artifact)
		}
	}
	return summary, fmt.Errorf("%w: %s (its picture could not be written to %s)", errHistoryIllegal, summary, artifact)
}

// heldValue reports whether value is among revisions (an apiserver's
// revisions are encoded objects, which contain it).
func heldValue(revisions []string, value string) bool {
	for _, r := range revisions {
		if r == value || bytes.Contains([]byte(r), []byte(value)) {
			return true
		}
	}
	return false
}

// loadOn is a workload and where its values are stored in etcd.
type loadOn struct {
	*workload
	etcdPrefix string
}

// startWorkloads starts, on c, two clients through api (named apiName) on
// the workload's ConfigMaps, and two etcd clients with from's certificate on
// every host's client endpoint (a host's member answers once it runs), as
// an application's etcd client is configured. bound is one operation's.
func startWorkloads(t *rapid.T, ctx context.Context, c *sim.Cluster, apiName string, api kubernetes.Interface, from *sim.Host, bound time.Duration) []loadOn {
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := createConfigMaps(cctx, api); err != nil {
		t.Fatalf("through %s: %v", apiName, err)
	}
	apiLoad := startWorkload(t, ctx, c.Events(), apiName, bound, configMapKV{api}, configMapKV{api})
	urls := clientURLsOf(c.Hosts()...)
	stores := make([]kvStore, 2)
	for i := range stores {
		cli, err := directEtcd(from, urls...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		stores[i] = etcdKV{cli: cli, prefix: workloadPrefix}
		if i == 0 {
			// The register's initial absent: a restored snapshot may hold
			// an earlier workload's keys.
			if _, err := cli.Delete(cctx, workloadPrefix, clientv3.WithPrefix()); err != nil {
				t.Fatalf("empty the etcd workload's keys: %v", err)
			}
		}
	}
	etcdLoad := startWorkload(t, ctx, c.Events(), "etcd", bound, stores...)
	return []loadOn{{apiLoad, configMapEtcdPrefix}, {etcdLoad, workloadPrefix}}
}

// checkHistories checks every workload's history for linearizability,
// reading the stored revisions through from's member; a violation fails t.
func checkHistories(t *rapid.T, ctx context.Context, loads []loadOn, from *sim.Host) {
	cli, err := directEtcd(from)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for _, l := range loads {
		if _, err := l.check(ctx, etcdPersisted(cli, l.etcdPrefix), artifactPath(l.name+"-linearizability.html")); err != nil {
			t.Fatal(err)
		}
	}
}
