//! `cargo bench` in bench-peers/zlib: compressing 16 KiB bodies, each candidate in the same run.
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use rmq_bench_zlib::{bodies, lz4, miniz, zlib_rs, zstd};

fn compress(c: &mut Criterion) {
    for (name, body) in bodies(16 * 1024) {
        let mut g = c.benchmark_group(format!("compress-16KiB-{name}"));
        g.throughput(Throughput::Bytes(body.len() as u64));
        g.bench_function(BenchmarkId::new("zlib-5", "miniz_oxide"), |b| {
            b.iter(|| miniz(&body, 5))
        });
        g.bench_function(BenchmarkId::new("zlib-5", "zlib-rs"), |b| {
            b.iter(|| zlib_rs(&body, 5))
        });
        g.bench_function(BenchmarkId::new("lz4", "lz4_flex"), |b| {
            b.iter(|| lz4(&body))
        });
        g.bench_function(BenchmarkId::new("zstd-5", "zstd"), |b| {
            b.iter(|| zstd(&body, 5))
        });
        g.finish();
        eprintln!(
            "SIZES {name}: zlib-5 miniz {} B, zlib-rs {} B, lz4 {} B, zstd-5 {} B (of {})",
            miniz(&body, 5).len(),
            zlib_rs(&body, 5).len(),
            lz4(&body).len(),
            zstd(&body, 5).len(),
            body.len()
        );
    }
}

criterion_group!(benches, compress);
criterion_main!(benches);
