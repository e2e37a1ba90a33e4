// Command saramacheck runs IBM/sarama scenarios against one broker or cluster.
//
//	saramacheck -brokers HOST:PORT[,...] [-nodes N] [-version 4.3.1|default] [-run REGEXP]
//	            [-ca PEM [-cert PEM -key PEM] [-sasl-mechanism SCRAM-SHA-512 -sasl-user USER]]
//
// -ca makes every client use TLS (config.Net.TLS, trusting that CA), -cert/-key add a client
// certificate (mTLS), -sasl-* log in with SCRAM through config.Net.SASL and an xdg-go/scram
// client (the password comes from $COMPAT_SASL_PASSWORD).
// Prints one line per scenario, "PASS <name> (<ms> ms)" or "FAIL <name> (<ms> ms): <error>",
// and exits 1 when any scenario failed. Each scenario runs in its own goroutine with a deadline:
// one that overruns is reported failed and the next starts, so a hung client cannot block.
package main

import (
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/xdg-go/scram"
)

var (
	seeds   []string
	nodes   int
	rf      int16
	version sarama.KafkaVersion
	timeout = 90 * time.Second
	// secure sets the TLS / SASL settings every client's config gets (nil on PLAINTEXT).
	secure func(*sarama.Config)
)

type scenario struct {
	name string
	fn   func(ctx context.Context) error
}

var scenarios = []scenario{
	{"produce_consume", produceConsume},
	{"idempotent_produce", idempotentProduce},
	{"group_rebalance_commit_resume", groupRebalanceCommitResume},
	{"txn_commit_abort_read_committed", txnCommitAbortReadCommitted},
	{"txn_add_offsets_to_txn", txnAddOffsetsToTxn},
	{"admin_topics", adminTopics},
	{"admin_configs", adminConfigs},
	{"admin_create_partitions", adminCreatePartitions},
	{"admin_delete_records", adminDeleteRecords},
	{"admin_groups", adminGroups},
	{"admin_delete_topic", adminDeleteTopic},
	{"produce_compression", produceCompression},
	{"group_cooperative_sticky_static", groupCooperativeStickyStatic},
	{"admin_cluster_log_dirs", adminClusterLogDirs},
	{"admin_list_offsets", adminListOffsets},
	{"admin_alter_group_offsets", adminAlterGroupOffsets},
	{"admin_elect_leaders_reassignments", adminElectReassign},
	{"admin_acls", adminACLs},
	{"admin_client_quotas", adminClientQuotas},
	{"admin_scram_credentials", adminScram},
}

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "bootstrap servers")
	flag.IntVar(&nodes, "nodes", 1, "number of brokers in the target")
	ver := flag.String("version", "4.3.1", `Config.Version: a Kafka version or "default" (sarama.DefaultVersion)`)
	run := flag.String("run", ".", "regexp of scenarios to run")
	verbose := flag.Bool("v", false, "sarama's own log on stderr")
	ca := flag.String("ca", "", "TLS: the CA certificate (PEM) the brokers' certificates are signed by")
	cert := flag.String("cert", "", "mTLS: the client's certificate (PEM)")
	key := flag.String("key", "", "mTLS: the client's private key (PEM)")
	mechanism := flag.String("sasl-mechanism", "", "SASL: SCRAM-SHA-512 or SCRAM-SHA-256")
	user := flag.String("sasl-user", "", "SASL: the user (password in $COMPAT_SASL_PASSWORD)")
	flag.Parse()
	var err error
	if secure, err = security(*ca, *cert, *key, *mechanism, *user, os.Getenv("COMPAT_SASL_PASSWORD")); err != nil {
		log.Fatal(err)
	}
	seeds = strings.Split(*brokers, ",")
	rf = int16(min(nodes, 3))
	if *ver == "default" {
		version = sarama.DefaultVersion
	} else {
		v, err := sarama.ParseKafkaVersion(*ver)
		if err != nil {
			log.Fatal(err)
		}
		version = v
	}
	if *verbose {
		sarama.Logger = log.New(os.Stderr, "[sarama] ", log.LstdFlags|log.Lmicroseconds)
	}
	re := regexp.MustCompile(*run)
	failed := 0
	for _, s := range scenarios {
		if re.MatchString(s.name) && !report(s) {
			failed++
		}
	}
	if failed > 0 {
		os.Exit(1)
	}
}

// security: a function setting config.Net.TLS / config.Net.SASL from the flags (nil: none).
func security(ca, cert, key, mechanism, user, pass string) (func(*sarama.Config), error) {
	var tlsConfig *tls.Config
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, err
		}
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: x509.NewCertPool()}
		if !tlsConfig.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("no certificate in %s", ca)
		}
		if cert != "" || key != "" {
			pair, err := tls.LoadX509KeyPair(cert, key)
			if err != nil {
				return nil, err
			}
			tlsConfig.Certificates = []tls.Certificate{pair}
		}
	}
	var hash scram.HashGeneratorFcn
	var saslType sarama.SASLMechanism
	switch mechanism {
	case "":
	case sarama.SASLTypeSCRAMSHA512:
		hash, saslType = sha512.New, sarama.SASLTypeSCRAMSHA512
	case sarama.SASLTypeSCRAMSHA256:
		hash, saslType = sha256.New, sarama.SASLTypeSCRAMSHA256
	default:
		return nil, fmt.Errorf("unsupported SASL mechanism %q", mechanism)
	}
	if tlsConfig == nil && hash == nil {
		return nil, nil
	}
	return func(c *sarama.Config) {
		if tlsConfig != nil {
			c.Net.TLS.Enable = true
			c.Net.TLS.Config = tlsConfig.Clone()
		}
		if hash != nil {
			c.Net.SASL.Enable = true
			c.Net.SASL.Handshake = true
			c.Net.SASL.Mechanism = saslType
			c.Net.SASL.User = user
			c.Net.SASL.Password = pass
			c.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: hash} }
		}
	}, nil
}

// scramClient is sarama's SCRAMClient on xdg-go/scram, as sarama's examples/sasl_scram_client.
type scramClient struct {
	hash scram.HashGeneratorFcn
	conv *scram.ClientConversation
}

func (x *scramClient) Begin(user, pass, authzID string) error {
	cl, err := x.hash.NewClient(user, pass, authzID)
	if err != nil {
		return err
	}
	x.conv = cl.NewConversation()
	return nil
}

func (x *scramClient) Step(challenge string) (string, error) { return x.conv.Step(challenge) }

func (x *scramClient) Done() bool { return x.conv.Done() }

func report(s scenario) bool {
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
	ms := time.Since(start).Milliseconds()
	if err != nil {
		fmt.Printf("FAIL %s (%d ms): %s\n", s.name, ms, strings.ReplaceAll(err.Error(), "\n", " | "))
		return false
	}
	fmt.Printf("PASS %s (%d ms)\n", s.name, ms)
	return true
}

// ---- helpers -----------------------------------------------------------------------------

var counter atomic.Int64

func uniq(prefix string) string {
	return fmt.Sprintf("sarama-%s-%d-%d", prefix, time.Now().UnixNano()%1e9, counter.Add(1))
}

func config() *sarama.Config {
	c := sarama.NewConfig()
	c.Version = version
	c.ClientID = "kbroker-compat-sarama"
	c.Producer.Return.Successes = true
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Consumer.Return.Errors = true
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	c.Metadata.Retry.Backoff = 200 * time.Millisecond
	if secure != nil {
		secure(c)
	}
	return c
}

func admin() (sarama.ClusterAdmin, error) { return sarama.NewClusterAdmin(seeds, config()) }

func createTopic(name string, partitions int32, cfg map[string]*string) error {
	adm, err := admin()
	if err != nil {
		return err
	}
	defer adm.Close()
	if err := adm.CreateTopic(name, &sarama.TopicDetail{NumPartitions: partitions,
		ReplicationFactor: rf, ConfigEntries: cfg}, false); err != nil {
		return fmt.Errorf("CreateTopic %s: %w", name, err)
	}
	return waitTopic(name, int(partitions))
}

// waitTopic waits until every broker's metadata has the topic with its partitions led.
func waitTopic(name string, partitions int) error {
	cl, err := sarama.NewClient(seeds, config())
	if err != nil {
		return err
	}
	defer cl.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := cl.RefreshMetadata(name)
		if err == nil {
			ps, perr := cl.Partitions(name)
			if perr == nil && len(ps) == partitions {
				ok := true
				for _, p := range ps {
					if _, lerr := cl.Leader(name, p); lerr != nil {
						ok = false
					}
				}
				if ok {
					return nil
				}
			}
			err = fmt.Errorf("%d partitions, want %d (%v)", len(ps), partitions, perr)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("topic %s not ready: %w", name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func str(s string) *string { return &s }

type rec struct {
	partition int32
	offset    int64
	key       string
	value     string
	headers   map[string]string
}

// consumeAll reads partition 0..n-1 of topic from the oldest offset until want records came
// (then waits `settle` for extra ones) or ctx ends.
func consumeAll(ctx context.Context, cfg *sarama.Config, topic string, want int, settle time.Duration) ([]rec, error) {
	cons, err := sarama.NewConsumer(seeds, cfg)
	if err != nil {
		return nil, err
	}
	defer cons.Close()
	parts, err := cons.Partitions(topic)
	if err != nil {
		return nil, err
	}
	out := make(chan rec, 1024)
	errs := make(chan error, 16)
	var pcs []sarama.PartitionConsumer
	for _, p := range parts {
		pc, err := cons.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			return nil, fmt.Errorf("ConsumePartition %d: %w", p, err)
		}
		pcs = append(pcs, pc)
		go func() {
			for m := range pc.Messages() {
				h := map[string]string{}
				for _, hd := range m.Headers {
					h[string(hd.Key)] = string(hd.Value)
				}
				out <- rec{m.Partition, m.Offset, string(m.Key), string(m.Value), h}
			}
		}()
		go func() {
			for e := range pc.Errors() {
				errs <- e
			}
		}()
	}
	defer func() {
		for _, pc := range pcs {
			pc.AsyncClose()
		}
	}()
	var got []rec
	var settleC <-chan time.Time
	for {
		select {
		case r := <-out:
			got = append(got, r)
			if len(got) == want {
				settleC = time.After(settle)
			}
		case e := <-errs:
			return got, fmt.Errorf("consumer error: %w", e)
		case <-settleC:
			return got, nil
		case <-ctx.Done():
			return got, fmt.Errorf("got %d of %d records: %w", len(got), want, ctx.Err())
		}
	}
}

// ---- scenarios ---------------------------------------------------------------------------

func produceConsume(ctx context.Context) error {
	topic := uniq("plain")
	if err := createTopic(topic, 3, nil); err != nil {
		return err
	}
	cfg := config()
	cfg.Producer.Partitioner = sarama.NewHashPartitioner
	prod, err := sarama.NewSyncProducer(seeds, cfg)
	if err != nil {
		return err
	}
	defer prod.Close()
	const n = 60
	var msgs []*sarama.ProducerMessage
	for i := range n {
		msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(fmt.Sprintf("k%d", i%7)),
			Value:   sarama.StringEncoder(fmt.Sprintf("v%d", i)),
			Headers: []sarama.RecordHeader{{Key: []byte("i"), Value: []byte(fmt.Sprint(i))}}})
	}
	if err := prod.SendMessages(msgs[:n/2]); err != nil {
		return fmt.Errorf("SendMessages: %w", err)
	}
	for _, m := range msgs[n/2:] {
		if _, _, err := prod.SendMessage(m); err != nil {
			return fmt.Errorf("SendMessage: %w", err)
		}
	}
	keyPart := map[string]int32{}
	for _, m := range msgs {
		k, _ := m.Key.Encode()
		if p, ok := keyPart[string(k)]; ok && p != m.Partition {
			return fmt.Errorf("key %s went to partitions %d and %d", k, p, m.Partition)
		}
		keyPart[string(k)] = m.Partition
	}
	got, err := consumeAll(ctx, config(), topic, n, time.Second)
	if err != nil {
		return err
	}
	if len(got) != n {
		return fmt.Errorf("consumed %d records, want %d", len(got), n)
	}
	seen := map[string]bool{}
	last := map[int32]int64{0: -1, 1: -1, 2: -1}
	for _, r := range got {
		if r.offset <= last[r.partition] {
			return fmt.Errorf("partition %d offsets out of order: %d after %d", r.partition, r.offset, last[r.partition])
		}
		last[r.partition] = r.offset
		if r.headers["i"] != strings.TrimPrefix(r.value, "v") {
			return fmt.Errorf("record %s has header i=%q", r.value, r.headers["i"])
		}
		if keyPart[r.key] != r.partition {
			return fmt.Errorf("key %s read from partition %d, produced to %d", r.key, r.partition, keyPart[r.key])
		}
		seen[r.value] = true
	}
	if len(seen) != n {
		return fmt.Errorf("%d distinct values, want %d", len(seen), n)
	}
	return nil
}

func idempotentProduce(ctx context.Context) error {
	topic := uniq("idem")
	if err := createTopic(topic, 1, nil); err != nil {
		return err
	}
	cfg := config()
	cfg.Producer.Idempotent = true
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Retry.Max = 5
	prod, err := sarama.NewAsyncProducer(seeds, cfg)
	if err != nil {
		return err
	}
	const n = 500
	go func() {
		for i := range n {
			prod.Input() <- &sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(fmt.Sprintf("%05d", i))}
		}
	}()
	var perr error
	for i := 0; i < n; i++ {
		select {
		case <-prod.Successes():
		case e := <-prod.Errors():
			perr = errors.Join(perr, e.Err)
		case <-ctx.Done():
			prod.AsyncClose()
			return fmt.Errorf("%d of %d acknowledged: %w", i, n, ctx.Err())
		}
	}
	if err := prod.Close(); err != nil || perr != nil {
		return fmt.Errorf("producer errors: %v %v", perr, err)
	}
	got, err := consumeAll(ctx, config(), topic, n, time.Second)
	if err != nil {
		return err
	}
	if len(got) != n {
		return fmt.Errorf("consumed %d, want %d", len(got), n)
	}
	for i, r := range got {
		if r.value != fmt.Sprintf("%05d", i) || r.offset != int64(i) {
			return fmt.Errorf("record %d: offset %d value %s", i, r.offset, r.value)
		}
	}
	return nil
}

// ---- consumer groups ---------------------------------------------------------------------

type member struct {
	name   string
	mu     sync.Mutex
	claims map[string]map[int32]bool // partitions whose ConsumeClaim is running
	recs   chan rec
}

func (m *member) Setup(s sarama.ConsumerGroupSession) error { return nil }
func (m *member) Cleanup(sarama.ConsumerGroupSession) error { return nil }

// ConsumeClaim runs from assignment to revocation of a partition (with either rebalance
// protocol): the partitions a member owns are those whose ConsumeClaim is running.
func (m *member) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	m.mu.Lock()
	if m.claims == nil {
		m.claims = map[string]map[int32]bool{}
	}
	if m.claims[c.Topic()] == nil {
		m.claims[c.Topic()] = map[int32]bool{}
	}
	m.claims[c.Topic()][c.Partition()] = true
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.claims[c.Topic()], c.Partition())
		m.mu.Unlock()
	}()
	for {
		select {
		case msg, ok := <-c.Messages():
			if !ok {
				return nil
			}
			m.recs <- rec{msg.Partition, msg.Offset, string(msg.Key), string(msg.Value), nil}
			s.MarkMessage(msg, "")
			s.Commit()
		case <-s.Context().Done():
			return nil
		}
	}
}
func (m *member) partitions(topic string) []int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ps []int32
	for p := range m.claims[topic] {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	return ps
}

type runningMember struct {
	*member
	group  sarama.ConsumerGroup
	cancel context.CancelFunc
	done   chan error
}

func startMember(name, groupID string, topics []string, recs chan rec) (*runningMember, error) {
	cfg := config()
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	cfg.Consumer.Group.Session.Timeout = 10 * time.Second
	cfg.Consumer.Group.Heartbeat.Interval = 500 * time.Millisecond
	cfg.Consumer.Group.Rebalance.Timeout = 10 * time.Second
	cfg.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyRange()}
	g, err := sarama.NewConsumerGroup(seeds, groupID, cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	rm := &runningMember{member: &member{name: name, recs: recs}, group: g, cancel: cancel, done: make(chan error, 1)}
	go func() {
		var errs error
		go func() {
			for e := range g.Errors() {
				log.Printf("%s: group error: %v", name, e)
			}
		}()
		for ctx.Err() == nil {
			if err := g.Consume(ctx, topics, rm.member); err != nil {
				if errors.Is(err, sarama.ErrClosedConsumerGroup) {
					break
				}
				errs = errors.Join(errs, err)
				time.Sleep(200 * time.Millisecond)
			}
		}
		rm.done <- errs
	}()
	return rm, nil
}

func (rm *runningMember) stop() error {
	rm.cancel()
	var err error
	select {
	case err = <-rm.done:
	case <-time.After(20 * time.Second):
		err = errors.New("consume loop did not stop")
	}
	return errors.Join(err, rm.group.Close())
}

func waitFor(ctx context.Context, what string, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

func produceN(topic string, n int, prefix string) error {
	cfg := config()
	cfg.Producer.Partitioner = sarama.NewRoundRobinPartitioner
	prod, err := sarama.NewSyncProducer(seeds, cfg)
	if err != nil {
		return err
	}
	defer prod.Close()
	var msgs []*sarama.ProducerMessage
	for i := range n {
		msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(fmt.Sprintf("%s%d", prefix, i))})
	}
	return prod.SendMessages(msgs)
}

func collect(ctx context.Context, recs chan rec, want int, settle time.Duration) (map[string]int, error) {
	got := map[string]int{}
	total := 0
	var settleC <-chan time.Time
	for {
		select {
		case r := <-recs:
			got[r.value]++
			total++
			if total == want {
				settleC = time.After(settle)
			}
		case <-settleC:
			return got, nil
		case <-ctx.Done():
			return got, fmt.Errorf("received %d of %d records: %w", total, want, ctx.Err())
		}
	}
}

func groupRebalanceCommitResume(ctx context.Context) error {
	topic, group := uniq("grp"), uniq("grp-g")
	if err := createTopic(topic, 4, nil); err != nil {
		return err
	}
	recs := make(chan rec, 4096)
	a, err := startMember("a", group, []string{topic}, recs)
	if err != nil {
		return err
	}
	if err := waitFor(ctx, "member a to own 4 partitions", func() bool { return len(a.partitions(topic)) == 4 }); err != nil {
		a.stop()
		return err
	}
	if err := produceN(topic, 40, "first-"); err != nil {
		a.stop()
		return err
	}
	if _, err := collect(ctx, recs, 40, 500*time.Millisecond); err != nil {
		a.stop()
		return fmt.Errorf("before rebalance: %w", err)
	}
	b, err := startMember("b", group, []string{topic}, recs)
	if err != nil {
		a.stop()
		return err
	}
	rebalanced := func() bool {
		pa, pb := a.partitions(topic), b.partitions(topic)
		all := append(pa, pb...)
		sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
		return len(pa) == 2 && len(pb) == 2 && fmt.Sprint(all) == "[0 1 2 3]"
	}
	if err := waitFor(ctx, "a and b to split the partitions", rebalanced); err != nil {
		a.stop()
		b.stop()
		return fmt.Errorf("%w (a %v, b %v)", err, a.partitions(topic), b.partitions(topic))
	}
	if err := produceN(topic, 40, "second-"); err != nil {
		a.stop()
		b.stop()
		return err
	}
	got, err := collect(ctx, recs, 40, time.Second)
	if err != nil {
		a.stop()
		b.stop()
		return fmt.Errorf("after rebalance: %w", err)
	}
	for v, c := range got {
		if !strings.HasPrefix(v, "second-") || c != 1 {
			a.stop()
			b.stop()
			return fmt.Errorf("after rebalance got %q %d times", v, c)
		}
	}
	if err := errors.Join(a.stop(), b.stop()); err != nil {
		return fmt.Errorf("stopping members: %w", err)
	}
	adm, err := admin()
	if err != nil {
		return err
	}
	defer adm.Close()
	offs, err := adm.ListConsumerGroupOffsets(group, map[string][]int32{topic: {0, 1, 2, 3}})
	if err != nil {
		return fmt.Errorf("ListConsumerGroupOffsets: %w", err)
	}
	for p := int32(0); p < 4; p++ {
		blk := offs.GetBlock(topic, p)
		if blk == nil || blk.Offset != 20 {
			return fmt.Errorf("committed offset of partition %d: %+v, want 20", p, blk)
		}
	}
	// Restart: a new member resumes at the committed offsets.
	if err := produceN(topic, 12, "third-"); err != nil {
		return err
	}
	c, err := startMember("c", group, []string{topic}, recs)
	if err != nil {
		return err
	}
	got, err = collect(ctx, recs, 12, 2*time.Second)
	if serr := c.stop(); err == nil && serr != nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("after restart: %w", err)
	}
	if len(got) != 12 {
		return fmt.Errorf("after restart got %d distinct records, want the 12 new ones: %v", len(got), got)
	}
	for v, n := range got {
		if !strings.HasPrefix(v, "third-") || n != 1 {
			return fmt.Errorf("after restart got %q %d times (expected only third-*)", v, n)
		}
	}
	return nil
}

// ---- transactions ------------------------------------------------------------------------

func txnProducer(id string) (sarama.SyncProducer, error) {
	cfg := config()
	cfg.Producer.Idempotent = true
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Transaction.ID = id
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	return sarama.NewSyncProducer(seeds, cfg)
}

func sendTxn(p sarama.SyncProducer, topic string, values ...string) error {
	for _, v := range values {
		if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(v)}); err != nil {
			return fmt.Errorf("send %s: %w", v, err)
		}
	}
	return nil
}

func readCommittedConfig() *sarama.Config {
	cfg := config()
	cfg.Consumer.IsolationLevel = sarama.ReadCommitted
	return cfg
}

func values(rs []rec) []string {
	var vs []string
	for _, r := range rs {
		vs = append(vs, r.value)
	}
	return vs
}

func txnCommitAbortReadCommitted(ctx context.Context) error {
	topic := uniq("txn")
	if err := createTopic(topic, 1, nil); err != nil {
		return err
	}
	p, err := txnProducer(uniq("txn-id"))
	if err != nil {
		return err
	}
	defer p.Close()
	steps := []struct {
		vals   []string
		commit bool
	}{{[]string{"c1", "c2", "c3"}, true}, {[]string{"a1", "a2"}, false}, {[]string{"c4", "c5"}, true}, {[]string{"a3"}, false}}
	for _, st := range steps {
		if err := p.BeginTxn(); err != nil {
			return fmt.Errorf("BeginTxn: %w", err)
		}
		if err := sendTxn(p, topic, st.vals...); err != nil {
			return err
		}
		if st.commit {
			err = p.CommitTxn()
		} else {
			err = p.AbortTxn()
		}
		if err != nil {
			return fmt.Errorf("end txn (commit=%v): %w (status %v)", st.commit, err, p.TxnStatus())
		}
	}
	// An open transaction holds read_committed consumers back at its first offset.
	if err := p.BeginTxn(); err != nil {
		return fmt.Errorf("BeginTxn: %w", err)
	}
	if err := sendTxn(p, topic, "open1"); err != nil {
		return err
	}
	got, err := consumeAll(ctx, readCommittedConfig(), topic, 5, 2*time.Second)
	if err != nil {
		return fmt.Errorf("read_committed: %w", err)
	}
	if fmt.Sprint(values(got)) != "[c1 c2 c3 c4 c5]" {
		return fmt.Errorf("read_committed with an open txn got %v, want [c1 c2 c3 c4 c5]", values(got))
	}
	if err := p.CommitTxn(); err != nil {
		return fmt.Errorf("CommitTxn: %w", err)
	}
	got, err = consumeAll(ctx, readCommittedConfig(), topic, 6, time.Second)
	if err != nil {
		return fmt.Errorf("read_committed: %w", err)
	}
	if fmt.Sprint(values(got)) != "[c1 c2 c3 c4 c5 open1]" {
		return fmt.Errorf("read_committed got %v", values(got))
	}
	got, err = consumeAll(ctx, config(), topic, 9, time.Second)
	if err != nil {
		return fmt.Errorf("read_uncommitted: %w", err)
	}
	if fmt.Sprint(values(got)) != "[c1 c2 c3 a1 a2 c4 c5 a3 open1]" {
		return fmt.Errorf("read_uncommitted got %v", values(got))
	}
	return nil
}

// txnAddOffsetsToTxn: consume-transform-produce with AddMessageToTxn and AddOffsetsToTxn; the
// group's offsets move with committed transactions only.
func txnAddOffsetsToTxn(ctx context.Context) error {
	in, out, group := uniq("txn-in"), uniq("txn-out"), uniq("txn-g")
	if err := createTopic(in, 1, nil); err != nil {
		return err
	}
	if err := createTopic(out, 1, nil); err != nil {
		return err
	}
	if err := produceN(in, 6, "in"); err != nil {
		return err
	}
	cons, err := sarama.NewConsumer(seeds, config())
	if err != nil {
		return err
	}
	defer cons.Close()
	pc, err := cons.ConsumePartition(in, 0, sarama.OffsetOldest)
	if err != nil {
		return err
	}
	defer pc.Close()
	var msgs []*sarama.ConsumerMessage
	for len(msgs) < 6 {
		select {
		case m := <-pc.Messages():
			msgs = append(msgs, m)
		case e := <-pc.Errors():
			return e
		case <-ctx.Done():
			return fmt.Errorf("read %d of 6 input records: %w", len(msgs), ctx.Err())
		}
	}
	p, err := txnProducer(uniq("ctp-id"))
	if err != nil {
		return err
	}
	defer p.Close()
	// txn 1: in0..in2 -> out, offsets through AddMessageToTxn; committed.
	if err := p.BeginTxn(); err != nil {
		return err
	}
	for _, m := range msgs[:3] {
		if err := sendTxn(p, out, "out-"+string(m.Value)); err != nil {
			return err
		}
		if err := p.AddMessageToTxn(m, group, nil); err != nil {
			return fmt.Errorf("AddMessageToTxn: %w", err)
		}
	}
	if err := p.CommitTxn(); err != nil {
		return fmt.Errorf("CommitTxn 1: %w", err)
	}
	// txn 2: in3..in5 with AddOffsetsToTxn; aborted, so the group stays at 3.
	if err := p.BeginTxn(); err != nil {
		return err
	}
	if err := sendTxn(p, out, "out-aborted"); err != nil {
		return err
	}
	if err := p.AddOffsetsToTxn(map[string][]*sarama.PartitionOffsetMetadata{in: {{Partition: 0, Offset: 6}}}, group); err != nil {
		return fmt.Errorf("AddOffsetsToTxn: %w", err)
	}
	if err := p.AbortTxn(); err != nil {
		return fmt.Errorf("AbortTxn: %w", err)
	}
	adm, err := admin()
	if err != nil {
		return err
	}
	defer adm.Close()
	offsetOf := func() (int64, error) {
		o, err := adm.ListConsumerGroupOffsets(group, map[string][]int32{in: {0}})
		if err != nil {
			return 0, err
		}
		b := o.GetBlock(in, 0)
		if b == nil {
			return 0, errors.New("no block")
		}
		return b.Offset, nil
	}
	// EndTxn returns once the coordinator has logged PrepareCommit/PrepareAbort; the markers
	// (and the offsets they make visible) follow, so the check polls for a few seconds.
	waitOffset := func(want int64) error {
		var off int64
		var err error
		for range 50 {
			if off, err = offsetOf(); err == nil && off == want {
				return nil
			}
			time.Sleep(100 * time.Millisecond)
		}
		return fmt.Errorf("group offset %d (%v), want %d", off, err, want)
	}
	if err := waitOffset(3); err != nil {
		return fmt.Errorf("after commit+abort: %w", err)
	}
	// txn 3: in3..in5 with AddOffsetsToTxn; committed.
	if err := p.BeginTxn(); err != nil {
		return err
	}
	for _, m := range msgs[3:] {
		if err := sendTxn(p, out, "out-"+string(m.Value)); err != nil {
			return err
		}
	}
	if err := p.AddOffsetsToTxn(map[string][]*sarama.PartitionOffsetMetadata{in: {{Partition: 0, Offset: 6}}}, group); err != nil {
		return fmt.Errorf("AddOffsetsToTxn: %w", err)
	}
	if err := p.CommitTxn(); err != nil {
		return fmt.Errorf("CommitTxn 3: %w", err)
	}
	if err := waitOffset(6); err != nil {
		return fmt.Errorf("after the last commit: %w", err)
	}
	got, err := consumeAll(ctx, readCommittedConfig(), out, 6, time.Second)
	if err != nil {
		return err
	}
	if fmt.Sprint(values(got)) != "[out-in0 out-in1 out-in2 out-in3 out-in4 out-in5]" {
		return fmt.Errorf("read_committed output %v", values(got))
	}
	return nil
}

// ---- admin -------------------------------------------------------------------------------

func adminTopics(ctx context.Context) error {
	adm, err := admin()
	if err != nil {
		return err
	}
	defer adm.Close()
	topic := uniq("adm-topic")
	detail := &sarama.TopicDetail{NumPartitions: 3, ReplicationFactor: rf,
		ConfigEntries: map[string]*string{"retention.ms": str("3600000")}}
	if err := adm.CreateTopic(topic, detail, true); err != nil {
		return fmt.Errorf("CreateTopic validateOnly: %w", err)
	}
	topics, err := adm.ListTopics()
	if err != nil {
		return fmt.Errorf("ListTopics: %w", err)
	}
	if _, ok := topics[topic]; ok {
		return errors.New("validateOnly CreateTopic created the topic")
	}
	if err := adm.CreateTopic(topic, detail, false); err != nil {
		return fmt.Errorf("CreateTopic: %w", err)
	}
	if err := waitTopic(topic, 3); err != nil {
		return err
	}
	err = adm.CreateTopic(topic, detail, false)
	var te *sarama.TopicError
	if !errors.As(err, &te) || !errors.Is(te.Err, sarama.ErrTopicAlreadyExists) {
		return fmt.Errorf("second CreateTopic: %v, want TOPIC_ALREADY_EXISTS", err)
	}
	topics, err = adm.ListTopics()
	if err != nil {
		return fmt.Errorf("ListTopics: %w", err)
	}
	d, ok := topics[topic]
	if !ok {
		return fmt.Errorf("ListTopics misses %s", topic)
	}
	if d.NumPartitions != 3 || d.ReplicationFactor != rf {
		return fmt.Errorf("ListTopics: %d partitions rf %d", d.NumPartitions, d.ReplicationFactor)
	}
	if v := d.ConfigEntries["retention.ms"]; v == nil || *v != "3600000" {
		return fmt.Errorf("ListTopics config retention.ms = %v", v)
	}
	md, err := adm.DescribeTopics([]string{topic, uniq("missing")})
	if err != nil {
		return fmt.Errorf("DescribeTopics: %w", err)
	}
	if len(md) != 2 {
		return fmt.Errorf("DescribeTopics returned %d topics", len(md))
	}
	for _, t := range md {
		if t.Name == topic {
			if !errors.Is(t.Err, sarama.ErrNoError) || len(t.Partitions) != 3 || t.Uuid == [16]byte{} {
				return fmt.Errorf("DescribeTopics %s: err %v, %d partitions, id %v", t.Name, t.Err, len(t.Partitions), t.Uuid)
			}
			for _, p := range t.Partitions {
				if p.Leader < 0 || len(p.Replicas) != int(rf) || len(p.Isr) != int(rf) {
					return fmt.Errorf("partition %d: leader %d replicas %v isr %v", p.ID, p.Leader, p.Replicas, p.Isr)
				}
			}
		} else if !errors.Is(t.Err, sarama.ErrUnknownTopicOrPartition) {
			return fmt.Errorf("DescribeTopics of a missing topic: %v", t.Err)
		}
	}
	return nil
}

func configValue(entries []sarama.ConfigEntry, name string) (sarama.ConfigEntry, bool) {
	for _, e := range entries {
		if e.Name == name {
			return e, true
		}
	}
	return sarama.ConfigEntry{}, false
}

func adminConfigs(ctx context.Context) error {
	topic := uniq("adm-cfg")
	if err := createTopic(topic, 1, map[string]*string{"retention.ms": str("3600000")}); err != nil {
		return err
	}
	adm, err := admin()
	if err != nil {
		return err
	}
	defer adm.Close()
	res := sarama.ConfigResource{Type: sarama.TopicResource, Name: topic}
	entries, err := adm.DescribeConfig(res)
	if err != nil {
		return fmt.Errorf("DescribeConfig: %w", err)
	}
	if e, ok := configValue(entries, "retention.ms"); !ok || e.Value != "3600000" || e.Source != sarama.SourceTopic || e.Default {
		return fmt.Errorf("retention.ms: %+v", e)
	}
	if e, ok := configValue(entries, "cleanup.policy"); !ok || e.Value != "delete" || e.Source != sarama.SourceDefault {
		return fmt.Errorf("cleanup.policy: %+v", e)
	}
	// AlterConfigs replaces the topic's whole config: retention.ms goes back to its default.
	if err := adm.AlterConfig(sarama.TopicResource, topic, map[string]*string{"segment.ms": str("7200000")}, false); err != nil {
		return fmt.Errorf("AlterConfig: %w", err)
	}
	entries, err = adm.DescribeConfig(res)
	if err != nil {
		return err
	}
	if e, _ := configValue(entries, "segment.ms"); e.Value != "7200000" || e.Source != sarama.SourceTopic {
		return fmt.Errorf("after AlterConfig segment.ms: %+v", e)
	}
	if e, _ := configValue(entries, "retention.ms"); e.Source == sarama.SourceTopic {
		return fmt.Errorf("after AlterConfig retention.ms still set: %+v", e)
	}
	err = adm.AlterConfig(sarama.TopicResource, topic, map[string]*string{"no.such.config": str("1")}, false)
	if err == nil {
		return errors.New("AlterConfig with an unknown key succeeded")
	}
	if err := adm.IncrementalAlterConfig(sarama.TopicResource, topic, map[string]sarama.IncrementalAlterConfigsEntry{
		"cleanup.policy": {Operation: sarama.IncrementalAlterConfigsOperationSet, Value: str("compact")},
		"segment.ms":     {Operation: sarama.IncrementalAlterConfigsOperationDelete},
		"retention.ms":   {Operation: sarama.IncrementalAlterConfigsOperationSet, Value: str("60000")},
	}, false); err != nil {
		return fmt.Errorf("IncrementalAlterConfig: %w", err)
	}
	entries, err = adm.DescribeConfig(res)
	if err != nil {
		return err
	}
	if e, _ := configValue(entries, "cleanup.policy"); e.Value != "compact" {
		return fmt.Errorf("after IncrementalAlterConfig cleanup.policy: %+v", e)
	}
	if e, _ := configValue(entries, "retention.ms"); e.Value != "60000" {
		return fmt.Errorf("after IncrementalAlterConfig retention.ms: %+v", e)
	}
	if e, _ := configValue(entries, "segment.ms"); e.Source == sarama.SourceTopic {
		return fmt.Errorf("after IncrementalAlterConfig DELETE segment.ms still set: %+v", e)
	}
	// validateOnly changes nothing.
	if err := adm.IncrementalAlterConfig(sarama.TopicResource, topic, map[string]sarama.IncrementalAlterConfigsEntry{
		"retention.ms": {Operation: sarama.IncrementalAlterConfigsOperationSet, Value: str("1000")}}, true); err != nil {
		return fmt.Errorf("IncrementalAlterConfig validateOnly: %w", err)
	}
	entries, _ = adm.DescribeConfig(res)
	if e, _ := configValue(entries, "retention.ms"); e.Value != "60000" {
		return fmt.Errorf("validateOnly changed retention.ms: %+v", e)
	}
	// The broker's own configs.
	brokers, _, err := adm.DescribeCluster()
	if err != nil || len(brokers) == 0 {
		return fmt.Errorf("DescribeCluster: %v", err)
	}
	bentries, err := adm.DescribeConfig(sarama.ConfigResource{Type: sarama.BrokerResource, Name: fmt.Sprint(brokers[0].ID())})
	if err != nil {
		return fmt.Errorf("DescribeConfig broker: %w", err)
	}
	if e, ok := configValue(bentries, "log.retention.hours"); !ok || e.Value == "" {
		return fmt.Errorf("broker log.retention.hours: %+v", e)
	}
	if e, ok := configValue(bentries, "num.partitions"); !ok || e.Value != "1" {
		return fmt.Errorf("broker num.partitions: %+v", e)
	}
	return nil
}

func adminCreatePartitions(ctx context.Context) error {
	topic := uniq("adm-parts")
	if err := createTopic(topic, 1, nil); err != nil {
		return err
	}
	adm, err := admin()
	if err != nil {
		return err
	}
	defer adm.Close()
	if err := adm.CreatePartitions(topic, 4, nil, true); err != nil {
		return fmt.Errorf("CreatePartitions validateOnly: %w", err)
	}
	if err := adm.CreatePartitions(topic, 3, nil, false); err != nil {
		return fmt.Errorf("CreatePartitions: %w", err)
	}
	if err := waitTopic(topic, 3); err != nil {
		return err
	}
	md, err := adm.DescribeTopics([]string{topic})
	if err != nil || len(md) != 1 || len(md[0].Partitions) != 3 {
		return fmt.Errorf("DescribeTopics after CreatePartitions: %v %+v", err, md)
	}
	err = adm.CreatePartitions(topic, 2, nil, false)
	if !errors.Is(err, sarama.ErrInvalidPartitions) {
		return fmt.Errorf("shrinking to 2 partitions: %v, want INVALID_PARTITIONS", err)
	}
	err = adm.CreatePartitions(uniq("missing"), 2, nil, false)
	if !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
		return fmt.Errorf("CreatePartitions of a missing topic: %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
	}
	// The new partitions take records.
	if err := produceN(topic, 6, "p"); err != nil {
		return err
	}
	cl, err := sarama.NewClient(seeds, config())
	if err != nil {
		return err
	}
	defer cl.Close()
	for p := int32(0); p < 3; p++ {
		off, err := cl.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil || off != 2 {
			return fmt.Errorf("partition %d end offset %d (%v), want 2", p, off, err)
		}
	}
	return nil
}

func adminDeleteRecords(ctx context.Context) error {
	topic := uniq("adm-delrec")
	if err := createTopic(topic, 2, nil); err != nil {
		return err
	}
	if err := produceN(topic, 20, "r"); err != nil {
		return err
	}
	adm, err := admin()
	if err != nil {
		return err
	}
	defer adm.Close()
	if err := adm.DeleteRecords(topic, map[int32]int64{0: 4, 1: -1}); err != nil {
		return fmt.Errorf("DeleteRecords: %w", err)
	}
	cl, err := sarama.NewClient(seeds, config())
	if err != nil {
		return err
	}
	defer cl.Close()
	if off, err := cl.GetOffset(topic, 0, sarama.OffsetOldest); err != nil || off != 4 {
		return fmt.Errorf("partition 0 start offset %d (%v), want 4", off, err)
	}
	if off, err := cl.GetOffset(topic, 1, sarama.OffsetOldest); err != nil || off != 10 {
		return fmt.Errorf("partition 1 start offset %d (%v), want 10 (-1 = high watermark)", off, err)
	}
	if err := adm.DeleteRecords(topic, map[int32]int64{0: 11}); err == nil {
		return errors.New("DeleteRecords beyond the high watermark succeeded")
	}
	got, err := consumeAll(ctx, config(), topic, 6, time.Second)
	if err != nil {
		return err
	}
	if len(got) != 6 || got[0].offset != 4 {
		return fmt.Errorf("after DeleteRecords consumed %d records from offset %d", len(got), got[0].offset)
	}
	return nil
}

func adminGroups(ctx context.Context) error {
	topic, group := uniq("adm-grp"), uniq("adm-grp-g")
	if err := createTopic(topic, 2, nil); err != nil {
		return err
	}
	if err := produceN(topic, 10, "g"); err != nil {
		return err
	}
	recs := make(chan rec, 1024)
	m, err := startMember("m", group, []string{topic}, recs)
	if err != nil {
		return err
	}
	stopped := false
	defer func() {
		if !stopped {
			m.stop()
		}
	}()
	if _, err := collect(ctx, recs, 10, 500*time.Millisecond); err != nil {
		return err
	}
	adm, err := admin()
	if err != nil {
		return err
	}
	defer adm.Close()
	groups, err := adm.ListConsumerGroups()
	if err != nil {
		return fmt.Errorf("ListConsumerGroups: %w", err)
	}
	if groups[group] != "consumer" {
		return fmt.Errorf("ListConsumerGroups: %s has protocol type %q", group, groups[group])
	}
	descs, err := adm.DescribeConsumerGroups([]string{group})
	if err != nil || len(descs) != 1 {
		return fmt.Errorf("DescribeConsumerGroups: %v %v", err, descs)
	}
	d := descs[0]
	if d.State != "Stable" || d.ProtocolType != "consumer" || d.Protocol != "range" || len(d.Members) != 1 {
		return fmt.Errorf("DescribeConsumerGroups: state %s type %s protocol %s %d members", d.State, d.ProtocolType, d.Protocol, len(d.Members))
	}
	for _, md := range d.Members {
		a, err := md.GetMemberAssignment()
		if err != nil || len(a.Topics[topic]) != 2 {
			return fmt.Errorf("member assignment %+v (%v)", a, err)
		}
		if md.ClientId != "kbroker-compat-sarama" {
			return fmt.Errorf("member client id %q", md.ClientId)
		}
	}
	// The member commits asynchronously (auto-commit): wait, bounded, for all 10 to be committed.
	deadline := time.Now().Add(15 * time.Second)
	for {
		offs, err := adm.ListConsumerGroupOffsets(group, nil)
		if err != nil {
			return fmt.Errorf("ListConsumerGroupOffsets: %w", err)
		}
		b0, b1 := offs.GetBlock(topic, 0), offs.GetBlock(topic, 1)
		if b0 != nil && b1 != nil && b0.Offset+b1.Offset == 10 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("ListConsumerGroupOffsets (all): %+v %+v", b0, b1)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The group is subscribed to the topic: Kafka refuses to delete its offsets.
	if err := adm.DeleteConsumerGroupOffset(group, topic, 0); !errors.Is(err, sarama.ErrGroupSubscribedToTopic) {
		return fmt.Errorf("DeleteConsumerGroupOffset of an active subscription: %v, want GROUP_SUBSCRIBED_TO_TOPIC", err)
	}
	if err := adm.DeleteConsumerGroup(group); !errors.Is(err, sarama.ErrNonEmptyGroup) {
		return fmt.Errorf("DeleteConsumerGroup of an active group: %v, want NON_EMPTY_GROUP", err)
	}
	stopped = true
	if err := m.stop(); err != nil {
		return err
	}
	if err := adm.DeleteConsumerGroupOffset(group, topic, 0); err != nil {
		return fmt.Errorf("DeleteConsumerGroupOffset: %w", err)
	}
	offs, err := adm.ListConsumerGroupOffsets(group, map[string][]int32{topic: {0, 1}})
	if err != nil {
		return err
	}
	if b0, b1 := offs.GetBlock(topic, 0), offs.GetBlock(topic, 1); b0 == nil || b0.Offset != -1 || b1 == nil || b1.Offset != 5 {
		return fmt.Errorf("after DeleteConsumerGroupOffset: p0 %+v p1 %+v", b0, b1)
	}
	descs, err = adm.DescribeConsumerGroups([]string{group})
	if err != nil || len(descs) != 1 || descs[0].State != "Empty" {
		return fmt.Errorf("DescribeConsumerGroups of the empty group: %v %+v", err, descs)
	}
	if err := adm.DeleteConsumerGroup(group); err != nil {
		return fmt.Errorf("DeleteConsumerGroup: %w", err)
	}
	groups, err = adm.ListConsumerGroups()
	if err != nil {
		return err
	}
	if _, ok := groups[group]; ok {
		return fmt.Errorf("ListConsumerGroups still lists %s", group)
	}
	descs, err = adm.DescribeConsumerGroups([]string{group})
	if err != nil || len(descs) != 1 || descs[0].State != "Dead" {
		return fmt.Errorf("DescribeConsumerGroups after delete: %v %+v", err, descs)
	}
	if err := adm.DeleteConsumerGroup(group); !errors.Is(err, sarama.ErrGroupIDNotFound) {
		return fmt.Errorf("second DeleteConsumerGroup: %v, want GROUP_ID_NOT_FOUND", err)
	}
	return nil
}

func adminDeleteTopic(ctx context.Context) error {
	topic := uniq("adm-del")
	if err := createTopic(topic, 2, nil); err != nil {
		return err
	}
	if err := produceN(topic, 4, "d"); err != nil {
		return err
	}
	adm, err := admin()
	if err != nil {
		return err
	}
	defer adm.Close()
	if err := adm.DeleteTopic(topic); err != nil {
		return fmt.Errorf("DeleteTopic: %w", err)
	}
	var lerr error
	if err := waitFor(ctx, "the topic to leave ListTopics", func() bool {
		ts, err := adm.ListTopics()
		_, ok := ts[topic]
		lerr = err
		return err != nil || !ok
	}); err != nil {
		return err
	}
	if lerr != nil {
		return fmt.Errorf("ListTopics: %w", lerr)
	}
	if err := adm.DeleteTopic(topic); !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
		return fmt.Errorf("second DeleteTopic: %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
	}
	// Re-creating the name gives an empty topic.
	if err := createTopic(topic, 1, nil); err != nil {
		return fmt.Errorf("re-create: %w", err)
	}
	cl, err := sarama.NewClient(seeds, config())
	if err != nil {
		return err
	}
	defer cl.Close()
	if off, err := cl.GetOffset(topic, 0, sarama.OffsetNewest); err != nil || off != 0 {
		return fmt.Errorf("re-created topic end offset %d (%v), want 0", off, err)
	}
	return adm.DeleteTopic(topic)
}

// ---- more ---------------------------------------------------------------------------------

func produceCompression(ctx context.Context) error {
	for _, codec := range []sarama.CompressionCodec{sarama.CompressionGZIP, sarama.CompressionSnappy,
		sarama.CompressionLZ4, sarama.CompressionZSTD} {
		topic := uniq("codec-" + codec.String())
		if err := createTopic(topic, 1, nil); err != nil {
			return err
		}
		cfg := config()
		cfg.Producer.Compression = codec
		cfg.Producer.Flush.Messages = 25
		prod, err := sarama.NewAsyncProducer(seeds, cfg)
		if err != nil {
			return err
		}
		for i := range 50 {
			prod.Input() <- &sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(strings.Repeat(fmt.Sprint(i), 100))}
		}
		var perr error
		for range 50 {
			select {
			case <-prod.Successes():
			case e := <-prod.Errors():
				perr = errors.Join(perr, e.Err)
			case <-ctx.Done():
				prod.AsyncClose()
				return ctx.Err()
			}
		}
		prod.Close()
		if perr != nil {
			return fmt.Errorf("%s: %w", codec, perr)
		}
		got, err := consumeAll(ctx, config(), topic, 50, 300*time.Millisecond)
		if err != nil {
			return fmt.Errorf("%s: %w", codec, err)
		}
		for i, r := range got {
			if r.value != strings.Repeat(fmt.Sprint(i), 100) || r.offset != int64(i) {
				return fmt.Errorf("%s: record %d at offset %d", codec, i, r.offset)
			}
		}
	}
	return nil
}

func groupCooperativeStickyStatic(ctx context.Context) error {
	topic, group := uniq("coop"), uniq("coop-g")
	if err := createTopic(topic, 4, nil); err != nil {
		return err
	}
	start := func(name string, recs chan rec) (*runningMember, error) {
		cfg := config()
		cfg.Consumer.Offsets.AutoCommit.Enable = false
		cfg.Consumer.Group.Session.Timeout = 30 * time.Second
		cfg.Consumer.Group.Heartbeat.Interval = 500 * time.Millisecond
		cfg.Consumer.Group.InstanceId = group + "-" + name
		cfg.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyCooperativeSticky()}
		g, err := sarama.NewConsumerGroup(seeds, group, cfg)
		if err != nil {
			return nil, err
		}
		cctx, cancel := context.WithCancel(context.Background())
		rm := &runningMember{member: &member{name: name, recs: recs}, group: g, cancel: cancel, done: make(chan error, 1)}
		go func() {
			var errs error
			for cctx.Err() == nil {
				if err := g.Consume(cctx, []string{topic}, rm.member); err != nil {
					if errors.Is(err, sarama.ErrClosedConsumerGroup) {
						break
					}
					errs = errors.Join(errs, err)
					time.Sleep(200 * time.Millisecond)
				}
			}
			rm.done <- errs
		}()
		return rm, nil
	}
	recs := make(chan rec, 4096)
	a, err := start("a", recs)
	if err != nil {
		return err
	}
	defer a.stop()
	if err := waitFor(ctx, "a to own 4 partitions", func() bool { return len(a.partitions(topic)) == 4 }); err != nil {
		return err
	}
	b, err := start("b", recs)
	if err != nil {
		return err
	}
	bStopped := false
	defer func() {
		if !bStopped {
			b.stop()
		}
	}()
	if err := waitFor(ctx, "a and b to own 2 partitions each", func() bool {
		return len(a.partitions(topic)) == 2 && len(b.partitions(topic)) == 2
	}); err != nil {
		return fmt.Errorf("%w (a %v b %v)", err, a.partitions(topic), b.partitions(topic))
	}
	adm, err := admin()
	if err != nil {
		return err
	}
	defer adm.Close()
	descs, err := adm.DescribeConsumerGroups([]string{group})
	if err != nil || len(descs) != 1 || len(descs[0].Members) != 2 || descs[0].Protocol != "cooperative-sticky" {
		return fmt.Errorf("DescribeConsumerGroups: %v %+v", err, descs)
	}
	for _, m := range descs[0].Members {
		if m.GroupInstanceId == nil || !strings.HasPrefix(*m.GroupInstanceId, group) {
			return fmt.Errorf("member without its instance id: %+v", m)
		}
	}
	// A static member that closes stays in the group (no LeaveGroup); the admin removes it.
	bStopped = true
	if err := b.stop(); err != nil {
		return err
	}
	descs, _ = adm.DescribeConsumerGroups([]string{group})
	if len(descs) != 1 || len(descs[0].Members) != 2 {
		return fmt.Errorf("after b closed: %+v", descs)
	}
	resp, err := adm.RemoveMemberFromConsumerGroup(group, []string{group + "-b"})
	if err != nil {
		return fmt.Errorf("RemoveMemberFromConsumerGroup: %w", err)
	}
	for _, m := range resp.Members {
		if !errors.Is(m.Err, sarama.ErrNoError) {
			return fmt.Errorf("RemoveMemberFromConsumerGroup member %s: %v", m.GroupInstanceId, m.Err)
		}
	}
	if err := waitFor(ctx, "a to take all 4 partitions back", func() bool { return len(a.partitions(topic)) == 4 }); err != nil {
		return err
	}
	resp, err = adm.RemoveMemberFromConsumerGroup(group, []string{group + "-nobody"})
	if err != nil {
		return fmt.Errorf("RemoveMemberFromConsumerGroup unknown: %w", err)
	}
	if len(resp.Members) != 1 || !errors.Is(resp.Members[0].Err, sarama.ErrUnknownMemberId) {
		return fmt.Errorf("removing an unknown instance: %+v", resp.Members)
	}
	return nil
}

func adminClusterLogDirs(ctx context.Context) error {
	topic := uniq("logdirs")
	if err := createTopic(topic, 1, nil); err != nil {
		return err
	}
	if err := produceN(topic, 10, "l"); err != nil {
		return err
	}
	adm, err := admin()
	if err != nil {
		return err
	}
	defer adm.Close()
	brokers, ctl, err := adm.DescribeCluster()
	if err != nil || len(brokers) != nodes {
		return fmt.Errorf("DescribeCluster: %v %d brokers", err, len(brokers))
	}
	c, err := adm.Controller()
	if err != nil || c.ID() != ctl {
		return fmt.Errorf("Controller: %v (%v), DescribeCluster says %d", c, err, ctl)
	}
	dirs, err := adm.DescribeLogDirs([]int32{brokers[0].ID()})
	if err != nil {
		return fmt.Errorf("DescribeLogDirs: %w", err)
	}
	found := false
	for _, d := range dirs[brokers[0].ID()] {
		if !errors.Is(d.ErrorCode, sarama.ErrNoError) || d.Path == "" {
			return fmt.Errorf("log dir %+v", d)
		}
		for _, t := range d.Topics {
			if t.Topic == topic {
				found = len(t.Partitions) == 1 && t.Partitions[0].Size > 0
			}
		}
	}
	if !found {
		return fmt.Errorf("DescribeLogDirs has no non-empty %s: %+v", topic, dirs)
	}
	return nil
}

func adminListOffsets(ctx context.Context) error {
	topic := uniq("lo")
	if err := createTopic(topic, 2, nil); err != nil {
		return err
	}
	before := time.Now().Add(-time.Second).UnixMilli()
	if err := produceN(topic, 8, "o"); err != nil {
		return err
	}
	adm, err := admin()
	if err != nil {
		return err
	}
	defer adm.Close()
	res, err := adm.ListOffsets(map[string]map[int32]int64{topic: {0: sarama.OffsetNewest, 1: sarama.OffsetOldest}}, nil)
	if err != nil {
		return fmt.Errorf("ListOffsets: %w", err)
	}
	if r := res[topic][0]; r == nil || !isOK(r.Err) || r.Offset != 4 {
		return fmt.Errorf("newest of partition 0: %+v", r)
	}
	if r := res[topic][1]; r == nil || !isOK(r.Err) || r.Offset != 0 {
		return fmt.Errorf("oldest of partition 1: %+v", r)
	}
	res, err = adm.ListOffsets(map[string]map[int32]int64{topic: {0: before, 1: time.Now().Add(time.Hour).UnixMilli()}},
		&sarama.ListOffsetsOptions{IsolationLevel: sarama.ReadCommitted})
	if err != nil {
		return fmt.Errorf("ListOffsets by time: %w", err)
	}
	if r := res[topic][0]; r == nil || !isOK(r.Err) || r.Offset != 0 || r.Timestamp < before {
		return fmt.Errorf("by timestamp, partition 0: %+v", r)
	}
	if r := res[topic][1]; r == nil || !isOK(r.Err) || r.Offset != -1 {
		return fmt.Errorf("a timestamp after every record: %+v, want offset -1", r)
	}
	return nil
}

func adminAlterGroupOffsets(ctx context.Context) error {
	topic, group := uniq("ago"), uniq("ago-g")
	if err := createTopic(topic, 2, nil); err != nil {
		return err
	}
	if err := produceN(topic, 10, "a"); err != nil {
		return err
	}
	adm, err := admin()
	if err != nil {
		return err
	}
	defer adm.Close()
	resp, err := adm.AlterConsumerGroupOffsets(group, map[string]map[int32]sarama.OffsetAndMetadata{
		topic: {0: {Offset: 2, Metadata: "two"}, 1: {Offset: 5, Metadata: "five"}}}, nil)
	if err != nil {
		return fmt.Errorf("AlterConsumerGroupOffsets: %w", err)
	}
	for _, ps := range resp.Errors {
		for p, e := range ps {
			if !errors.Is(e, sarama.ErrNoError) {
				return fmt.Errorf("partition %d: %v", p, e)
			}
		}
	}
	offs, err := adm.ListConsumerGroupOffsets(group, nil)
	if err != nil {
		return err
	}
	b0, b1 := offs.GetBlock(topic, 0), offs.GetBlock(topic, 1)
	if b0 == nil || b0.Offset != 2 || b0.Metadata != "two" || b1 == nil || b1.Offset != 5 {
		return fmt.Errorf("after alter: %+v %+v", b0, b1)
	}
	batch, err := adm.ListConsumerGroupOffsetsBatch(map[string]map[string][]int32{group: {topic: {0}}, uniq("none"): nil})
	if err != nil {
		return fmt.Errorf("ListConsumerGroupOffsetsBatch: %w", err)
	}
	if len(batch) != 2 {
		return fmt.Errorf("batch answered %d groups", len(batch))
	}
	// The group consumes from there.
	recs := make(chan rec, 100)
	m, err := startMember("m", group, []string{topic}, recs)
	if err != nil {
		return err
	}
	got, err := collect(ctx, recs, 3, time.Second)
	m.stop()
	if err != nil || len(got) != 3 {
		return fmt.Errorf("consumed from the altered offsets: %v %v", got, err)
	}
	return nil
}

func adminElectReassign(ctx context.Context) error {
	topic := uniq("elect")
	if err := createTopic(topic, 2, nil); err != nil {
		return err
	}
	adm, err := admin()
	if err != nil {
		return err
	}
	defer adm.Close()
	res, err := adm.ElectLeaders(sarama.PreferredElection, map[string][]int32{topic: {0, 1}})
	if err != nil {
		return fmt.Errorf("ElectLeaders: %w", err)
	}
	for p, r := range res[topic] {
		if !errors.Is(r.ErrorCode, sarama.ErrElectionNotNeeded) {
			return fmt.Errorf("ElectLeaders partition %d: %v, want ELECTION_NOT_NEEDED", p, r.ErrorCode)
		}
	}
	st, err := adm.ListPartitionReassignments(topic, []int32{0, 1})
	if err != nil || len(st[topic]) != 0 {
		return fmt.Errorf("ListPartitionReassignments: %v %+v", err, st)
	}
	md, err := adm.DescribeTopics([]string{topic})
	if err != nil || len(md) != 1 {
		return err
	}
	var assign [][]int32
	for _, p := range md[0].Partitions {
		assign = append(assign, p.Replicas)
	}
	if err := adm.AlterPartitionReassignments(topic, assign); err != nil {
		return fmt.Errorf("AlterPartitionReassignments to the same replicas: %w", err)
	}
	return nil
}

func adminACLs(ctx context.Context) error {
	adm, err := admin()
	if err != nil {
		return err
	}
	defer adm.Close()
	topic := uniq("acl")
	res := sarama.Resource{ResourceType: sarama.AclResourceTopic, ResourceName: topic, ResourcePatternType: sarama.AclPatternLiteral}
	acl := sarama.Acl{Principal: "User:alice", Host: "*", Operation: sarama.AclOperationRead, PermissionType: sarama.AclPermissionAllow}
	err = adm.CreateACL(res, acl)
	// Without an authorizer (both targets' default) Kafka answers SECURITY_DISABLED.
	if !errors.Is(err, sarama.ErrSecurityDisabled) {
		return fmt.Errorf("CreateACL without an authorizer: %v, want SECURITY_DISABLED", err)
	}
	_, err = adm.ListAcls(sarama.AclFilter{ResourceType: sarama.AclResourceAny, ResourcePatternTypeFilter: sarama.AclPatternAny,
		Operation: sarama.AclOperationAny, PermissionType: sarama.AclPermissionAny})
	if !errors.Is(err, sarama.ErrSecurityDisabled) {
		return fmt.Errorf("ListAcls without an authorizer: %v, want SECURITY_DISABLED", err)
	}
	return nil
}

func adminClientQuotas(ctx context.Context) error {
	adm, err := admin()
	if err != nil {
		return err
	}
	defer adm.Close()
	client := uniq("quota-client")
	entity := []sarama.QuotaEntityComponent{{EntityType: sarama.QuotaEntityClientID, MatchType: sarama.QuotaMatchExact, Name: client}}
	if err := adm.AlterClientQuotas(entity, sarama.ClientQuotasOp{Key: "producer_byte_rate", Value: 1048576}, false); err != nil {
		return fmt.Errorf("AlterClientQuotas: %w", err)
	}
	filter := []sarama.QuotaFilterComponent{{EntityType: sarama.QuotaEntityClientID, MatchType: sarama.QuotaMatchExact, Match: client}}
	var entries []sarama.DescribeClientQuotasEntry
	for range 50 {
		if entries, err = adm.DescribeClientQuotas(filter, false); err == nil && len(entries) == 1 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil || len(entries) != 1 || entries[0].Values["producer_byte_rate"] != 1048576 {
		return fmt.Errorf("DescribeClientQuotas: %v %+v", err, entries)
	}
	if err := adm.AlterClientQuotas(entity, sarama.ClientQuotasOp{Key: "producer_byte_rate", Remove: true}, false); err != nil {
		return fmt.Errorf("AlterClientQuotas remove: %w", err)
	}
	return nil
}

func adminScram(ctx context.Context) error {
	adm, err := admin()
	if err != nil {
		return err
	}
	defer adm.Close()
	user := uniq("user")
	res, err := adm.UpsertUserScramCredentials([]sarama.AlterUserScramCredentialsUpsert{{Name: user,
		Mechanism: sarama.SCRAM_MECHANISM_SHA_256, Iterations: 8192, Password: []byte("secret")}})
	if err != nil || len(res) != 1 || !errors.Is(res[0].ErrorCode, sarama.ErrNoError) {
		return fmt.Errorf("UpsertUserScramCredentials: %v %+v", err, res)
	}
	var desc []*sarama.DescribeUserScramCredentialsResult
	for range 50 {
		if desc, err = adm.DescribeUserScramCredentials([]string{user}); err == nil && len(desc) == 1 && len(desc[0].CredentialInfos) == 1 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil || len(desc) != 1 || len(desc[0].CredentialInfos) != 1 || desc[0].CredentialInfos[0].Iterations != 8192 {
		return fmt.Errorf("DescribeUserScramCredentials: %v %+v", err, desc)
	}
	return nil
}

func isOK(err error) bool { return err == nil || errors.Is(err, sarama.ErrNoError) }
