//! Reading a state at the size cap: a 64 MiB (decompressed) state v4 document, gzipped and split
//! into 1 MiB chunk Secrets the way Terraform's backend splits it, read by
//! `contract::state::read_state` (order chunks, gunzip them as one stream, parse skipping
//! instances).
//!
//! Baselines in the same run, over the same decompressed bytes:
//! - `serde_json_value`: `serde_json::from_slice::<Value>` alone, what a naive reader would do;
//! - `gunzip_only`: decompression alone, the floor under any reader.
//!
//! Throughput is reported in decompressed bytes per second.

use contract::names::{chunk_secret_name, state_secret_name};
use contract::state::{MAX_STATE_BYTES, StateSecret, StateSet, read_state};
use criterion::{
    BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use flate2::Compression;
use flate2::write::GzEncoder;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::hint::black_box;
use std::io::{Read, Write};

const SUFFIX: &str = "0123456789abcdef-c";
const CHUNK: usize = 1_048_576;

/// A small deterministic generator, so every run benchmarks the same bytes.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn hex(&mut self, len: usize) -> String {
        let mut s = String::with_capacity(len);
        while s.len() < len {
            let _ = write!(s, "{:016x}", self.next());
        }
        s.truncate(len);
        s
    }
}

/// One resource block with `count` instances of cloud-instance-like attributes.
fn resource(rng: &mut XorShift, index: usize, count: usize) -> String {
    let mut instances = Vec::with_capacity(count);
    for i in 0..count {
        let id = format!("i-{}", rng.hex(17));
        let attributes = format!(
            concat!(
                r#"{{"ami":"ami-{ami}","arn":"arn:aws:ec2:eu-west-1:123456789012:instance/{id}","#,
                r#""associate_public_ip_address":false,"availability_zone":"eu-west-1{az}","#,
                r#""cpu_options":[{{"core_count":2,"threads_per_core":2}}],"ebs_optimized":true,"#,
                r#""id":"{id}","instance_type":"m6i.xlarge","private_ip":"10.{a}.{b}.{c}","#,
                r#""root_block_device":[{{"delete_on_termination":true,"encrypted":true,"iops":3000,"#,
                r#""volume_id":"vol-{vol}","volume_size":100,"volume_type":"gp3"}}],"#,
                r#""tags":{{"captf.io/cluster":"prod","captf.io/kind":"TerraformMachine","#,
                r#""captf.io/name":"prod-md-0-{name}","captf.io/namespace":"team-a"}},"#,
                r#""user_data_base64":"{blob}","vpc_security_group_ids":["sg-{sg}"]}}"#
            ),
            ami = rng.hex(17),
            id = id,
            az = ["a", "b", "c"][i % 3],
            a = rng.next() % 256,
            b = rng.next() % 256,
            c = rng.next() % 256,
            vol = rng.hex(17),
            name = rng.hex(5),
            blob = "I2Nsb3VkLWNvbmZpZwpydW5jbWQ6CiAgLSBrdWJlYWRtIGpvaW4K".repeat(24),
            sg = rng.hex(17),
        );
        instances.push(format!(
            r#"{{"index_key":{i},"schema_version":1,"attributes":{attributes},"sensitive_attributes":[],"private":"{private}","dependencies":["module.role.aws_security_group.nodes"]}}"#,
            private = rng.hex(96)
        ));
    }
    format!(
        r#"{{"module":"module.role","mode":"managed","type":"aws_instance","name":"node_{index}","provider":"provider[\"registry.opentofu.org/hashicorp/aws\"]","instances":[{}]}}"#,
        instances.join(",")
    )
}

/// A state v4 document of at most `MAX_STATE_BYTES` bytes, as close to it as whole resources get.
fn state_document() -> Vec<u8> {
    let head = r#"{"version":4,"terraform_version":"1.12.6","serial":42,"lineage":"5c1e9a3e-0000-4000-8000-000000000001","outputs":{"provider_id":{"value":"aws:///eu-west-1a/i-0123","type":"string","sensitive":true},"health":{"value":{"state":"running","healthy":true,"message":null,"reasons":[]},"type":["object",{"healthy":"bool","message":"string","reasons":["list","string"],"state":"string"}],"sensitive":true}},"resources":["#;
    let tail = r#"],"check_results":null}"#;
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let mut body = String::with_capacity(MAX_STATE_BYTES);
    let mut index = 0;
    loop {
        let next = resource(&mut rng, index, 1 + index % 4);
        let separator = usize::from(index > 0);
        if head.len() + body.len() + separator + next.len() + tail.len() > MAX_STATE_BYTES {
            break;
        }
        if separator == 1 {
            body.push(',');
        }
        body.push_str(&next);
        index += 1;
    }
    let mut document = String::with_capacity(head.len() + body.len() + tail.len());
    document.push_str(head);
    document.push_str(&body);
    document.push_str(tail);
    document.into_bytes()
}

fn chunk_secrets(compressed: &[u8]) -> Vec<StateSecret> {
    let base = state_secret_name(SUFFIX);
    compressed
        .chunks(CHUNK)
        .enumerate()
        .map(|(i, bytes)| StateSecret {
            name: chunk_secret_name(&base, i),
            labels: BTreeMap::from([
                ("tfstate".to_owned(), "true".to_owned()),
                ("tfstateSecretSuffix".to_owned(), SUFFIX.to_owned()),
                ("tfstateWorkspace".to_owned(), "default".to_owned()),
            ]),
            annotations: BTreeMap::from([(
                "captf.io/inputs-hash".to_owned(),
                "h2:bench".to_owned(),
            )]),
            data: BTreeMap::from([("tfstate".to_owned(), bytes.to_vec())]),
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let document = state_document();
    let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
    encoder.write_all(&document).expect("gzip");
    let compressed = encoder.finish().expect("gzip");
    let secrets = chunk_secrets(&compressed);
    let set = StateSet::Live { suffix: SUFFIX };

    let summary = read_state(set, &secrets).expect("the benchmark state reads");
    eprintln!(
        "state: {} bytes decompressed, {} bytes compressed ({:.1}x), {} chunks, {} managed resources",
        document.len(),
        compressed.len(),
        document.len() as f64 / compressed.len() as f64,
        secrets.len(),
        summary.managed_resources
    );

    let mut group = c.benchmark_group("state_read_64MiB");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.throughput(Throughput::Bytes(document.len() as u64));
    group.bench_function(BenchmarkId::new("read_state", "chunks+gunzip+parse"), |b| {
        b.iter(|| read_state(set, black_box(&secrets)).expect("reads"));
    });
    group.bench_function(BenchmarkId::new("baseline", "serde_json_value"), |b| {
        b.iter(|| {
            serde_json::from_slice::<serde_json::Value>(black_box(&document)).expect("parses")
        });
    });
    group.bench_function(BenchmarkId::new("baseline", "gunzip_only"), |b| {
        b.iter(|| {
            let mut out = Vec::with_capacity(document.len());
            flate2::bufread::MultiGzDecoder::new(black_box(compressed.as_slice()))
                .read_to_end(&mut out)
                .expect("gunzip");
            out
        });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
