#!/usr/bin/env bash
# Run a class from Apache Kafka (resolved by fetch.sh) with a quiet log4j2 config.
#
#   compat/kafka/kafka-run.sh CLASS-OR-ALIAS [args...]
#
# Aliases (verified against the 4.3.1 jars):
#   kafka-topics                 org.apache.kafka.tools.TopicCommand
#   kafka-console-producer       org.apache.kafka.tools.ConsoleProducer
#   kafka-console-consumer       org.apache.kafka.tools.consumer.ConsoleConsumer
#   kafka-transactions           org.apache.kafka.tools.TransactionsCommand
#   kafka-configs                kafka.admin.ConfigCommand
#   kafka-consumer-groups        org.apache.kafka.tools.consumer.group.ConsumerGroupCommand
#   kafka-get-offsets            org.apache.kafka.tools.GetOffsetShell
#   kafka-broker-api-versions    org.apache.kafka.tools.BrokerApiVersionsCommand
#   kafka-producer-perf-test     org.apache.kafka.tools.ProducerPerformance
#   kafka-consumer-perf-test     org.apache.kafka.tools.ConsumerPerformance
#   kafka-storage                kafka.tools.StorageTool
#   kafka-leader-election        org.apache.kafka.tools.LeaderElectionCommand
#   kafka-reassign-partitions    org.apache.kafka.tools.reassign.ReassignPartitionsCommand
#   kafka-log-dirs               org.apache.kafka.tools.LogDirsCommand
#   kafka-metadata-quorum        org.apache.kafka.tools.MetadataQuorumCommand
#   kafka-acls                   org.apache.kafka.tools.AclCommand
#   kafka-cluster                org.apache.kafka.tools.ClusterTool
#   kafka-features               org.apache.kafka.tools.FeatureCommand
#   kafka-server-start           kafka.Kafka
# (a trailing ".sh" on an alias is accepted too: kafka-topics.sh)
#
# Environment:
#   KAFKA_VERSION, KAFKA_CACHE   passed to fetch.sh (default 4.3.1, ~/.cache/kbroker/kafka-4.3.1)
#   KAFKA_LOG_LEVEL              root log level (default WARN)
#   KAFKA_LOG4J_CONFIG           log4j2 config file (default compat/kafka/log4j2-quiet.xml)
#   KAFKA_HEAP_OPTS              default -Xmx256m (like kafka-run-class.sh for tools)
#   KAFKA_JVM_OPTS               default: fast-startup flags for short-lived CLI tools
#   KAFKA_OPTS                   extra JVM flags appended
#   KAFKA_EXTRA_CLASSPATH        appended to the jars' classpath (e.g. a principal builder)
# The JVM replaces this shell (exec), so $! / Popen.pid is the java process.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if [[ $# -lt 1 ]]; then
  sed -n '2,30p' "${BASH_SOURCE[0]}" >&2
  exit 2
fi

CLASS="${1%.sh}"; shift
case "$CLASS" in
  kafka-topics)              CLASS=org.apache.kafka.tools.TopicCommand ;;
  kafka-console-producer)    CLASS=org.apache.kafka.tools.ConsoleProducer ;;
  kafka-console-consumer)    CLASS=org.apache.kafka.tools.consumer.ConsoleConsumer ;;
  kafka-transactions)        CLASS=org.apache.kafka.tools.TransactionsCommand ;;
  kafka-configs)             CLASS=kafka.admin.ConfigCommand ;;
  kafka-consumer-groups)     CLASS=org.apache.kafka.tools.consumer.group.ConsumerGroupCommand ;;
  kafka-get-offsets)         CLASS=org.apache.kafka.tools.GetOffsetShell ;;
  kafka-broker-api-versions) CLASS=org.apache.kafka.tools.BrokerApiVersionsCommand ;;
  kafka-producer-perf-test)  CLASS=org.apache.kafka.tools.ProducerPerformance ;;
  kafka-consumer-perf-test)  CLASS=org.apache.kafka.tools.ConsumerPerformance ;;
  kafka-storage)             CLASS=kafka.tools.StorageTool ;;
  kafka-leader-election)     CLASS=org.apache.kafka.tools.LeaderElectionCommand ;;
  kafka-reassign-partitions) CLASS=org.apache.kafka.tools.reassign.ReassignPartitionsCommand ;;
  kafka-log-dirs)            CLASS=org.apache.kafka.tools.LogDirsCommand ;;
  kafka-metadata-quorum)     CLASS=org.apache.kafka.tools.MetadataQuorumCommand ;;
  kafka-acls)                CLASS=org.apache.kafka.tools.AclCommand ;;
  kafka-cluster)             CLASS=org.apache.kafka.tools.ClusterTool ;;
  kafka-features)            CLASS=org.apache.kafka.tools.FeatureCommand ;;
  kafka-server-start)        CLASS=kafka.Kafka ;;
esac

LIBS="$("$HERE/fetch.sh")"
command -v java >/dev/null || { echo "kafka-run.sh: java not found (need Java 17+)" >&2; exit 2; }

# shellcheck disable=SC2086
exec java \
  ${KAFKA_HEAP_OPTS:--Xmx256m} \
  ${KAFKA_JVM_OPTS:--XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto} \
  -Djava.awt.headless=true \
  -Dlog4j2.configurationFile="${KAFKA_LOG4J_CONFIG:-$HERE/log4j2-quiet.xml}" \
  ${KAFKA_OPTS:-} \
  -cp "$LIBS/*${KAFKA_EXTRA_CLASSPATH:+:$KAFKA_EXTRA_CLASSPATH}" "$CLASS" "$@"
