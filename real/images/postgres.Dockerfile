# eosim/postgres: PostgreSQL 15 from Debian 12, and the non-root user `eosim` (uid EOSIM_UID)
# that initdb and postgres run as. fsync stays on (the server's default; eosim's
# postgresql.conf does not turn it off). SIGINT is the fast shutdown, as in the upstream
# postgres image.
FROM eosim/debian:bookworm
ARG EOSIM_UID
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      postgresql-15 >/dev/null \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --uid "$EOSIM_UID" --no-create-home --shell /usr/sbin/nologin eosim
STOPSIGNAL SIGINT
