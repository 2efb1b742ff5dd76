# eosim/clickhouse: ClickHouse 18.16 server and client from Debian 12.
FROM eosim/debian:bookworm
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      clickhouse-server clickhouse-client >/dev/null \
 && rm -rf /var/lib/apt/lists/*
