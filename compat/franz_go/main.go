// Command franzgo runs franz-go (kgo + kadm) scenarios against one broker or cluster.
//
//	franzgo -brokers HOST:PORT[,...] -nodes N [-run REGEXP]
//	        [-ca PEM [-cert PEM -key PEM] [-sasl-mechanism SCRAM-SHA-512 -sasl-user USER]]
//
// -ca makes every client dial TLS (trusting that CA), -cert/-key add a client certificate
// (mTLS), -sasl-* log in with SCRAM (the password comes from $COMPAT_SASL_PASSWORD).
// Prints one JSON line per scenario: {"test", "outcome", "error", "ms"}. Each scenario gets a
// context with a deadline and runs in its own goroutine: one that overruns is reported failed
// and the next starts (the process exits after the last one, so a hung client cannot block).
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

var (
	seeds   []string
	nodes   int
	rf      int16
	timeout = 90 * time.Second
	// secure holds the TLS / SASL options every client of the run gets (none on PLAINTEXT).
	secure []kgo.Opt
)

type scenario struct {
	name string
	fn   func(ctx context.Context) error
}

var scenarios = []scenario{
	{"bootstrap_metadata", bootstrapMetadata},
	{"produce_consume", produceConsume},
	{"idempotent_produce", idempotentProduce},
	{"group_two_members", groupTwoMembers},
	{"txn_abort_read_committed", txnAbortReadCommitted},
	{"txn_group_transact_session_eos", txnGroupTransactSession},
	{"admin_create_delete_topics", adminCreateDeleteTopics},
	{"admin_describe_alter_configs", adminDescribeAlterConfigs},
	{"admin_list_describe_groups", adminListDescribeGroups},
	{"admin_offsets", adminOffsets},
	{"admin_list_describe_transactions", adminListDescribeTransactions},
	{"admin_describe_producers", adminDescribeProducers},
	{"admin_delete_records", adminDeleteRecords},
	{"produce_compression", produceCompression},
	{"consume_after_milli", consumeAfterMilli},
	{"admin_offset_for_leader_epoch", adminOffsetForLeaderEpoch},
	{"admin_describe_log_dirs", adminDescribeLogDirs},
	{"admin_describe_client_quotas", adminDescribeClientQuotas},
}

func main() {
	brokers := flag.String("brokers", "", "bootstrap servers")
	flag.IntVar(&nodes, "nodes", 1, "number of brokers in the target")
	run := flag.String("run", ".", "regexp of scenarios to run")
	ca := flag.String("ca", "", "TLS: the CA certificate (PEM) the brokers' certificates are signed by")
	cert := flag.String("cert", "", "mTLS: the client's certificate (PEM)")
	key := flag.String("key", "", "mTLS: the client's private key (PEM)")
	mechanism := flag.String("sasl-mechanism", "", "SASL: SCRAM-SHA-512 or SCRAM-SHA-256")
	user := flag.String("sasl-user", "", "SASL: the user (password in $COMPAT_SASL_PASSWORD)")
	flag.Parse()
	seeds = strings.Split(*brokers, ",")
	var err error
	if secure, err = securityOpts(*ca, *cert, *key, *mechanism, *user, os.Getenv("COMPAT_SASL_PASSWORD")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	rf = int16(min(nodes, 3))
	re := regexp.MustCompile(*run)
	for _, s := range scenarios {
		if re.MatchString(s.name) {
			report(s)
		}
	}
	os.Exit(0)
}

// securityOpts: kgo options for a TLS (and client certificate) and SCRAM login, from the flags.
func securityOpts(ca, cert, key, mechanism, user, pass string) ([]kgo.Opt, error) {
	var opts []kgo.Opt
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, err
		}
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: x509.NewCertPool()}
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("no certificate in %s", ca)
		}
		if cert != "" || key != "" {
			pair, err := tls.LoadX509KeyPair(cert, key)
			if err != nil {
				return nil, err
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	auth := scram.Auth{User: user, Pass: pass}
	switch mechanism {
	case "":
	case "SCRAM-SHA-512":
		opts = append(opts, kgo.SASL(auth.AsSha512Mechanism()))
	case "SCRAM-SHA-256":
		opts = append(opts, kgo.SASL(auth.AsSha256Mechanism()))
	default:
		return nil, fmt.Errorf("unsupported SASL mechanism %q", mechanism)
	}
	return opts, nil
}

func report(s scenario) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("panic: %v", r)
			}
		}()
		done <- s.fn(ctx)
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(timeout + 10*time.Second):
		err = fmt.Errorf("timed out after %s", timeout)
	}
	row := map[string]any{"test": s.name, "outcome": "passed", "ms": time.Since(start).Milliseconds()}
	if err != nil {
		row["outcome"], row["error"] = "failed", err.Error()
	}
	line, _ := json.Marshal(row)
	fmt.Println(string(line))
}

// ---- helpers -----------------------------------------------------------------------------

var counter atomic.Int64

func uniq(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano()%1e9, counter.Add(1))
}

func client(opts ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(append(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, secure...), opts...)...)
}

func admin() (*kadm.Client, *kgo.Client, error) {
	cl, err := client()
	if err != nil {
		return nil, nil, err
	}
	return kadm.NewClient(cl), cl, nil
}

func createTopic(ctx context.Context, adm *kadm.Client, partitions int32, configs map[string]*string) (string, error) {
	topic := uniq("fgo")
	resp, err := adm.CreateTopic(ctx, partitions, rf, configs, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return "", fmt.Errorf("create topic: %w", err)
	}
	// metadata may lag creation (especially on a cluster): wait until every partition has a leader
	for ctx.Err() == nil {
		md, err := adm.Metadata(ctx, topic)
		if err == nil {
			if td, ok := md.Topics[topic]; ok && td.Err == nil && len(td.Partitions) == int(partitions) {
				ready := true
				for _, p := range td.Partitions {
					ready = ready && p.Err == nil && p.Leader >= 0
				}
				if ready {
					return topic, nil
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return "", ctx.Err()
}

func produceN(ctx context.Context, cl *kgo.Client, topic, prefix string, n int) error {
	rs := make([]*kgo.Record, n)
	for i := range rs {
		rs[i] = &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "%s%d", prefix, i)}
	}
	return cl.ProduceSync(ctx, rs...).FirstErr()
}

// consumeAll reads `topic` from the start (no group) until `n` records arrived, then polls
// once more for `settle` to catch extra records; returns sorted values.
func consumeAll(ctx context.Context, topic string, n int, settle time.Duration, opts ...kgo.Opt) ([]string, error) {
	cl, err := client(append([]kgo.Opt{kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, opts...)...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var got []string
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return got, fmt.Errorf("have %d of %d records: %w", len(got), n, ctx.Err())
		}
		if err := fetchErr(fs); err != nil {
			return got, err
		}
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	sctx, cancel := context.WithTimeout(ctx, settle)
	defer cancel()
	fs := cl.PollFetches(sctx)
	fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	sort.Strings(got)
	return got, nil
}

func fetchErr(fs kgo.Fetches) error {
	var err error
	fs.EachError(func(t string, p int32, e error) {
		if !errors.Is(e, context.DeadlineExceeded) && !errors.Is(e, context.Canceled) {
			err = fmt.Errorf("fetch %s[%d]: %w", t, p, e)
		}
	})
	return err
}

func values(prefix string, ids ...int) []string {
	var out []string
	for _, i := range ids {
		out = append(out, fmt.Sprintf("%s%d", prefix, i))
	}
	sort.Strings(out)
	return out
}

func span(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

func sameStrings(got, want []string) error {
	if strings.Join(got, ",") != strings.Join(want, ",") {
		return fmt.Errorf("got %d records %v, want %d %v", len(got), trim(got), len(want), trim(want))
	}
	return nil
}

func trim(s []string) []string {
	if len(s) > 12 {
		return append(s[:12:12], "...")
	}
	return s
}

func endOffsets(ctx context.Context, adm *kadm.Client, topic string) (map[int32]int64, error) {
	lo, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	lo.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out, lo.Error()
}

// committedAtEnd checks that `group` committed the end offset of every partition of `topic`.
func committedAtEnd(ctx context.Context, adm *kadm.Client, group, topic string) error {
	ends, err := endOffsets(ctx, adm, topic)
	if err != nil {
		return err
	}
	offs, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return err
	}
	for p, end := range ends {
		o, ok := offs.Lookup(topic, p)
		if !ok || o.Err != nil || o.At != end {
			return fmt.Errorf("partition %d: committed %+v, end %d", p, o, end)
		}
	}
	return nil
}

// ---- scenarios ---------------------------------------------------------------------------

func bootstrapMetadata(ctx context.Context) error {
	adm, cl, err := admin()
	if err != nil {
		return err
	}
	defer cl.Close()
	topic, err := createTopic(ctx, adm, 3, nil)
	if err != nil {
		return err
	}
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		return err
	}
	if len(md.Brokers) != nodes {
		return fmt.Errorf("%d brokers, want %d", len(md.Brokers), nodes)
	}
	for _, p := range md.Topics[topic].Partitions {
		if len(p.Replicas) != int(rf) || len(p.ISR) != int(rf) {
			return fmt.Errorf("partition %d: replicas %v isr %v", p.Partition, p.Replicas, p.ISR)
		}
	}
	return nil
}

func produceConsume(ctx context.Context) error {
	adm, cl, err := admin()
	if err != nil {
		return err
	}
	defer cl.Close()
	topic, err := createTopic(ctx, adm, 3, nil)
	if err != nil {
		return err
	}
	pcl, err := client(kgo.DisableIdempotentWrite(), kgo.RequiredAcks(kgo.LeaderAck()))
	if err != nil {
		return err
	}
	defer pcl.Close()
	if err := produceN(ctx, pcl, topic, "v", 300); err != nil {
		return err
	}
	got, err := consumeAll(ctx, topic, 300, time.Second)
	if err != nil {
		return err
	}
	return sameStrings(got, values("v", span(300)...))
}

func idempotentProduce(ctx context.Context) error {
	adm, cl, err := admin()
	if err != nil {
		return err
	}
	defer cl.Close()
	topic, err := createTopic(ctx, adm, 3, nil)
	if err != nil {
		return err
	}
	pcl, err := client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return err
	}
	defer pcl.Close()
	for batch := 0; batch < 5; batch++ { // kgo is idempotent by default
		if err := produceN(ctx, pcl, topic, fmt.Sprintf("b%d-", batch), 200); err != nil {
			return err
		}
	}
	got, err := consumeAll(ctx, topic, 1000, time.Second)
	if err != nil {
		return err
	}
	var want []string
	for batch := 0; batch < 5; batch++ {
		want = append(want, values(fmt.Sprintf("b%d-", batch), span(200)...)...)
	}
	sort.Strings(want)
	return sameStrings(got, want)
}

func groupTwoMembers(ctx context.Context) error {
	adm, cl, err := admin()
	if err != nil {
		return err
	}
	defer cl.Close()
	topic, err := createTopic(ctx, adm, 4, nil)
	if err != nil {
		return err
	}
	if err := produceN(ctx, cl, topic, "g", 400); err != nil {
		return err
	}
	group := uniq("fgo-group")
	var mu sync.Mutex
	seen := map[string]int{}
	owners := map[int32]int{}
	member := func(id int) (*kgo.Client, error) {
		return client(kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchMaxBytes(2000), kgo.FetchMaxPartitionBytes(1000), // small fetches: both members get work
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) {
				mu.Lock()
				defer mu.Unlock()
				for _, p := range a[topic] {
					owners[p] = id
				}
			}))
	}
	poll := func(m *kgo.Client, id int, stop <-chan struct{}, errs chan<- error) {
		for {
			select {
			case <-stop:
				errs <- nil
				return
			default:
			}
			pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			fs := m.PollFetches(pctx)
			cancel()
			if err := fetchErr(fs); err != nil {
				errs <- err
				return
			}
			fs.EachRecord(func(r *kgo.Record) {
				mu.Lock()
				seen[string(r.Value)]++
				mu.Unlock()
			})
		}
	}
	a, err := member(1)
	if err != nil {
		return err
	}
	b, err := member(2)
	if err != nil {
		a.Close()
		return err
	}
	stop, errs := make(chan struct{}), make(chan error, 2)
	go poll(a, 1, stop, errs)
	go poll(b, 2, stop, errs)
	for {
		mu.Lock()
		n, distinctOwners := len(seen), map[int]bool{}
		for _, o := range owners {
			distinctOwners[o] = true
		}
		mu.Unlock()
		if n >= 400 && len(distinctOwners) == 2 {
			break
		}
		if ctx.Err() != nil {
			close(stop)
			return fmt.Errorf("consumed %d of 400, owners %v", n, owners)
		}
		time.Sleep(100 * time.Millisecond)
	}
	close(stop)
	<-errs
	<-errs
	described, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return err
	}
	if d := described[group]; d.State != "Stable" || len(d.Members) != 2 {
		return fmt.Errorf("group described as %s with %d members, want Stable with 2", d.State, len(d.Members))
	}
	for _, m := range []*kgo.Client{a, b} {
		if err := m.CommitUncommittedOffsets(ctx); err != nil {
			return fmt.Errorf("commit: %w", err)
		}
	}
	a.Close()
	b.Close()
	for v, c := range seen {
		if c != 1 {
			return fmt.Errorf("record %s consumed %d times", v, c)
		}
	}
	return committedAtEnd(ctx, adm, group, topic)
}

func txnAbortReadCommitted(ctx context.Context) error {
	adm, cl, err := admin()
	if err != nil {
		return err
	}
	defer cl.Close()
	topic, err := createTopic(ctx, adm, 2, nil)
	if err != nil {
		return err
	}
	txid := uniq("fgo-txn")
	tcl, err := client(kgo.TransactionalID(txid), kgo.DefaultProduceTopic(topic))
	if err != nil {
		return err
	}
	defer tcl.Close()
	for _, step := range []struct {
		prefix string
		commit kgo.TransactionEndTry
	}{{"a", kgo.TryCommit}, {"b", kgo.TryAbort}, {"c", kgo.TryCommit}} {
		if err := tcl.BeginTransaction(); err != nil {
			return err
		}
		if err := produceN(ctx, tcl, topic, step.prefix, 10); err != nil {
			return err
		}
		if err := tcl.EndTransaction(ctx, step.commit); err != nil {
			return fmt.Errorf("end transaction %s: %w", step.prefix, err)
		}
	}
	committed, err := consumeAll(ctx, topic, 20, 1500*time.Millisecond, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return err
	}
	if err := sameStrings(committed, append(values("a", span(10)...), values("c", span(10)...)...)); err != nil {
		return fmt.Errorf("read_committed: %w", err)
	}
	everything, err := consumeAll(ctx, topic, 30, 1500*time.Millisecond, kgo.FetchIsolationLevel(kgo.ReadUncommitted()))
	if err != nil {
		return err
	}
	if len(everything) != 30 {
		return fmt.Errorf("read_uncommitted: %d records, want 30", len(everything))
	}
	return nil
}

// txnGroupTransactSession is the consume-transform-produce loop: a GroupTransactSession reads
// the input topic (read_committed) and writes each record, transformed, to the output topic;
// the first batch is aborted on purpose and must be redone; the output must hold each input
// record exactly once and the group's committed offsets must be the input's ends.
func txnGroupTransactSession(ctx context.Context) error {
	adm, cl, err := admin()
	if err != nil {
		return err
	}
	defer cl.Close()
	in, err := createTopic(ctx, adm, 3, nil)
	if err != nil {
		return err
	}
	out, err := createTopic(ctx, adm, 3, nil)
	if err != nil {
		return err
	}
	const n = 300
	if err := produceN(ctx, cl, in, "in", n); err != nil {
		return err
	}
	group := uniq("fgo-eos")
	sess, err := kgo.NewGroupTransactSession(append([]kgo.Opt{kgo.SeedBrokers(seeds...),
		kgo.TransactionalID(uniq("fgo-eos-txn")), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumerGroup(group), kgo.ConsumeTopics(in), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.RequireStableFetchOffsets(), kgo.FetchMaxBytes(4000), kgo.FetchMaxPartitionBytes(2000)}, secure...)...)
	if err != nil {
		return err
	}
	defer sess.Close()
	aborted, processed := false, 0
	for processed < n {
		fs := sess.PollFetches(ctx)
		if ctx.Err() != nil {
			return fmt.Errorf("transformed %d of %d: %w", processed, n, ctx.Err())
		}
		if err := fetchErr(fs); err != nil {
			return err
		}
		if fs.NumRecords() == 0 {
			continue
		}
		if err := sess.Begin(); err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		var rs []*kgo.Record
		fs.EachRecord(func(r *kgo.Record) {
			rs = append(rs, &kgo.Record{Topic: out, Key: r.Key, Value: append([]byte("out-"), r.Value...)})
		})
		if err := sess.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			return fmt.Errorf("produce: %w", err)
		}
		try := kgo.TryCommit
		if !aborted {
			try, aborted = kgo.TryAbort, true // the session rewinds to the last committed offsets
		}
		committed, err := sess.End(ctx, try)
		if err != nil {
			return fmt.Errorf("end: %w", err)
		}
		if committed {
			processed += len(rs)
		}
	}
	got, err := consumeAll(ctx, out, n, 2*time.Second, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return err
	}
	if err := sameStrings(got, values("out-in", span(n)...)); err != nil {
		return fmt.Errorf("exactly-once output: %w", err)
	}
	return committedAtEnd(ctx, adm, group, in)
}

func adminCreateDeleteTopics(ctx context.Context) error {
	adm, cl, err := admin()
	if err != nil {
		return err
	}
	defer cl.Close()
	topic, err := createTopic(ctx, adm, 2, nil)
	if err != nil {
		return err
	}
	if _, err := adm.CreateTopic(ctx, 2, rf, nil, topic); !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("creating an existing topic: %v, want TOPIC_ALREADY_EXISTS", err)
	}
	cp, err := adm.CreatePartitions(ctx, 3, topic)
	if err == nil {
		err = cp.Error()
	}
	if err != nil {
		return fmt.Errorf("create partitions: %w", err)
	}
	for {
		md, err := adm.Metadata(ctx, topic)
		if err == nil && len(md.Topics[topic].Partitions) == 5 {
			break
		}
		if ctx.Err() != nil {
			return fmt.Errorf("5 partitions never listed")
		}
		time.Sleep(100 * time.Millisecond)
	}
	del, err := adm.DeleteTopics(ctx, topic)
	if err == nil {
		err = del.Error()
	}
	if err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	for {
		topics, err := adm.ListTopics(ctx)
		if err == nil && !topics.Has(topic) {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("deleted topic still listed")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func configValue(rcs kadm.ResourceConfigs, key string) (string, error) {
	for _, rc := range rcs {
		if rc.Err != nil {
			return "", rc.Err
		}
		for _, c := range rc.Configs {
			if c.Key == key && c.Value != nil {
				return *c.Value, nil
			}
		}
	}
	return "", fmt.Errorf("config %s not described", key)
}

func adminDescribeAlterConfigs(ctx context.Context) error {
	adm, cl, err := admin()
	if err != nil {
		return err
	}
	defer cl.Close()
	retention := "123456"
	topic, err := createTopic(ctx, adm, 1, map[string]*string{"retention.ms": &retention})
	if err != nil {
		return err
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return err
	}
	if v, err := configValue(rcs, "retention.ms"); err != nil || v != retention {
		return fmt.Errorf("retention.ms = %q (%v), want %s", v, err, retention)
	}
	if v, err := configValue(rcs, "cleanup.policy"); err != nil || v != "delete" {
		return fmt.Errorf("cleanup.policy = %q (%v), want delete", v, err)
	}
	altered := "7654321"
	ar, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: &altered}}, topic)
	if err == nil {
		for _, r := range ar {
			err = errors.Join(err, r.Err)
		}
	}
	if err != nil {
		return fmt.Errorf("alter: %w", err)
	}
	// any broker answers DescribeConfigs; on a cluster each applies the change a little later
	for v := ""; v != altered; {
		if ctx.Err() != nil {
			return fmt.Errorf("after alter retention.ms = %q, want %s", v, altered)
		}
		if rcs, err = adm.DescribeTopicConfigs(ctx, topic); err != nil {
			return err
		}
		v, _ = configValue(rcs, "retention.ms")
		time.Sleep(50 * time.Millisecond)
	}
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return err
	}
	brokers, err := adm.DescribeBrokerConfigs(ctx, md.Brokers.NodeIDs()...)
	if err != nil {
		return fmt.Errorf("describe broker configs: %w", err)
	}
	for _, b := range brokers {
		if b.Err != nil || len(b.Configs) == 0 {
			return fmt.Errorf("broker %s configs: %d, err %v", b.Name, len(b.Configs), b.Err)
		}
	}
	// the cluster-wide dynamic defaults (resource ""): may be empty, must not fail
	cluster, err := adm.DescribeBrokerConfigs(ctx)
	if err == nil && len(cluster) == 1 {
		err = cluster[0].Err
	}
	return err
}

// idleGroup: a group that consumed n records of a new topic, committed, and left.
func idleGroup(ctx context.Context, adm *kadm.Client, n int) (string, string, error) {
	topic, err := createTopic(ctx, adm, 2, nil)
	if err != nil {
		return "", "", err
	}
	pcl, err := client()
	if err != nil {
		return "", "", err
	}
	defer pcl.Close()
	if err := produceN(ctx, pcl, topic, "r", n); err != nil {
		return "", "", err
	}
	group := uniq("fgo-idle")
	m, err := client(kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	if err != nil {
		return "", "", err
	}
	for got := 0; got < n; {
		fs := m.PollFetches(ctx)
		if ctx.Err() != nil {
			m.Close()
			return "", "", fmt.Errorf("idle group consumed %d of %d", got, n)
		}
		got += fs.NumRecords()
	}
	if err := m.CommitUncommittedOffsets(ctx); err != nil {
		m.Close()
		return "", "", err
	}
	m.Close() // leaves the group
	return group, topic, nil
}

func adminListDescribeGroups(ctx context.Context) error {
	adm, cl, err := admin()
	if err != nil {
		return err
	}
	defer cl.Close()
	group, _, err := idleGroup(ctx, adm, 10)
	if err != nil {
		return err
	}
	listed, err := adm.ListGroups(ctx)
	if err != nil {
		return err
	}
	if g, ok := listed[group]; !ok || g.ProtocolType != "consumer" {
		return fmt.Errorf("ListGroups: %+v", listed[group])
	}
	described, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return err
	}
	if d := described[group]; d.Err != nil || d.State != "Empty" || d.ProtocolType != "consumer" {
		return fmt.Errorf("DescribeGroups: state %q protocol %q err %v", d.State, d.ProtocolType, d.Err)
	}
	dg, err := adm.DeleteGroups(ctx, group)
	if err != nil {
		return err
	}
	if err := dg[group].Err; err != nil {
		return fmt.Errorf("DeleteGroups: %w", err)
	}
	listed, err = adm.ListGroups(ctx)
	if err != nil {
		return err
	}
	if _, ok := listed[group]; ok {
		return fmt.Errorf("deleted group still listed")
	}
	return nil
}

func adminOffsets(ctx context.Context) error {
	adm, cl, err := admin()
	if err != nil {
		return err
	}
	defer cl.Close()
	group, topic, err := idleGroup(ctx, adm, 20)
	if err != nil {
		return err
	}
	if err := committedAtEnd(ctx, adm, group, topic); err != nil {
		return err
	}
	reset := kadm.Offsets{}
	reset.Add(kadm.Offset{Topic: topic, Partition: 0, At: 1, LeaderEpoch: -1})
	resp, err := adm.CommitOffsets(ctx, group, reset)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return fmt.Errorf("commit offsets: %w", err)
	}
	offs, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return err
	}
	if o, _ := offs.Lookup(topic, 0); o.At != 1 {
		return fmt.Errorf("offset after reset %d, want 1", o.At)
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return err
	}
	if o, _ := starts.Lookup(topic, 0); o.Offset != 0 {
		return fmt.Errorf("start offset %d", o.Offset)
	}
	after, err := adm.ListOffsetsAfterMilli(ctx, time.Now().Add(time.Hour).UnixMilli(), topic)
	if err != nil {
		return err
	}
	ends, err := endOffsets(ctx, adm, topic)
	if err != nil {
		return err
	}
	if o, _ := after.Lookup(topic, 0); o.Offset != ends[0] {
		return fmt.Errorf("offset after a future time %d, want the end %d", o.Offset, ends[0])
	}
	return nil
}

func adminListDescribeTransactions(ctx context.Context) error {
	adm, cl, err := admin()
	if err != nil {
		return err
	}
	defer cl.Close()
	topic, err := createTopic(ctx, adm, 1, nil)
	if err != nil {
		return err
	}
	txid := uniq("fgo-list-txn")
	tcl, err := client(kgo.TransactionalID(txid))
	if err != nil {
		return err
	}
	defer tcl.Close()
	if err := tcl.BeginTransaction(); err != nil {
		return err
	}
	if err := produceN(ctx, tcl, topic, "t", 3); err != nil {
		return err
	}
	// while the transaction is open
	dt, err := adm.DescribeTransactions(ctx, txid)
	if err != nil {
		return fmt.Errorf("describe transactions: %w", err)
	}
	d, ok := dt[txid]
	if !ok || d.Err != nil || d.State != "Ongoing" || !d.Topics.Lookup(topic, 0) {
		return fmt.Errorf("DescribeTransactions while open: %+v", d)
	}
	lt, err := adm.ListTransactions(ctx, nil, nil)
	if err != nil {
		return fmt.Errorf("list transactions: %w", err)
	}
	if l, ok := lt[txid]; !ok || l.State != "Ongoing" || l.ProducerID != d.ProducerID {
		return fmt.Errorf("ListTransactions: %+v", lt[txid])
	}
	if err := tcl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return err
	}
	// EndTxn answers once PrepareCommit is logged; CompleteCommit follows the markers
	for state := ""; state != "CompleteCommit"; {
		if ctx.Err() != nil {
			return fmt.Errorf("state after commit stays %q, want CompleteCommit", state)
		}
		dt, err = adm.DescribeTransactions(ctx, txid)
		if err != nil {
			return err
		}
		state = dt[txid].State
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

func adminDescribeProducers(ctx context.Context) error {
	adm, cl, err := admin()
	if err != nil {
		return err
	}
	defer cl.Close()
	topic, err := createTopic(ctx, adm, 1, nil)
	if err != nil {
		return err
	}
	tcl, err := client(kgo.TransactionalID(uniq("fgo-producers")))
	if err != nil {
		return err
	}
	defer tcl.Close()
	if err := tcl.BeginTransaction(); err != nil {
		return err
	}
	if err := produceN(ctx, tcl, topic, "p", 5); err != nil {
		return err
	}
	dp, err := adm.DescribeProducers(ctx, kadm.TopicsSet{topic: {0: {}}})
	if err != nil {
		return fmt.Errorf("describe producers: %w", err)
	}
	part := dp[topic].Partitions[0]
	if part.Err != nil || len(part.ActiveProducers) != 1 {
		return fmt.Errorf("DescribeProducers: err %v, %d active producers", part.Err, len(part.ActiveProducers))
	}
	for _, p := range part.ActiveProducers {
		if p.LastSequence != 4 || p.CurrentTxnStartOffset != 0 {
			return fmt.Errorf("producer %+v: want last sequence 4, txn start 0", p)
		}
	}
	return tcl.EndTransaction(ctx, kgo.TryAbort)
}

func adminDeleteRecords(ctx context.Context) error {
	adm, cl, err := admin()
	if err != nil {
		return err
	}
	defer cl.Close()
	topic, err := createTopic(ctx, adm, 1, nil)
	if err != nil {
		return err
	}
	if err := produceN(ctx, cl, topic, "d", 10); err != nil {
		return err
	}
	os := kadm.Offsets{}
	os.Add(kadm.Offset{Topic: topic, Partition: 0, At: 6, LeaderEpoch: -1})
	dr, err := adm.DeleteRecords(ctx, os)
	if err == nil {
		err = dr.Error()
	}
	if err != nil {
		return fmt.Errorf("delete records: %w", err)
	}
	if r, _ := dr.Lookup(topic, 0); r.LowWatermark != 6 {
		return fmt.Errorf("low watermark %d, want 6", r.LowWatermark)
	}
	got, err := consumeAll(ctx, topic, 4, time.Second)
	if err != nil {
		return err
	}
	return sameStrings(got, values("d", 6, 7, 8, 9))
}

func produceCompression(ctx context.Context) error {
	adm, cl, err := admin()
	if err != nil {
		return err
	}
	defer cl.Close()
	topic, err := createTopic(ctx, adm, 2, nil)
	if err != nil {
		return err
	}
	codecs := map[string]kgo.CompressionCodec{"gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
		"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression()}
	var want []string
	for name, codec := range codecs {
		pcl, err := client(kgo.ProducerBatchCompression(codec), kgo.ProducerLinger(10*time.Millisecond))
		if err != nil {
			return err
		}
		err = produceN(ctx, pcl, topic, name+"-", 100)
		pcl.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		want = append(want, values(name+"-", span(100)...)...)
	}
	sort.Strings(want)
	got, err := consumeAll(ctx, topic, len(want), time.Second)
	if err != nil {
		return err
	}
	return sameStrings(got, want)
}

func consumeAfterMilli(ctx context.Context) error {
	adm, cl, err := admin()
	if err != nil {
		return err
	}
	defer cl.Close()
	topic, err := createTopic(ctx, adm, 1, nil)
	if err != nil {
		return err
	}
	now := time.Now()
	var rs []*kgo.Record
	for i := 0; i < 6; i++ {
		ts := now.Add(-time.Hour) // three old records, then three new ones
		if i >= 3 {
			ts = now
		}
		rs = append(rs, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "m%d", i), Timestamp: ts})
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		return err
	}
	after, err := consumeAllFrom(ctx, topic, 3, kgo.NewOffset().AfterMilli(now.Add(-time.Minute).UnixMilli()))
	if err != nil {
		return err
	}
	return sameStrings(after, values("m", 3, 4, 5))
}

// consumeAllFrom is consumeAll starting at `start` instead of the beginning.
func consumeAllFrom(ctx context.Context, topic string, n int, start kgo.Offset) ([]string, error) {
	return consumeAll(ctx, topic, n, time.Second, kgo.ConsumeResetOffset(start))
}

func adminOffsetForLeaderEpoch(ctx context.Context) error {
	adm, cl, err := admin()
	if err != nil {
		return err
	}
	defer cl.Close()
	topic, err := createTopic(ctx, adm, 1, nil)
	if err != nil {
		return err
	}
	if err := produceN(ctx, cl, topic, "e", 7); err != nil {
		return err
	}
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		return err
	}
	epoch := md.Topics[topic].Partitions[0].LeaderEpoch
	var req kadm.OffsetForLeaderEpochRequest
	req.Add(topic, 0, epoch)
	resp, err := adm.OffsetForLeaderEpoch(ctx, req)
	if err != nil {
		return err
	}
	r := resp[topic][0]
	if r.Err != nil || r.LeaderEpoch != epoch || r.EndOffset != 7 {
		return fmt.Errorf("OffsetForLeaderEpoch(epoch %d): epoch %d end %d err %v, want epoch %d end 7",
			epoch, r.LeaderEpoch, r.EndOffset, r.Err, epoch)
	}
	return nil
}

func adminDescribeLogDirs(ctx context.Context) error {
	adm, cl, err := admin()
	if err != nil {
		return err
	}
	defer cl.Close()
	topic, err := createTopic(ctx, adm, 1, nil)
	if err != nil {
		return err
	}
	if err := produceN(ctx, cl, topic, "l", 50); err != nil {
		return err
	}
	dirs, err := adm.DescribeAllLogDirs(ctx, kadm.TopicsSet{topic: {0: {}}})
	if err != nil {
		return fmt.Errorf("describe log dirs: %w", err)
	}
	holders := 0
	for _, brokerDirs := range dirs {
		for _, d := range brokerDirs {
			if d.Err != nil {
				return fmt.Errorf("broker %d dir %s: %w", d.Broker, d.Dir, d.Err)
			}
			if p, ok := d.Topics[topic][0]; ok {
				holders++
				if p.Size <= 0 {
					return fmt.Errorf("broker %d: partition size %d after 50 records", d.Broker, p.Size)
				}
			}
		}
	}
	if holders != int(rf) {
		return fmt.Errorf("%d log dirs hold the partition, want %d replicas", holders, rf)
	}
	return nil
}

func adminDescribeClientQuotas(ctx context.Context) error {
	adm, cl, err := admin()
	if err != nil {
		return err
	}
	defer cl.Close()
	// no quotas are configured: Kafka answers with an empty list
	quotas, err := adm.DescribeClientQuotas(ctx, false, nil)
	if err != nil {
		return fmt.Errorf("describe client quotas: %w", err)
	}
	if len(quotas) != 0 {
		return fmt.Errorf("unexpected quotas %+v", quotas)
	}
	return nil
}
