# eosim/kafka: Apache Kafka (KRaft) on Debian 12's OpenJDK 17, the broker jars from Maven
# Central (real/kafka/pom.xml, copied by .ci/install-real-services) in /opt/kafka/libs.
# Built by `eosim images` with real/kafka/lib as the context.
FROM eosim/debian:bookworm
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      openjdk-17-jre-headless procps >/dev/null \
 && rm -rf /var/lib/apt/lists/*
COPY . /opt/kafka/libs/
