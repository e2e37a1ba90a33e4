#!/usr/bin/env bash
# Resolve Spark's Kafka connector (4 jars) from Maven Central into a local cache, once.
#
#   pipeline/fetch_jars.sh            # prints the jars dir on stdout
#   PIPELINE_JARS=/some/dir pipeline/fetch_jars.sh
#
# Result: ${PIPELINE_JARS:-$HOME/.cache/kbroker/spark-kafka-$SPARK_VERSION}/*.jar, exactly:
#   spark-sql-kafka-0-10_2.13, spark-token-provider-kafka-0-10_2.13, kafka-clients, commons-pool2.
# Maven's full dependency copy also holds scala-library, lz4, snappy, slf4j and hadoop-client jars
# that pyspark already ships: those are dropped, they must not be on the classpath twice.
# Idempotent: once "$CACHE/.complete" exists the script only prints the path (works offline).
set -euo pipefail

SPARK_VERSION="${SPARK_VERSION:-4.2.0}"
CACHE="${PIPELINE_JARS:-$HOME/.cache/kbroker/spark-kafka-${SPARK_VERSION}}"
MARKER="$CACHE/.complete"
KEEP='^(spark-sql-kafka-0-10_2\.13|spark-token-provider-kafka-0-10_2\.13|kafka-clients|commons-pool2)-[0-9]'

if [[ -f "$MARKER" ]] && [[ "$(ls "$CACHE" | grep -cE "$KEEP")" == 4 ]]; then
  echo "$CACHE"
  exit 0
fi

command -v mvn >/dev/null || { echo "fetch_jars.sh: mvn not found (apt-get install maven)" >&2; exit 2; }
command -v java >/dev/null || { echo "fetch_jars.sh: java not found (need Java 17)" >&2; exit 2; }

echo "fetch_jars.sh: resolving spark-sql-kafka-0-10_2.13:${SPARK_VERSION} from Maven Central into $CACHE" >&2
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cat > "$WORK/pom.xml" <<POM
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kbroker.pipeline</groupId>
  <artifactId>spark-kafka-jars</artifactId>
  <version>${SPARK_VERSION}</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.spark</groupId>
      <artifactId>spark-sql-kafka-0-10_2.13</artifactId>
      <version>${SPARK_VERSION}</version>
    </dependency>
  </dependencies>
</project>
POM
if ! mvn -q -B -Dstyle.color=never -f "$WORK/pom.xml" dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$WORK/all" 2>&1 \
      | sed -e $'s/\x1b\\[[0-9;]*m//g' -e '/^$/d' >&2; then
  echo "fetch_jars.sh: Maven could not resolve org.apache.spark:spark-sql-kafka-0-10_2.13:${SPARK_VERSION}" >&2
  exit 1
fi
mkdir -p "$CACHE"
rm -f "$CACHE"/*.jar "$MARKER"
for jar in "$WORK"/all/*.jar; do
  if basename "$jar" | grep -qE "$KEEP"; then cp "$jar" "$CACHE/"; fi
done
n="$(ls "$CACHE" | grep -cE "$KEEP")"
[[ "$n" == 4 ]] || { echo "fetch_jars.sh: expected 4 connector jars, got $n" >&2; exit 1; }
date -u +%FT%TZ > "$MARKER"
echo "fetch_jars.sh: $(ls "$CACHE"/*.jar | xargs -n1 basename | tr '\n' ' ')" >&2
echo "$CACHE"
