#!/usr/bin/env bash
# Resolve Apache Kafka (broker + CLI tools) from Maven Central into a local cache.
#
#   compat/kafka/fetch.sh            # prints the libs dir on stdout
#   KAFKA_VERSION=4.3.1 KAFKA_CACHE=/some/dir compat/kafka/fetch.sh
#
# Result: ${KAFKA_CACHE:-$HOME/.cache/kbroker/kafka-$KAFKA_VERSION}/libs/*.jar
# Idempotent: once "$CACHE/.complete" exists (and matches this script's pom),
# the script does nothing but print the libs path.  Uses only `mvn` (Maven
# Central), no tarball download.  Progress/diagnostics go to stderr.
set -euo pipefail

KAFKA_VERSION="${KAFKA_VERSION:-4.3.1}"
LOG4J_VERSION="${LOG4J_VERSION:-2.24.3}"
CACHE="${KAFKA_CACHE:-$HOME/.cache/kbroker/kafka-${KAFKA_VERSION}}"
LIBS="$CACHE/libs"
MARKER="$CACHE/.complete"

gen_pom() {
cat <<POM
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0"
         xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
         xsi:schemaLocation="http://maven.apache.org/POM/4.0.0 http://maven.apache.org/xsd/maven-4.0.0.xsd">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kbroker.compat</groupId>
  <artifactId>kafka-runtime</artifactId>
  <version>${KAFKA_VERSION}</version>
  <packaging>pom</packaging>
  <dependencies>
    <!-- broker (kafka.Kafka), StorageTool, ConfigCommand -->
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>${KAFKA_VERSION}</version>
    </dependency>
    <!-- TopicCommand, ConsoleProducer, ConsoleConsumer, TransactionsCommand, ...
         connect-runtime is only used by the connect-plugin-path tool; it drags in
         jetty/jersey, so leave it out. -->
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka-tools</artifactId>
      <version>${KAFKA_VERSION}</version>
      <exclusions>
        <exclusion><groupId>org.apache.kafka</groupId><artifactId>connect-runtime</artifactId></exclusion>
        <exclusion><groupId>com.fasterxml.jackson.jakarta.rs</groupId><artifactId>*</artifactId></exclusion>
      </exclusions>
    </dependency>
    <!-- logging backend: Kafka 4.x logs through slf4j 1.7 -> log4j2 -->
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-api</artifactId>
      <version>${LOG4J_VERSION}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-core</artifactId>
      <version>${LOG4J_VERSION}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>${LOG4J_VERSION}</version>
    </dependency>
  </dependencies>
</project>
POM
}

mkdir -p "$CACHE"
POM_NEW="$(gen_pom)"
if [[ -f "$MARKER" && -f "$CACHE/pom.xml" ]] && [[ "$(cat "$CACHE/pom.xml")" == "$POM_NEW" ]] \
   && compgen -G "$LIBS/kafka_2.13-${KAFKA_VERSION}.jar" >/dev/null; then
  echo "$LIBS"
  exit 0
fi

command -v mvn >/dev/null || { echo "fetch.sh: mvn not found (apt-get install maven)" >&2; exit 2; }
command -v java >/dev/null || { echo "fetch.sh: java not found (need Java 17+)" >&2; exit 2; }

echo "fetch.sh: resolving Apache Kafka ${KAFKA_VERSION} from Maven Central into $LIBS" >&2
rm -f "$MARKER"
printf '%s\n' "$POM_NEW" > "$CACHE/pom.xml"
TMP_LIBS="$CACHE/libs.tmp.$$"
rm -rf "$TMP_LIBS"
# (mvn 3.8 prints bare colour resets even with -B: strip them; pipefail keeps mvn's status)
if ! mvn -q -B -Dstyle.color=never -f "$CACHE/pom.xml" dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$TMP_LIBS" 2>&1 \
      | sed -e $'s/\x1b\\[[0-9;]*m//g' -e '/^$/d' >&2; then
  rm -rf "$TMP_LIBS"
  echo "fetch.sh: Maven could not resolve org.apache.kafka:kafka_2.13:${KAFKA_VERSION}." >&2
  echo "fetch.sh: try another 4.3.x, e.g. KAFKA_VERSION=4.3.0 $0" >&2
  exit 1
fi
rm -rf "$LIBS"
mv "$TMP_LIBS" "$LIBS"
date -u +%FT%TZ > "$MARKER"
echo "fetch.sh: $(ls "$LIBS" | wc -l) jars in $LIBS" >&2
echo "$LIBS"
