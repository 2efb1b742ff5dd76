//! Simulator throughput: 3 brokers, 6 partitions (replication 3, acks=all), 100,000 records
//! through a producer, the brokers and a group consumer, all in one madsim runtime.
//!
//! Two producers: hand-made batches of 500 records (`SimProducer::send_batch`), and the
//! batching producer a workload uses, one `send_async` per record with `linger.ms` 5,
//! `batch.size` 16384 and 5 requests in flight (its record accumulator cuts the batches).
//! Reports records per wall second (criterion's throughput) and prints simulated seconds
//! per wall second and, for the batching producer, records per Produce request. Run with `cargo xtask bench` (it builds with `--cfg madsim`).

// Links the shared crate, and with it the allocator the `eosim` binary runs with.
use eosim_benches as _;

#[cfg(madsim)]
mod bench {
    use bytes::Bytes;
    use criterion::{criterion_group, Criterion, Throughput};
    use eosim::client::sim::producer::SimProducer;
    use eosim::client::sim::{admin::SimAdmin, conn::Connection, consumer::SimConsumer};
    use eosim::client::{
        Admin, AutoOffsetReset, Consumer, ConsumerConfig, Producer, ProducerConfig, ProducerRecord,
    };
    use eosim_sim::kafka::model::Cluster;
    use eosim_sim::kafka::service::{broker_ip, serve_broker, KafkaWorld};
    use eosim_sim::kafka::{ClusterConfig, Record, TopicConfig, TopicPartition};
    use std::collections::BTreeMap;
    use std::net::{IpAddr, Ipv4Addr};
    use std::time::{Duration, Instant};

    const RECORDS: u64 = 100_000;
    const PARTITIONS: u32 = 6;
    const BATCH_RECORDS: u64 = 500;

    /// How the records are produced.
    #[derive(Debug, Clone, Copy)]
    enum Produce {
        /// `send_batch` of 500 records at a time.
        Batches,
        /// `send_async` per record through the record accumulator.
        Accumulator,
    }

    /// One run; returns (wall time, simulated time, the marks it hit).
    fn run_once(seed: u64, mode: Produce) -> (Duration, Duration, BTreeMap<String, u64>) {
        std::thread::spawn(move || {
            let runtime =
                madsim::runtime::Runtime::with_seed_and_config(seed, madsim::Config::default());
            let wall = Instant::now();
            let sim = runtime.block_on(pipeline(mode));
            (wall.elapsed(), sim, eosim_sim::marks::take())
        })
        .join()
        .expect("bench run")
    }

    async fn pipeline(mode: Produce) -> Duration {
        let handle = madsim::runtime::Handle::current();
        let config = ClusterConfig {
            group_initial_rebalance_delay_ms: 0,
            ..Default::default()
        };
        let kafka = KafkaWorld::new(Cluster::new(3, config));
        let ticker = kafka.clone();
        let env = std::sync::Arc::new(AllUp);
        handle
            .create_node()
            .ip(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)))
            .init(move || ticker.clone().run_ticker(env.clone()))
            .build();
        for b in 1..=3 {
            let k = kafka.clone();
            handle
                .create_node()
                .ip(broker_ip(b))
                .init(move || serve_broker(b, k.clone()))
                .build();
        }
        let client = handle
            .create_node()
            .ip(IpAddr::V4(Ipv4Addr::new(10, 0, 2, 1)))
            .build();
        let start = madsim::time::Instant::now();
        client
            .spawn(produce_and_consume(mode))
            .await
            .expect("bench client");
        start.elapsed()
    }

    async fn produce_and_consume(mode: Produce) {
        let conn = Connection::open(3).await.expect("connect");
        let admin = SimAdmin::new(conn.clone(), Duration::from_secs(30));
        admin
            .create_topic("bench", PARTITIONS, 3, TopicConfig::default())
            .await
            .expect("topic");
        match mode {
            Produce::Batches => produce_batches(&conn).await,
            Produce::Accumulator => produce_accumulated(&conn).await,
        }
        let mut config = ConsumerConfig::new("bench");
        config.auto_offset_reset = AutoOffsetReset::Earliest;
        config.max_poll_records = 5_000;
        let mut consumer = SimConsumer::new(conn, config);
        consumer
            .subscribe(&["bench".to_string()])
            .await
            .expect("subscribe");
        let mut received = 0u64;
        while received < RECORDS {
            received += consumer
                .poll(Duration::from_millis(100))
                .await
                .expect("poll")
                .len() as u64;
        }
    }

    async fn produce_batches(conn: &Connection) {
        let producer = SimProducer::new(conn.clone(), ProducerConfig::default());
        let mut sent = 0;
        while sent < RECORDS {
            let tp = TopicPartition::new("bench", (sent / BATCH_RECORDS) as u32 % PARTITIONS);
            let batch = (sent..sent + BATCH_RECORDS)
                .map(|i| Record {
                    key: None,
                    value: Some(Bytes::from(i.to_string())),
                    headers: Vec::new(),
                    timestamp_ms: 0,
                })
                .collect();
            if producer.send_batch(&tp, batch).await.is_ok() {
                sent += BATCH_RECORDS;
            }
        }
    }

    async fn produce_accumulated(conn: &Connection) {
        let config = ProducerConfig {
            linger_ms: 5,
            batch_size: 16_384,
            max_in_flight_requests_per_connection: 5,
            ..ProducerConfig::default()
        };
        let producer = SimProducer::new(conn.clone(), config);
        let mut reports = Vec::with_capacity(RECORDS as usize);
        for i in 0..RECORDS {
            let record = ProducerRecord {
                topic: "bench".into(),
                partition: Some(i as u32 % PARTITIONS),
                key: None,
                value: Some(Bytes::from(i.to_string())),
                headers: Vec::new(),
            };
            reports.push(producer.send_async(record).await.expect("queued"));
        }
        producer
            .flush(Duration::from_secs(600))
            .await
            .expect("flush");
        for report in reports {
            report.await.expect("delivered");
        }
    }

    struct AllUp;
    impl eosim_sim::kafka::model::Env for AllUp {
        fn broker_up(&self, _: u32) -> bool {
            true
        }
        fn link_up(&self, _: u32, _: u32) -> bool {
            true
        }
        fn controller_link_up(&self, _: u32) -> bool {
            true
        }
    }

    fn simulator(c: &mut Criterion) {
        for mode in [Produce::Batches, Produce::Accumulator] {
            let (wall, sim, marks) = run_once(1, mode);
            let count = |name: &str| marks.get(name).copied().unwrap_or(0);
            let requests = count("client:produce-batch");
            let per_request = match mode {
                Produce::Batches => BATCH_RECORDS as f64,
                Produce::Accumulator => {
                    count("client:produce-batch-record") as f64 / requests.max(1) as f64
                }
            };
            println!(
                "simulator ({mode:?}): {RECORDS} records in {:.3} s wall, {:.1} s simulated: \
                 {:.0} records/s, {:.0} simulated s per wall s, {per_request:.1} records per \
                 Produce request",
                wall.as_secs_f64(),
                sim.as_secs_f64(),
                RECORDS as f64 / wall.as_secs_f64(),
                sim.as_secs_f64() / wall.as_secs_f64()
            );
        }
        let mut group = c.benchmark_group("simulator");
        group.sample_size(10);
        group.throughput(Throughput::Elements(RECORDS));
        group.bench_function("kafka_100k_records_3_brokers_6_partitions", |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|i| run_once(i + 1, Produce::Batches).0)
                    .sum()
            })
        });
        group.bench_function("kafka_100k_records_batching_producer", |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|i| run_once(i + 1, Produce::Accumulator).0)
                    .sum()
            })
        });
        group.finish();
    }

    criterion_group!(benches, simulator);
}

#[cfg(madsim)]
criterion::criterion_main!(bench::benches);

#[cfg(not(madsim))]
fn main() {
    eprintln!("the simulator bench needs --cfg madsim: run `cargo xtask bench`");
}
