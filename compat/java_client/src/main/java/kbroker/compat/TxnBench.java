package kbroker.compat;

import java.util.Arrays;
import java.util.Properties;
import java.util.UUID;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Transactions with the Java client, for bench/txn_bench.py: each transaction is begin, RECORDS
 * records of SIZE bytes (acks=all), commit. Prints one JSON line: txn/s and the commit latency
 * (commitTransaction() call to return) and whole-transaction latency percentiles. The client
 * uses transaction version 2 when the broker finalizes it, 1 otherwise.
 *
 * Usage: TxnBench BOOTSTRAP TOPIC TXNS RECORDS SIZE
 */
public final class TxnBench {
    public static void main(String[] args) {
        String bootstrap = args[0];
        String topic = args[1];
        int txns = Integer.parseInt(args[2]);
        int records = Integer.parseInt(args[3]);
        byte[] payload = new byte[Integer.parseInt(args[4])];
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "bench-" + UUID.randomUUID());
        props.put(ProducerConfig.LINGER_MS_CONFIG, 0);
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            producer.initTransactions();
            runOne(producer, topic, records, payload);  // unmeasured: coordinator lookup, connections
            double[] commits = new double[txns];
            double[] totals = new double[txns];
            long t0 = System.nanoTime();
            for (int i = 0; i < txns; i++) {
                long start = System.nanoTime();
                long commitStart = runOne(producer, topic, records, payload);
                long end = System.nanoTime();
                commits[i] = (end - commitStart) / 1e6;
                totals[i] = (end - start) / 1e6;
            }
            double seconds = (System.nanoTime() - t0) / 1e9;
            Arrays.sort(commits);
            Arrays.sort(totals);
            System.out.printf("{\"txns\": %d, \"seconds\": %.3f, \"txn_s\": %.1f, \"commit_p50_ms\": %.3f, "
                              + "\"commit_p99_ms\": %.3f, \"txn_p50_ms\": %.3f, \"txn_p99_ms\": %.3f}%n",
                              txns, seconds, txns / seconds, pct(commits, 0.5), pct(commits, 0.99),
                              pct(totals, 0.5), pct(totals, 0.99));
        }
    }

    /** One transaction; returns when its commit started (System.nanoTime()). */
    private static long runOne(KafkaProducer<byte[], byte[]> producer, String topic, int records, byte[] payload) {
        producer.beginTransaction();
        for (int r = 0; r < records; r++) {
            producer.send(new ProducerRecord<>(topic, payload));
        }
        long commitStart = System.nanoTime();
        producer.commitTransaction();
        return commitStart;
    }

    private static double pct(double[] sorted, double q) {
        return sorted[Math.min(sorted.length - 1, (int) Math.round(q * (sorted.length - 1)))];
    }
}
