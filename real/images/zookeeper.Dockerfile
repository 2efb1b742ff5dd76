# eosim/zookeeper: ZooKeeper 3.8 from Debian 12 on OpenJDK 17, with slf4j-simple for its log.
FROM eosim/debian:bookworm
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      zookeeper libslf4j-java openjdk-17-jre-headless >/dev/null \
 && rm -rf /var/lib/apt/lists/*
