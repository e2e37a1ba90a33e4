package kbroker.compat;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Properties;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.BooleanSupplier;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.AbortTransactionSpec;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.ListTransactionsOptions;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.admin.TransactionState;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.InvalidPartitionsException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Kafka's Java client (kafka-clients) against one broker or cluster: idempotence, transactions,
 * read_committed, fencing and the AdminClient calls applications and operators use.
 *
 * <pre>java [-Dcompat.client.config=FILE] -cp ... kbroker.compat.CompatTests BOOTSTRAP NODES [test-id ...]</pre>
 *
 * {@code compat.client.config} (optional) names a properties file every client (admin, producer,
 * consumer) starts from: the security settings of compat's SASL_SSL and mTLS targets.
 * Each test runs with its own topics and ids under a per-test time limit and prints one line
 * {@code RESULT<TAB>id<TAB>passed|failed<TAB>reason} (after a first line {@code TESTS<TAB>id,id,...});
 * compat/java_client/runner.py parses them.
 * Client timeouts are short so that a broker that does not answer fails a test within seconds.
 */
public final class CompatTests {
    private static final long TEST_TIMEOUT_S = 60;
    private static final Duration WAIT = Duration.ofSeconds(20);

    private final String bootstrap;
    private final int nodes;
    private final short rf;
    private final String run = UUID.randomUUID().toString().substring(0, 8);
    private final Properties base = new Properties(); // every client's settings (security)

    private CompatTests(String bootstrap, int nodes) throws java.io.IOException {
        String config = System.getProperty("compat.client.config");
        if (config != null && !config.isEmpty()) {
            try (java.io.Reader r = java.nio.file.Files.newBufferedReader(java.nio.file.Path.of(config))) {
                base.load(r);
            }
        }
        this.bootstrap = bootstrap;
        this.nodes = nodes;
        this.rf = (short) Math.min(nodes, 3);
    }

    interface Body {
        void run() throws Exception;
    }

    /** The tests in run order: id -> body. */
    private Map<String, Body> tests() {
        Map<String, Body> t = new LinkedHashMap<>();
        t.put("idempotent_producer_ordering_no_duplicates", this::idempotentProducer);
        t.put("transactional_consume_transform_produce", this::consumeTransformProduce);
        t.put("read_committed_skips_aborted", this::readCommittedSkipsAborted);
        t.put("read_committed_stops_at_lso", this::readCommittedStopsAtLso);
        t.put("producer_fencing", this::producerFencing);
        t.put("admin_create_topics", this::adminCreateTopics);
        t.put("admin_describe_cluster", this::adminDescribeCluster);
        t.put("admin_describe_configs", this::adminDescribeConfigs);
        t.put("admin_incremental_alter_configs", this::adminIncrementalAlterConfigs);
        t.put("admin_list_describe_transactions", this::adminListDescribeTransactions);
        t.put("admin_describe_producers", this::adminDescribeProducers);
        t.put("admin_abort_transaction", this::adminAbortTransaction);
        t.put("admin_fence_producers", this::adminFenceProducers);
        t.put("admin_consumer_groups", this::adminConsumerGroups);
        t.put("admin_delete_consumer_group_offsets", this::adminDeleteConsumerGroupOffsets);
        t.put("admin_delete_records", this::adminDeleteRecords);
        t.put("admin_create_partitions", this::adminCreatePartitions);
        t.put("admin_list_offsets", this::adminListOffsets);
        return t;
    }

    public static void main(String[] args) throws Exception {
        CompatTests suite = new CompatTests(args[0], Integer.parseInt(args[1]));
        Set<String> only = new HashSet<>(List.of(args).subList(2, args.length));
        ExecutorService pool = Executors.newCachedThreadPool(r -> {
            Thread th = new Thread(r);
            th.setDaemon(true);
            return th;
        });
        System.out.println("TESTS\t" + String.join(",", suite.tests().keySet()));
        for (Map.Entry<String, Body> e : suite.tests().entrySet()) {
            if (!only.isEmpty() && !only.contains(e.getKey())) {
                continue;
            }
            long start = System.nanoTime();
            String outcome = "passed";
            String reason = "";
            Future<?> f = pool.submit(() -> {
                e.getValue().run();
                return null;
            });
            try {
                f.get(TEST_TIMEOUT_S, TimeUnit.SECONDS);
            } catch (TimeoutException te) {
                f.cancel(true);
                outcome = "failed";
                reason = "timed out after " + TEST_TIMEOUT_S + " s";
            } catch (ExecutionException ee) {
                outcome = "failed";
                reason = describe(ee.getCause());
            }
            System.out.printf("RESULT\t%s\t%s\t%.1fs %s%n", e.getKey(), outcome,
                    (System.nanoTime() - start) / 1e9, reason.replace('\n', ' ').replace('\t', ' '));
            System.out.flush();
        }
        System.exit(0); // threads of a timed-out test may still be blocked in a client call
    }

    private static String describe(Throwable t) {
        StringBuilder sb = new StringBuilder();
        for (Throwable c = t; c != null; c = c.getCause()) {
            if (sb.length() > 0) {
                sb.append(" <- ");
            }
            sb.append(c.getClass().getSimpleName()).append(": ").append(c.getMessage());
        }
        for (StackTraceElement el : t.getStackTrace()) {
            if (el.getClassName().startsWith("kbroker.compat")) {
                sb.append(" @").append(el.getMethodName()).append(':').append(el.getLineNumber());
                break;
            }
        }
        return sb.toString();
    }

    // ------------------------------------------------------------------ assertions and helpers

    static void check(boolean cond, String what, Object... args) {
        if (!cond) {
            throw new AssertionError(String.format(what, args));
        }
    }

    static void equal(Object expected, Object actual, String what) {
        if (!Objects.equals(expected, actual)) {
            throw new AssertionError(what + ": expected " + expected + ", got " + actual);
        }
    }

    static void waitUntil(BooleanSupplier cond, String what) throws InterruptedException {
        long deadline = System.nanoTime() + WAIT.toNanos();
        while (!cond.getAsBoolean()) {
            check(System.nanoTime() < deadline, "not within %s: %s", WAIT, what);
            Thread.sleep(100);
        }
    }

    /** The exception {@code body} throws (its cause chain searched for {@code type}). */
    static <T extends Throwable> T expectThrows(Class<T> type, Body body) throws Exception {
        try {
            body.run();
        } catch (Throwable t) {
            for (Throwable c = t; c != null; c = c.getCause()) {
                if (type.isInstance(c)) {
                    return type.cast(c);
                }
            }
            throw new AssertionError("expected " + type.getSimpleName() + ", got " + describe(t), t);
        }
        throw new AssertionError("expected " + type.getSimpleName() + ", nothing was thrown");
    }

    private String name(String what) {
        return "jc-" + what + "-" + run;
    }

    private Admin admin() {
        Properties p = new Properties();
        p.putAll(base);
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 10000);
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 20000);
        return Admin.create(p);
    }

    private KafkaProducer<String, String> producer(Map<String, Object> extra) {
        Properties p = new Properties();
        p.putAll(base);
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.LINGER_MS_CONFIG, 5);
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, 10000);
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 20000);
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, 20000);
        p.putAll(extra);
        return new KafkaProducer<>(p);
    }

    private KafkaProducer<String, String> transactional(String txnId) {
        KafkaProducer<String, String> p = producer(Map.of(
                ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId,
                ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, 30000));
        p.initTransactions();
        return p;
    }

    private KafkaConsumer<String, String> consumer(String group, IsolationLevel isolation) {
        Properties p = new Properties();
        p.putAll(base);
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation.toString().toLowerCase());
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        p.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, 10000);
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 20000);
        if (group != null) {
            p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        }
        return new KafkaConsumer<>(p);
    }

    private void createTopic(Admin admin, String topic, int partitions) throws Exception {
        admin.createTopics(List.of(new NewTopic(topic, partitions, rf))).all().get();
        waitUntil(() -> partitionCount(admin, topic) == partitions, "metadata of " + topic);
    }

    private static int partitionCount(Admin admin, String topic) {
        try {
            return admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions().size();
        } catch (Exception e) {
            return -1;
        }
    }

    private static List<TopicPartition> partitions(String topic, int n) {
        List<TopicPartition> out = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            out.add(new TopicPartition(topic, i));
        }
        return out;
    }

    /** Every record of {@code tps} from the beginning, read until {@code expected} arrived and the
     *  consumer is at the end offsets (as its isolation level sees them). */
    private static List<ConsumerRecord<String, String>> readAll(KafkaConsumer<String, String> c,
            List<TopicPartition> tps, int expected) throws InterruptedException {
        c.assign(tps);
        c.seekToBeginning(tps);
        List<ConsumerRecord<String, String>> out = new ArrayList<>();
        long deadline = System.nanoTime() + WAIT.toNanos();
        while (System.nanoTime() < deadline) {
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                out.add(r);
            }
            if (out.size() >= expected && atEnd(c, tps)) {
                return out;
            }
        }
        throw new AssertionError("read " + out.size() + " of " + expected + " records: " + values(out));
    }

    private static boolean atEnd(KafkaConsumer<String, String> c, List<TopicPartition> tps) {
        Map<TopicPartition, Long> end = c.endOffsets(tps);
        return tps.stream().allMatch(tp -> c.position(tp) >= end.get(tp));
    }

    private static List<String> values(List<ConsumerRecord<String, String>> recs) {
        return recs.stream().map(ConsumerRecord::value).collect(Collectors.toList());
    }

    private static void send(KafkaProducer<String, String> p, String topic, int partition, String... vals)
            throws Exception {
        List<Future<RecordMetadata>> fs = new ArrayList<>();
        for (String v : vals) {
            fs.add(p.send(new ProducerRecord<>(topic, partition, "k", v)));
        }
        p.flush();
        for (Future<RecordMetadata> f : fs) {
            f.get();
        }
    }

    private long listOffset(Admin admin, TopicPartition tp, OffsetSpec spec, IsolationLevel iso) throws Exception {
        return admin.listOffsets(Map.of(tp, spec),
                new org.apache.kafka.clients.admin.ListOffsetsOptions(iso)).partitionResult(tp).get().offset();
    }

    // ------------------------------------------------------------------ idempotence and transactions

    /** acks=all + enable.idempotence, many records in flight: each partition holds exactly the
     *  records sent to it, in send order, no duplicate. */
    private void idempotentProducer() throws Exception {
        String topic = name("idem");
        int parts = 3;
        int n = 3000;
        try (Admin admin = admin()) {
            createTopic(admin, topic, parts);
        }
        try (KafkaProducer<String, String> p = producer(Map.of(
                ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true,
                ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, 5,
                ProducerConfig.BATCH_SIZE_CONFIG, 2048))) {
            List<Future<RecordMetadata>> fs = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                fs.add(p.send(new ProducerRecord<>(topic, i % parts, "k" + (i % parts), Integer.toString(i))));
            }
            p.flush();
            for (Future<RecordMetadata> f : fs) {
                f.get();
            }
        }
        try (KafkaConsumer<String, String> c = consumer(null, IsolationLevel.READ_UNCOMMITTED)) {
            List<ConsumerRecord<String, String>> recs = readAll(c, partitions(topic, parts), n);
            equal(n, recs.size(), "records read back");
            for (int part = 0; part < parts; part++) {
                final int pp = part;
                List<Integer> got = recs.stream().filter(r -> r.partition() == pp)
                        .map(r -> Integer.parseInt(r.value())).collect(Collectors.toList());
                List<Integer> want = new ArrayList<>();
                for (int i = part; i < n; i += parts) {
                    want.add(i);
                }
                equal(want, got, "partition " + part + " contents in order");
                List<Long> offsets = recs.stream().filter(r -> r.partition() == pp).map(ConsumerRecord::offset)
                        .collect(Collectors.toList());
                equal(0L, offsets.get(0), "first offset of partition " + part);
                equal((long) want.size() - 1, offsets.get(offsets.size() - 1), "last offset of partition " + part);
            }
        }
    }

    /** Exactly-once consume-transform-produce: an aborted transaction (output + offsets) leaves no
     *  trace; then every input record is transformed once, and the group's committed offsets are
     *  the input's end. */
    private void consumeTransformProduce() throws Exception {
        String in = name("ctp-in");
        String out = name("ctp-out");
        String group = name("ctp-group");
        int parts = 2;
        int n = 100;
        try (Admin admin = admin()) {
            createTopic(admin, in, parts);
            createTopic(admin, out, 1);
            try (KafkaProducer<String, String> p = producer(Map.of(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true))) {
                for (int i = 0; i < n; i++) {
                    p.send(new ProducerRecord<>(in, i % parts, "k", "v" + i));
                }
                p.flush();
            }
            try (KafkaProducer<String, String> tp = transactional(name("ctp-txn"));
                 KafkaConsumer<String, String> c = consumer(group, IsolationLevel.READ_COMMITTED)) {
                c.subscribe(List.of(in));
                // Round 1: aborted, output and offsets both.
                Map<TopicPartition, OffsetAndMetadata> firstOffsets = new HashMap<>();
                List<ConsumerRecord<String, String>> firstBatch = new ArrayList<>();
                long deadline = System.nanoTime() + WAIT.toNanos();
                while (firstBatch.isEmpty() && System.nanoTime() < deadline) {
                    for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                        firstBatch.add(r);
                        firstOffsets.put(new TopicPartition(r.topic(), r.partition()),
                                new OffsetAndMetadata(r.offset() + 1));
                    }
                }
                check(!firstBatch.isEmpty(), "the consumer got no input within %s", WAIT);
                tp.beginTransaction();
                for (ConsumerRecord<String, String> r : firstBatch) {
                    tp.send(new ProducerRecord<>(out, 0, r.key(), "ABORTED-" + r.value()));
                }
                tp.flush(); // else abortTransaction drops the unsent records and the log holds nothing to hide
                tp.sendOffsetsToTransaction(firstOffsets, c.groupMetadata());
                tp.abortTransaction();
                Map<TopicPartition, OffsetAndMetadata> committed = c.committed(new HashSet<>(partitions(in, parts)));
                check(committed.values().stream().allMatch(Objects::isNull),
                        "offsets of an aborted transaction were committed: %s", committed);
                for (TopicPartition p : partitions(in, parts)) {
                    c.seek(p, 0); // reprocess from the committed position (none: the beginning)
                }
                // Round 2+: committed transactions until the input is consumed.
                int done = 0;
                deadline = System.nanoTime() + WAIT.toNanos();
                while (done < n && System.nanoTime() < deadline) {
                    ConsumerRecords<String, String> recs = c.poll(Duration.ofMillis(200));
                    if (recs.isEmpty()) {
                        continue;
                    }
                    tp.beginTransaction();
                    Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                    for (ConsumerRecord<String, String> r : recs) {
                        tp.send(new ProducerRecord<>(out, 0, r.key(), r.value().toUpperCase()));
                        offsets.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                        done++;
                    }
                    tp.sendOffsetsToTransaction(offsets, c.groupMetadata());
                    tp.commitTransaction();
                }
                equal(n, done, "input records processed");
            }
            Map<TopicPartition, OffsetAndMetadata> want = new HashMap<>();
            for (TopicPartition p : partitions(in, parts)) {
                want.put(p, new OffsetAndMetadata(n / parts));
            }
            // Transactional offsets become visible once the COMMIT marker is in __consumer_offsets.
            waitUntil(() -> want.equals(offsetsOrNull(admin, group)), "committed offsets of " + group + " = " + want);
        }
        Set<String> expected = new HashSet<>();
        for (int i = 0; i < n; i++) {
            expected.add("V" + i);
        }
        try (KafkaConsumer<String, String> c = consumer(null, IsolationLevel.READ_COMMITTED)) {
            List<String> got = values(readAll(c, partitions(out, 1), n));
            equal(n, got.size(), "read_committed output count (no duplicate, nothing aborted)");
            equal(expected, new HashSet<>(got), "read_committed output");
        }
        try (KafkaConsumer<String, String> c = consumer(null, IsolationLevel.READ_UNCOMMITTED)) {
            List<String> got = values(readAll(c, partitions(out, 1), n + 1));
            check(got.stream().anyMatch(v -> v.startsWith("ABORTED-")),
                    "read_uncommitted does not see the aborted output: %s", got);
        }
    }

    /** Committed, aborted, committed: read_committed sees the committed records only,
     *  read_uncommitted all of them. */
    private void readCommittedSkipsAborted() throws Exception {
        String topic = name("rc");
        try (Admin admin = admin()) {
            createTopic(admin, topic, 1);
        }
        try (KafkaProducer<String, String> p = transactional(name("rc-txn"))) {
            for (String tag : List.of("a", "b", "c")) {
                p.beginTransaction();
                send(p, topic, 0, tag + "1", tag + "2", tag + "3");
                if (tag.equals("b")) {
                    p.abortTransaction();
                } else {
                    p.commitTransaction();
                }
            }
        }
        List<TopicPartition> tps = partitions(topic, 1);
        try (KafkaConsumer<String, String> c = consumer(null, IsolationLevel.READ_COMMITTED)) {
            equal(List.of("a1", "a2", "a3", "c1", "c2", "c3"), values(readAll(c, tps, 6)), "read_committed");
        }
        try (KafkaConsumer<String, String> c = consumer(null, IsolationLevel.READ_UNCOMMITTED)) {
            equal(List.of("a1", "a2", "a3", "b1", "b2", "b3", "c1", "c2", "c3"), values(readAll(c, tps, 9)),
                    "read_uncommitted");
        }
    }

    /** An open transaction holds read_committed consumers at its first offset (the LSO), also
     *  for records written after it; read_uncommitted reads on. Committing releases them. */
    private void readCommittedStopsAtLso() throws Exception {
        String topic = name("lso");
        List<TopicPartition> tps = partitions(topic, 1);
        TopicPartition tp0 = tps.get(0);
        try (Admin admin = admin()) {
            createTopic(admin, topic, 1);
            try (KafkaProducer<String, String> plain = producer(Map.of(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true));
                 KafkaProducer<String, String> txn = transactional(name("lso-txn"))) {
                send(plain, topic, 0, "pre1", "pre2", "pre3");
                txn.beginTransaction();
                send(txn, topic, 0, "open1", "open2");
                send(plain, topic, 0, "post1", "post2");
                equal(3L, listOffset(admin, tp0, OffsetSpec.latest(), IsolationLevel.READ_COMMITTED),
                        "ListOffsets latest, read_committed (the LSO)");
                equal(7L, listOffset(admin, tp0, OffsetSpec.latest(), IsolationLevel.READ_UNCOMMITTED),
                        "ListOffsets latest, read_uncommitted (the high watermark)");
                try (KafkaConsumer<String, String> c = consumer(null, IsolationLevel.READ_COMMITTED)) {
                    equal(Map.of(tp0, 3L), c.endOffsets(tps), "read_committed endOffsets");
                    equal(List.of("pre1", "pre2", "pre3"), values(readAll(c, tps, 3)), "read_committed before commit");
                    equal(3L, c.position(tp0), "read_committed position (held at the LSO)");
                }
                try (KafkaConsumer<String, String> c = consumer(null, IsolationLevel.READ_UNCOMMITTED)) {
                    equal(List.of("pre1", "pre2", "pre3", "open1", "open2", "post1", "post2"),
                            values(readAll(c, tps, 7)), "read_uncommitted");
                }
                txn.commitTransaction();
            }
            // The markers are written after EndTxn is answered (also by Kafka): the LSO follows soon.
            waitUntil(() -> lsoOrMinus1(admin, tp0) == 8L, "LSO 8 after the commit (7 records + the COMMIT marker)");
        }
        try (KafkaConsumer<String, String> c = consumer(null, IsolationLevel.READ_COMMITTED)) {
            equal(List.of("pre1", "pre2", "pre3", "open1", "open2", "post1", "post2"), values(readAll(c, tps, 7)),
                    "read_committed after commit");
        }
    }

    /** A second producer with the same transactional.id fences the first: the first's commit
     *  fails with ProducerFencedException and its open transaction is aborted. */
    private void producerFencing() throws Exception {
        String topic = name("fence");
        String txnId = name("fence-txn");
        try (Admin admin = admin()) {
            createTopic(admin, topic, 1);
        }
        KafkaProducer<String, String> first = transactional(txnId);
        try {
            first.beginTransaction();
            send(first, topic, 0, "zombie");
            try (KafkaProducer<String, String> second = transactional(txnId)) {
                expectThrows(ProducerFencedException.class, first::commitTransaction);
                second.beginTransaction();
                send(second, topic, 0, "live");
                second.commitTransaction();
            }
        } finally {
            first.close(Duration.ZERO);
        }
        try (KafkaConsumer<String, String> c = consumer(null, IsolationLevel.READ_COMMITTED)) {
            equal(List.of("live"), values(readAll(c, partitions(topic, 1), 1)), "read_committed after fencing");
        }
    }

    // ------------------------------------------------------------------ AdminClient

    private static Map<String, ConfigEntry> configs(Admin admin, ConfigResource res) throws Exception {
        Config cfg = admin.describeConfigs(List.of(res)).all().get().get(res);
        return cfg.entries().stream().collect(Collectors.toMap(ConfigEntry::name, e -> e));
    }

    private void adminCreateTopics() throws Exception {
        String topic = name("create");
        try (Admin admin = admin()) {
            NewTopic nt = new NewTopic(topic, 3, rf).configs(Map.of(
                    "cleanup.policy", "compact", "retention.ms", "3600000", "max.message.bytes", "200000"));
            admin.createTopics(List.of(nt)).all().get();
            waitUntil(() -> partitionCount(admin, topic) == 3, "metadata of " + topic);
            for (Map.Entry<String, String> e : nt.configs().entrySet()) {
                awaitConfig(admin, new ConfigResource(ConfigResource.Type.TOPIC, topic), e.getKey(), e.getValue(),
                        ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG);
            }
            expectThrows(TopicExistsException.class,
                    () -> admin.createTopics(List.of(new NewTopic(topic, 1, rf))).all().get());
            // validateOnly: nothing created.
            String dry = name("create-dry");
            admin.createTopics(List.of(new NewTopic(dry, 1, rf)),
                    new org.apache.kafka.clients.admin.CreateTopicsOptions().validateOnly(true)).all().get();
            check(!admin.listTopics().names().get().contains(dry), "validateOnly created %s", dry);
        }
    }

    private void adminDescribeCluster() throws Exception {
        try (Admin admin = admin()) {
            DescribeClusterResult dc = admin.describeCluster();
            String clusterId = dc.clusterId().get();
            check(clusterId != null && !clusterId.isEmpty(), "no cluster id");
            Collection<Node> ns = dc.nodes().get();
            equal(nodes, ns.size(), "nodes " + ns);
            Node controller = dc.controller().get();
            check(controller != null && controller.id() >= 0, "controller %s", controller);
            Set<Integer> ids = ns.stream().map(Node::id).collect(Collectors.toSet());
            check(ids.contains(controller.id()), "controller %s is not one of the nodes %s", controller, ids);
        }
    }

    private void adminDescribeConfigs() throws Exception {
        String topic = name("dconf");
        try (Admin admin = admin()) {
            createTopic(admin, topic, 1);
            Map<String, ConfigEntry> t = configs(admin, new ConfigResource(ConfigResource.Type.TOPIC, topic));
            for (String key : List.of("cleanup.policy", "retention.ms", "segment.bytes", "min.insync.replicas",
                    "max.message.bytes", "compression.type")) {
                check(t.containsKey(key), "topic config %s missing (have %s)", key, t.keySet());
            }
            equal("delete", t.get("cleanup.policy").value(), "cleanup.policy");
            equal(ConfigEntry.ConfigSource.DEFAULT_CONFIG, t.get("cleanup.policy").source(), "cleanup.policy source");
            String nodeId = Integer.toString(admin.describeCluster().nodes().get().iterator().next().id());
            Map<String, ConfigEntry> b = configs(admin, new ConfigResource(ConfigResource.Type.BROKER, nodeId));
            for (String key : List.of("num.partitions", "log.retention.hours", "message.max.bytes",
                    "auto.create.topics.enable")) {
                check(b.containsKey(key), "broker config %s missing (have %d keys)", key, b.size());
            }
        }
    }

    private void adminIncrementalAlterConfigs() throws Exception {
        String topic = name("iac");
        ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        try (Admin admin = admin()) {
            createTopic(admin, topic, 1);
            alter(admin, res, new AlterConfigOp(new ConfigEntry("retention.ms", "123456"), AlterConfigOp.OpType.SET),
                    new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"), AlterConfigOp.OpType.SET));
            // On a cluster the broker answering DescribeConfigs applies a change a moment later.
            awaitConfig(admin, res, "retention.ms", "123456", ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG);
            awaitConfig(admin, res, "cleanup.policy", "compact", ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG);
            alter(admin, res, new AlterConfigOp(new ConfigEntry("cleanup.policy", "delete"), AlterConfigOp.OpType.APPEND));
            awaitConfig(admin, res, "cleanup.policy", "compact,delete", ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG);
            alter(admin, res, new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"),
                    AlterConfigOp.OpType.SUBTRACT));
            awaitConfig(admin, res, "cleanup.policy", "delete", ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG);
            alter(admin, res, new AlterConfigOp(new ConfigEntry("retention.ms", ""), AlterConfigOp.OpType.DELETE));
            awaitConfig(admin, res, "retention.ms", "604800000", ConfigEntry.ConfigSource.DEFAULT_CONFIG);
        }
    }

    /** Wait until describeConfigs shows {@code key} = {@code value} from {@code source}. */
    private static void awaitConfig(Admin admin, ConfigResource res, String key, String value,
            ConfigEntry.ConfigSource source) throws Exception {
        String[] last = {"(not described)"};
        try {
            waitUntil(() -> {
                try {
                    ConfigEntry e = configs(admin, res).get(key);
                    last[0] = e == null ? "(missing)" : e.value() + " from " + e.source();
                    return e != null && value.equals(e.value()) && e.source() == source;
                } catch (Exception ex) {
                    last[0] = ex.toString();
                    return false;
                }
            }, key + "=" + value);
        } catch (AssertionError ae) {
            throw new AssertionError(key + ": expected " + value + " from " + source + ", got " + last[0]);
        }
    }

    private static void alter(Admin admin, ConfigResource res, AlterConfigOp... ops) throws Exception {
        admin.incrementalAlterConfigs(Map.of(res, List.of(ops))).all().get();
    }

    /** A producer with an open transaction on {@code topic}-0 (first record at the returned
     *  offset), left open for the caller. */
    private long openTransaction(KafkaProducer<String, String> p, String topic) throws Exception {
        p.beginTransaction();
        Future<RecordMetadata> f = p.send(new ProducerRecord<>(topic, 0, "k", "open"));
        p.flush();
        return f.get().offset();
    }

    private void adminListDescribeTransactions() throws Exception {
        String topic = name("ltx");
        String txnId = name("ltx-txn");
        try (Admin admin = admin()) {
            createTopic(admin, topic, 1);
            KafkaProducer<String, String> p = transactional(txnId);
            try {
                long before = System.currentTimeMillis();
                openTransaction(p, topic);
                Collection<TransactionListing> all = admin.listTransactions().all().get();
                TransactionListing mine = all.stream().filter(l -> l.transactionalId().equals(txnId)).findFirst()
                        .orElseThrow(() -> new AssertionError(txnId + " not listed: " + all));
                equal(TransactionState.ONGOING, mine.state(), "listed state");
                Collection<TransactionListing> ongoing = admin.listTransactions(new ListTransactionsOptions()
                        .filterStates(List.of(TransactionState.ONGOING))).all().get();
                check(ongoing.stream().anyMatch(l -> l.transactionalId().equals(txnId)), "not in the ONGOING filter");
                Collection<TransactionListing> empty = admin.listTransactions(new ListTransactionsOptions()
                        .filterStates(List.of(TransactionState.EMPTY))).all().get();
                check(empty.stream().noneMatch(l -> l.transactionalId().equals(txnId)), "in the EMPTY filter");
                TransactionDescription d = admin.describeTransactions(List.of(txnId)).description(txnId).get();
                equal(TransactionState.ONGOING, d.state(), "described state");
                equal(mine.producerId(), d.producerId(), "described producer id");
                equal(30000L, d.transactionTimeoutMs(), "transaction timeout");
                equal(Set.of(new TopicPartition(topic, 0)), d.topicPartitions(), "transaction's partitions");
                check(d.transactionStartTimeMs().isPresent()
                        && d.transactionStartTimeMs().getAsLong() >= before - 5000, "start time %s", d);
                p.commitTransaction();
                // The markers are written after EndTxn is answered: PrepareCommit until then.
                waitUntil(() -> Set.of(TransactionState.COMPLETE_COMMIT, TransactionState.EMPTY)
                        .contains(transactionState(admin, txnId)), txnId + " CompleteCommit after the commit");
            } finally {
                p.close(Duration.ZERO);
            }
        }
    }

    private static TransactionState transactionState(Admin admin, String txnId) {
        try {
            return admin.describeTransactions(List.of(txnId)).description(txnId).get().state();
        } catch (Exception e) {
            return TransactionState.UNKNOWN;
        }
    }

    private ProducerState producerState(Admin admin, TopicPartition tp, long producerId) throws Exception {
        List<ProducerState> states = admin.describeProducers(List.of(tp)).partitionResult(tp).get().activeProducers();
        return states.stream().filter(s -> s.producerId() == producerId).findFirst()
                .orElseThrow(() -> new AssertionError("producer " + producerId + " not in " + states));
    }

    private boolean inTransaction(Admin admin, TopicPartition tp, long producerId) {
        try {
            return producerState(admin, tp, producerId).currentTransactionStartOffset().isPresent();
        } catch (Exception e) {
            return true;
        }
    }

    private long producerId(Admin admin, String txnId) throws Exception {
        return admin.describeTransactions(List.of(txnId)).description(txnId).get().producerId();
    }

    private void adminDescribeProducers() throws Exception {
        String topic = name("dprod");
        String txnId = name("dprod-txn");
        TopicPartition tp = new TopicPartition(topic, 0);
        try (Admin admin = admin()) {
            createTopic(admin, topic, 1);
            KafkaProducer<String, String> p = transactional(txnId);
            try {
                p.beginTransaction();
                send(p, topic, 0, "t1", "t2", "t3");
                ProducerState s = producerState(admin, tp, producerId(admin, txnId));
                equal(2, s.lastSequence(), "last sequence");
                equal(0L, s.currentTransactionStartOffset().orElse(-1), "current transaction start offset");
                check(s.lastTimestamp() > 0, "last timestamp %s", s);
                p.commitTransaction();
                long pid = producerId(admin, txnId);
                // The COMMIT marker is written after EndTxn is answered (also by Kafka).
                waitUntil(() -> !inTransaction(admin, tp, pid), "producer " + pid + " out of its transaction");
            } finally {
                p.close(Duration.ZERO);
            }
        }
    }

    /** The open transaction found through describeProducers is aborted with a marker written by
     *  the partition's leader: the LSO moves past it and read_committed skips its records. */
    private void adminAbortTransaction() throws Exception {
        String topic = name("abort");
        TopicPartition tp = new TopicPartition(topic, 0);
        try (Admin admin = admin()) {
            createTopic(admin, topic, 1);
            KafkaProducer<String, String> p = transactional(name("abort-txn"));
            try {
                long start = openTransaction(p, topic);
                equal(start, listOffset(admin, tp, OffsetSpec.latest(), IsolationLevel.READ_COMMITTED), "LSO");
                List<ProducerState> states = admin.describeProducers(List.of(tp)).partitionResult(tp).get()
                        .activeProducers();
                ProducerState hanging = states.stream()
                        .filter(s -> s.currentTransactionStartOffset().orElse(-1) == start).findFirst()
                        .orElseThrow(() -> new AssertionError("no open transaction at " + start + ": " + states));
                admin.abortTransaction(new AbortTransactionSpec(tp, hanging.producerId(),
                        (short) hanging.producerEpoch(), Math.max(0, hanging.coordinatorEpoch().orElse(0)))).all().get();
                long end = listOffset(admin, tp, OffsetSpec.latest(), IsolationLevel.READ_UNCOMMITTED);
                equal(start + 2, end, "high watermark (the record + the ABORT marker)");
                equal(end, listOffset(admin, tp, OffsetSpec.latest(), IsolationLevel.READ_COMMITTED),
                        "LSO after the abort");
                ProducerState after = producerState(admin, tp, hanging.producerId());
                check(after.currentTransactionStartOffset().isEmpty(), "still open: %s", after);
            } finally {
                p.close(Duration.ZERO);
            }
        }
        try (KafkaConsumer<String, String> c = consumer(null, IsolationLevel.READ_COMMITTED)) {
            equal(List.of(), values(readAll(c, List.of(tp), 0)), "read_committed after the abort");
        }
    }

    private void adminFenceProducers() throws Exception {
        String topic = name("fencep");
        String txnId = name("fencep-txn");
        try (Admin admin = admin()) {
            createTopic(admin, topic, 1);
            KafkaProducer<String, String> p = transactional(txnId);
            try {
                openTransaction(p, topic);
                long pid = producerId(admin, txnId);
                admin.fenceProducers(List.of(txnId)).all().get();
                expectThrows(ProducerFencedException.class, p::commitTransaction);
                TransactionDescription d = admin.describeTransactions(List.of(txnId)).description(txnId).get();
                equal(pid, d.producerId(), "producer id after fencing");
                check(d.state() != TransactionState.ONGOING, "still ONGOING after fencing: %s", d);
            } finally {
                p.close(Duration.ZERO);
            }
            try (KafkaConsumer<String, String> c = consumer(null, IsolationLevel.READ_COMMITTED)) {
                equal(List.of(), values(readAll(c, partitions(topic, 1), 0)), "read_committed after fencing");
            }
        }
    }

    private void adminConsumerGroups() throws Exception {
        String topic = name("groups");
        String group = name("groups-g");
        List<TopicPartition> tps = partitions(topic, 2);
        try (Admin admin = admin()) {
            createTopic(admin, topic, 2);
            try (KafkaProducer<String, String> p = producer(Map.of())) {
                send(p, topic, 0, "a", "b", "c");
                send(p, topic, 1, "d", "e");
            }
            try (KafkaConsumer<String, String> c = consumer(group, IsolationLevel.READ_UNCOMMITTED)) {
                c.subscribe(List.of(topic));
                int got = 0;
                long deadline = System.nanoTime() + WAIT.toNanos();
                while (got < 5 && System.nanoTime() < deadline) {
                    got += c.poll(Duration.ofMillis(200)).count();
                }
                equal(5, got, "records consumed by the group");
                c.commitSync();
                @SuppressWarnings("deprecation")
                Collection<ConsumerGroupListing> listed = admin.listConsumerGroups().all().get();
                check(listed.stream().anyMatch(g -> g.groupId().equals(group)), "%s not listed: %s", group, listed);
                ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).describedGroups().get(group).get();
                equal(GroupState.STABLE, d.groupState(), "group state");
                equal(1, d.members().size(), "members");
                equal(new HashSet<>(tps), d.members().iterator().next().assignment().topicPartitions(), "assignment");
                equal(Map.of(tps.get(0), new OffsetAndMetadata(3), tps.get(1), new OffsetAndMetadata(2)),
                        offsets(admin, group), "listConsumerGroupOffsets");
            }
            waitUntil(() -> groupState(admin, group) == GroupState.EMPTY, group + " EMPTY after the member left");
            admin.alterConsumerGroupOffsets(group, Map.of(tps.get(0), new OffsetAndMetadata(1))).all().get();
            equal(Map.of(tps.get(0), new OffsetAndMetadata(1), tps.get(1), new OffsetAndMetadata(2)),
                    offsets(admin, group), "offsets after alterConsumerGroupOffsets");
            admin.deleteConsumerGroups(List.of(group)).all().get();
            @SuppressWarnings("deprecation")
            Collection<ConsumerGroupListing> after = admin.listConsumerGroups().all().get();
            check(after.stream().noneMatch(g -> g.groupId().equals(group)), "%s still listed after delete", group);
        }
    }

    private static GroupState groupState(Admin admin, String group) {
        try {
            return admin.describeConsumerGroups(List.of(group)).describedGroups().get(group).get().groupState();
        } catch (Exception e) {
            return GroupState.UNKNOWN;
        }
    }

    private static Map<TopicPartition, OffsetAndMetadata> offsetsOrNull(Admin admin, String group) {
        try {
            return offsets(admin, group);
        } catch (Exception e) {
            return null;
        }
    }

    private long lsoOrMinus1(Admin admin, TopicPartition tp) {
        try {
            return listOffset(admin, tp, OffsetSpec.latest(), IsolationLevel.READ_COMMITTED);
        } catch (Exception e) {
            return -1;
        }
    }

    private static Map<TopicPartition, OffsetAndMetadata> offsets(Admin admin, String group) throws Exception {
        Map<TopicPartition, OffsetAndMetadata> out = new HashMap<>();
        // Leader epochs differ between brokers; compare offsets and metadata only.
        admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get()
                .forEach((tp, om) -> out.put(tp, new OffsetAndMetadata(om.offset(), om.metadata())));
        return out;
    }

    private void adminDeleteConsumerGroupOffsets() throws Exception {
        String topic = name("delofs");
        String group = name("delofs-g");
        List<TopicPartition> tps = partitions(topic, 2);
        try (Admin admin = admin()) {
            createTopic(admin, topic, 2);
            admin.alterConsumerGroupOffsets(group, Map.of(tps.get(0), new OffsetAndMetadata(0),
                    tps.get(1), new OffsetAndMetadata(0))).all().get();
            equal(2, offsets(admin, group).size(), "offsets before the delete");
            admin.deleteConsumerGroupOffsets(group, Set.of(tps.get(0))).all().get();
            equal(Map.of(tps.get(1), new OffsetAndMetadata(0)), offsets(admin, group), "offsets after the delete");
        }
    }

    private void adminDeleteRecords() throws Exception {
        String topic = name("delrec");
        TopicPartition tp = new TopicPartition(topic, 0);
        try (Admin admin = admin()) {
            createTopic(admin, topic, 1);
            try (KafkaProducer<String, String> p = producer(Map.of())) {
                send(p, topic, 0, "r0", "r1", "r2", "r3", "r4", "r5");
            }
            long low = admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(4))).lowWatermarks().get(tp).get()
                    .lowWatermark();
            equal(4L, low, "low watermark");
            equal(4L, listOffset(admin, tp, OffsetSpec.earliest(), IsolationLevel.READ_UNCOMMITTED), "earliest");
            try (KafkaConsumer<String, String> c = consumer(null, IsolationLevel.READ_UNCOMMITTED)) {
                equal(List.of("r4", "r5"), values(readAll(c, List.of(tp), 2)), "records after deleteRecords");
            }
        }
    }

    private void adminCreatePartitions() throws Exception {
        String topic = name("cparts");
        try (Admin admin = admin()) {
            createTopic(admin, topic, 2);
            admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(5))).all().get();
            waitUntil(() -> partitionCount(admin, topic) == 5, topic + " has 5 partitions");
            expectThrows(InvalidPartitionsException.class,
                    () -> admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(3))).all().get());
            try (KafkaProducer<String, String> p = producer(Map.of())) {
                send(p, topic, 4, "in-a-new-partition");
            }
        }
    }

    private void adminListOffsets() throws Exception {
        String topic = name("lofs");
        TopicPartition tp = new TopicPartition(topic, 0);
        long base = System.currentTimeMillis() - 60_000;
        try (Admin admin = admin()) {
            createTopic(admin, topic, 1);
            try (KafkaProducer<String, String> p = producer(Map.of())) {
                long[] ts = {base, base + 5000, base + 3000, base + 1000};
                for (long t : ts) {
                    p.send(new ProducerRecord<>(topic, 0, t, "k", "at" + (t - base))).get();
                }
            }
            equal(0L, listOffset(admin, tp, OffsetSpec.earliest(), IsolationLevel.READ_UNCOMMITTED), "earliest");
            equal(4L, listOffset(admin, tp, OffsetSpec.latest(), IsolationLevel.READ_UNCOMMITTED), "latest");
            ListOffsetsResultInfo max = admin.listOffsets(Map.of(tp, OffsetSpec.maxTimestamp())).partitionResult(tp).get();
            equal(1L, max.offset(), "maxTimestamp offset");
            equal(base + 5000, max.timestamp(), "maxTimestamp timestamp");
            ListOffsetsResultInfo at = admin.listOffsets(Map.of(tp, OffsetSpec.forTimestamp(base + 2000)))
                    .partitionResult(tp).get();
            equal(1L, at.offset(), "first offset with timestamp >= base+2000");
        }
    }
}
